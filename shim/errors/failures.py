"""How a call to the model failed (Failure) and why the model is unusable (Problem): fixed public words for callers,
the detail, which may carry Triton's text, for the log only."""
from __future__ import annotations

import enum
from typing import NamedTuple

from wire.protocol import Kind, parse_error

from .codes import INVALID, OUT_OF_MEMORY, SCORING_FAILED, UNAVAILABLE, PublicError
from .raised import ApiError

TRITON_UNREACHABLE = "triton unreachable"
TRITON_NOT_READY = "triton not ready"
TRITON_ERROR = "triton answered an error"
MODEL_NOT_READY = "model not ready"
MODEL_NOT_ANSWERING = "model not answering"
MODEL_FACTS_UNAVAILABLE = "model facts unavailable"
MODEL_UNAVAILABLE = UNAVAILABLE.words
# CUDA's own text names the card's capacity and other processes' ids: for the log only.
OUT_OF_MEMORY_WORDS = OUT_OF_MEMORY.words


class Problem(NamedTuple):
    public: str
    detail: str


class Failure(enum.Enum):
    """label: of triton_errors_total (None: not counted); marks_down: the watch takes the model for down."""

    INVALID = (Kind.INVALID.word, INVALID, False)
    OUT_OF_MEMORY = (Kind.OUT_OF_MEMORY.word, OUT_OF_MEMORY, False)
    FAILED = (Kind.FAILED.word, SCORING_FAILED, False)
    TRITON = ("model_unavailable", UNAVAILABLE, True)  # Triton's own error
    TRANSPORT = ("transport", UNAVAILABLE, True)  # no answer at all
    UNREADABLE = ("unreadable_answer", SCORING_FAILED, False)
    DOWN = (None, UNAVAILABLE, False)  # refused by the watch: nothing reached Triton

    def __init__(self, label: str | None, error: PublicError, marks_down: bool):
        self.label = label
        self.error = error
        self.marks_down = marks_down

    @classmethod
    def of(cls, kind: Kind) -> "Failure":
        return cls[kind.name]


class ModelFailure(ApiError):
    """reason: the fixed words a caller is told, `message` going to the log only; where: the failed part."""

    def __init__(self, failure: Failure, message: str, call: int | None = None,
                 headers: dict[str, str] | None = None, detail: list[dict] | None = None, reason: str | None = None,
                 where: str = ""):
        super().__init__(failure.error, message, headers, detail)
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
    """The model's answer lacks something a result needs: never guessed."""

    def __init__(self, message: str):
        super().__init__(Failure.UNREADABLE, message)


def from_triton(status: int | str | None, message: str) -> ModelFailure:
    error = parse_error(status, message)
    if error is None:
        return ModelFailure(Failure.TRITON, f"Triton answered {status or 'without a status'}: {message}",
                            reason=TRITON_ERROR)
    return ModelFailure(Failure.of(error.kind), error.detail, error.call)


def model_unavailable(message: str, reason: str = MODEL_UNAVAILABLE) -> ModelFailure:
    return ModelFailure(Failure.TRITON, message, reason=reason)


def unreachable(message: str) -> ModelFailure:
    return ModelFailure(Failure.TRANSPORT, message)
