"""The error envelope, and the mapping of Triton's errors onto it by the wire protocol's kinds (no prose parsing)."""
from __future__ import annotations

from dataclasses import dataclass

from wire.protocol import parse_error

UNAVAILABLE = (502, "model_unavailable")
# The refusals of a POST before it reaches the app (shim/middleware.py), in the order they are checked.
UNAUTHORIZED = (401, "unauthorized")
BUSY = (429, "busy")
REQUEST_TIMEOUT = (408, "request_timeout")
TOO_LARGE = (413, "request_too_large")
# A POST after a draining shim stopped admitting (shim/drain.py), after auth and before admission.
DRAINING = (503, "draining")
# The app's own: validation (and the model's ValueError), an answer that cannot be read, no such route.
INVALID = (422, "invalid_request")
SCORING_FAILED = (500, "scoring_failed")
HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}
# Headers refused by the server before there is a request (shim/server.py).
HEADERS_TOO_LARGE = (431, "request_header_too_large")
# Seconds a 429 or a draining 503 asks the caller to wait (Retry-After).
RETRY_AFTER_SECONDS = 1


@dataclass
class ApiError(Exception):
    status: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


def envelope(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


def from_triton(status: int | str | None, message: str) -> ApiError:
    """The model's own error (its kind fails the whole request), or model_unavailable for Triton's own."""
    error = parse_error(status, message)
    if error is None:
        return model_unavailable(f"Triton answered {status or 'without a status'}: {message}")
    return ApiError(error.kind.status, error.kind.code, error.detail)


class Unreachable(ApiError):
    """model_unavailable because Triton did not answer at all (refused, reset, timed out): the transport kind."""


def model_unavailable(message: str) -> ApiError:
    return ApiError(UNAVAILABLE[0], UNAVAILABLE[1], message)


def unreachable(message: str) -> ApiError:
    return Unreachable(UNAVAILABLE[0], UNAVAILABLE[1], message)
