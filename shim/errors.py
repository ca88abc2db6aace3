"""The error envelope, the shim's public errors, and the one failure type of a call to the model.

A failure is classified once, where it happens (the Triton adapter, the answer's reader, the watch), as a `Failure`
built on the wire protocol's `Kind`; the watch, the metrics and the HTTP answer read that one value.

Why the model cannot be used is told to callers (a 502, /health's reason, an MCP tool error) in a few fixed words
(Problem.public, chosen where the problem arises), never in the shim's detail, which may carry Triton's own text, an
exception's or an address, and which may come from another caller's request: the detail goes to the log only.
"""
from __future__ import annotations

import enum
from typing import NamedTuple

from wire.protocol import Kind, parse_error


class PublicError(NamedTuple):
    status: int
    code: str


UNAVAILABLE = PublicError(502, "model_unavailable")
# The refusals of a POST before it reaches the app (shim/edge/: auth, drain, encoding, admission, body), in the
# order they are checked.
UNAUTHORIZED = PublicError(401, "unauthorized")
UNSUPPORTED_MEDIA_TYPE = PublicError(415, "unsupported_media_type")
BUSY = PublicError(429, "busy")
REQUEST_TIMEOUT = PublicError(408, "request_timeout")
TOO_LARGE = PublicError(413, "request_too_large")
# A POST after a draining shim stopped admitting (shim/drain.py), after auth and before admission.
DRAINING = PublicError(503, "draining")
# The app's own: validation (and the model's ValueError), an answer that cannot be read, no such route.
INVALID = PublicError(422, "invalid_request")
SCORING_FAILED = PublicError(500, "scoring_failed")
HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}
# Headers refused by the server before there is a request (shim/server/).
HEADERS_TOO_LARGE = PublicError(431, "request_header_too_large")
# A request on a connection beyond MAX_CONNECTIONS (shim/server/), answered and closed.
TOO_MANY_CONNECTIONS = PublicError(503, "too_many_connections")
# A Transfer-Encoding other than chunked alone (shim/edge/framing.py).
UNSUPPORTED_TRANSFER_ENCODING = PublicError(501, "unsupported_transfer_encoding")
# Seconds a 429 or a draining 503 asks the caller to wait (Retry-After).
RETRY_AFTER_SECONDS = 1


# The words a caller is told about the model (a 502's message, /health's reason, an MCP tool error), chosen where the
# problem arises.
TRITON_UNREACHABLE = "triton unreachable"
TRITON_NOT_READY = "triton not ready"
TRITON_ERROR = "triton answered an error"
MODEL_NOT_READY = "model not ready"
MODEL_NOT_ANSWERING = "model not answering"
MODEL_FACTS_UNAVAILABLE = "model facts unavailable"
MODEL_UNAVAILABLE = "model unavailable"
# An out-of-memory's own text is CUDA's first error line: the card's capacity, its free memory, other processes' ids.
OUT_OF_MEMORY_WORDS = "the model ran out of GPU memory for this request; the service keeps answering"


class Problem(NamedTuple):
    """Why the model cannot be used, said twice where it arises: `public`, one of the fixed words above, for callers;
    `detail`, which may carry Triton's own text, an exception's or an address, for the log only."""

    public: str
    detail: str


