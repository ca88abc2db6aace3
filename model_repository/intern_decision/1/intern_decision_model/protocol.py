"""The wire protocol between the shim and the model (docs/wire-protocol.md is its description).

Request: the REQUEST tensor holds one UTF-8 JSON object, one predict() request. Response: the RESPONSE tensor holds
predict()'s output unchanged plus prompt_sha256, prompt_version and model_facts. An error travels as a Triton error
whose code the shim maps without parsing prose, and whose message starts with a stable kind word and a colon.
"""
from __future__ import annotations

import enum
import json
import math
import re

from .guard import OutOfMemory


class Kind(enum.Enum):
    """(kind word at the start of the error message, outcome label in the calls metric)"""

    INVALID = ("invalid_request", "invalid")
    OUT_OF_MEMORY = ("out_of_memory", "out_of_memory")
    FAILED = ("scoring_failed", "failed")

    @property
    def word(self) -> str:
        return self.value[0]

    @property
    def outcome(self) -> str:
        return self.value[1]


OUTCOMES = ("ok",) + tuple(kind.outcome for kind in Kind)


class InvalidRequest(ValueError):
    """The request string is not a usable predict() request."""


class AnswerNotEncodable(Exception):
    """predict()'s output could not be written as strict JSON."""


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _refuse_constant(name: str) -> None:
    raise InvalidRequest(f"the request is not strict JSON: {name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidRequest(f"the request is not strict JSON: {text} does not fit a finite number")
    return value


def decode_request(raw: bytes | None) -> dict:
    if raw is None:
        raise InvalidRequest("the request carries no REQUEST tensor")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"the request is not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        request = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"the request is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise InvalidRequest("the request is nested too deeply") from None
    except InvalidRequest:
        raise
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise InvalidRequest(f"the request is not usable JSON: {exc}") from None
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(request, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRequest("the request is not usable JSON: it escapes a lone UTF-16 surrogate") from None
    if not isinstance(request, dict):
        raise InvalidRequest(f"the request must be a JSON object, got {type(request).__name__}")
    if request.get("images"):
        raise InvalidRequest("this service takes no images")
    return request


def encode_answer(answer: dict) -> bytes:
    try:
        return json.dumps(answer, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise AnswerNotEncodable(f"the answer cannot be written as JSON: {exc}") from None


def kind_of(exc: BaseException) -> Kind:
    if isinstance(exc, OutOfMemory):
        return Kind.OUT_OF_MEMORY
    if isinstance(exc, ValueError):
        return Kind.INVALID
    return Kind.FAILED


def error_message(kind: Kind, exc: BaseException) -> str:
    return f"{kind.word}: {exc}"
