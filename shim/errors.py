"""The error envelope, and the mapping of Triton's errors onto it by the model's kind words (no prose parsing)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ApiError(Exception):
    status: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


def envelope(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


# (Triton's HTTP status, the model's kind word) -> (our status, our code)
MODEL_ERRORS = {
    ("400", "invalid_request"): (422, "invalid_request"),
    ("503", "out_of_memory"): (503, "out_of_memory"),
    ("500", "scoring_failed"): (500, "scoring_failed"),
}
UNAVAILABLE = (502, "model_unavailable")


def from_triton(status: str | None, message: str) -> ApiError:
    kind, separator, detail = message.partition(": ")
    mapped = MODEL_ERRORS.get((status or "", kind)) if separator else None
    if mapped is None:
        return model_unavailable(f"Triton answered {status or 'without a status'}: {message}")
    return ApiError(mapped[0], mapped[1], detail)


def model_unavailable(message: str) -> ApiError:
    return ApiError(UNAVAILABLE[0], UNAVAILABLE[1], message)