class ApiError(Exception):
    """An error answered in the envelope with its status (and, on the System One routes, a 422's detail)."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None,
                 detail: list[dict] | None = None):
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"

    @property
    def public_message(self) -> str:
        """What the caller is told; `message` goes to the log."""
        return self.message


class UnprocessableRequest(ValueError):
    """A request either surface refuses before any model work: 422 invalid_request; the message names the field. A
    surface that answers with a structured detail (System One's FastAPI-shaped list) overrides `detail`."""

    @property
    def detail(self) -> list[dict] | None:
        return None


class Failure(enum.Enum):
    """How a call to the model failed.

    label:       the kind label of intern_decision_shim_triton_errors_total (None: not a Triton error, not counted)
    error:       what the caller is answered
    marks_down:  whether the watch takes the model for down and pings it at once
    """

    INVALID = (Kind.INVALID.word, PublicError(Kind.INVALID.status, Kind.INVALID.code), False)
    OUT_OF_MEMORY = (Kind.OUT_OF_MEMORY.word, PublicError(Kind.OUT_OF_MEMORY.status, Kind.OUT_OF_MEMORY.code), False)
    FAILED = (Kind.FAILED.word, PublicError(Kind.FAILED.status, Kind.FAILED.code), False)
    TRITON = ("model_unavailable", UNAVAILABLE, True)  # Triton answered an error of its own (a dead stub, not ready)
    TRANSPORT = ("transport", UNAVAILABLE, True)  # Triton did not answer at all: refused, reset, timed out
    UNREADABLE = ("unreadable_answer", SCORING_FAILED, False)  # an answer that lacks something a result needs
    DOWN = (None, UNAVAILABLE, False)  # refused by the watch while the model is down: nothing reached Triton

    def __init__(self, label: str | None, error: PublicError, marks_down: bool):
        self.label = label
        self.error = error
        self.marks_down = marks_down

    @classmethod
    def of(cls, kind: Kind) -> "Failure":
        return cls[kind.name]


class ModelFailure(ApiError):
    """call: the failed call's index within its inference request, when the model named it. reason: what a caller
    of a model_unavailable or out_of_memory failure is told, in fixed words (by default those of its kind of
    failure), `message` going to the log only. where: which part of the request failed (a surface's words, e.g.
    "requests[1]: call 0 (questions 1–3)"), told before the fixed words."""

    def __init__(self, failure: Failure, message: str, call: int | None = None,
                 headers: dict[str, str] | None = None, detail: list[dict] | None = None, reason: str | None = None,
                 where: str = ""):
        super().__init__(failure.error.status, failure.error.code, message, headers, detail)
        self.failure = failure
        self.call = call
        self.reason = reason if reason is not None else _PUBLIC_WORDS.get(failure, MODEL_UNAVAILABLE)
        self.where = where

    @property
    def public_message(self) -> str:
        if self.failure.error is UNAVAILABLE:
            return self.reason
        if self.failure is Failure.OUT_OF_MEMORY:
            return f"{self.where}: {self.reason}" if self.where else self.reason
        return self.message


_PUBLIC_WORDS = {Failure.TRANSPORT: TRITON_UNREACHABLE, Failure.OUT_OF_MEMORY: OUT_OF_MEMORY_WORDS}


class IncompleteAnswer(ModelFailure):
    """The model's answer lacks something a result needs; never guessed, always a 500 scoring_failed."""

    def __init__(self, message: str):
        super().__init__(Failure.UNREADABLE, message)


def envelope(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


def validation_detail(loc: list, message: str, kind: str = "value_error") -> list[dict]:
    """FastAPI's (and TypeSafe's) 422 detail, set beside the envelope as "detail", so their clients' typed errors
    read it: `loc` names the field, `kind` is the error's type."""
    return [{"loc": loc, "msg": message, "type": kind}]


def from_triton(status: int | str | None, message: str) -> ModelFailure:
    """The model's own error (its kind fails the whole request), or model_unavailable for Triton's own."""
    error = parse_error(status, message)
    if error is None:
        return ModelFailure(Failure.TRITON, f"Triton answered {status or 'without a status'}: {message}",
                            reason=TRITON_ERROR)
    return ModelFailure(Failure.of(error.kind), error.detail, error.call)


def model_unavailable(message: str, reason: str = MODEL_UNAVAILABLE) -> ModelFailure:
    return ModelFailure(Failure.TRITON, message, reason=reason)


def unreachable(message: str) -> ModelFailure:
    return ModelFailure(Failure.TRANSPORT, message)
