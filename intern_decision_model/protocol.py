"""The model's side of the wire protocol (wire/, docs/wire-protocol.md): reading one call, writing one answer, and
naming a failure's kind."""
from __future__ import annotations

from dataclasses import dataclass

from wire import strict_json
from wire.protocol import Kind, predict_request

from .guard import OutOfMemory


class InvalidRequest(ValueError):
    """The call's string is not a usable predict() request."""


class AnswerNotEncodable(Exception):
    """predict()'s output could not be written as strict JSON."""


@dataclass(frozen=True)
class SharedState:
    """The STATE a request's calls share, parsed once: each call's predict() request holds this one object, which
    predict() never mutates (its validate_request works on a deep copy)."""

    value: object


def decode_state(raw: bytes) -> SharedState:
    try:
        return SharedState(strict_json.loads(raw, "the state"))
    except strict_json.NotStrictJson as exc:
        raise InvalidRequest(str(exc)) from None


def decode_call(raw: bytes, shared: SharedState | None = None) -> dict:
    """One call's predict() request; shared: the request's STATE (then the call carries none), put first as when
    the call carried it."""
    try:
        request = strict_json.loads(raw, "the request")
    except strict_json.NotStrictJson as exc:
        raise InvalidRequest(str(exc)) from None
    if not isinstance(request, dict):
        raise InvalidRequest(f"the request must be a JSON object, got {type(request).__name__}")
    if shared is not None:
        if "state" in request:
            raise InvalidRequest("a call carries a state of its own beside the request's shared STATE")
        request = predict_request(shared.value, request)
    if request.get("images"):
        raise InvalidRequest("this service takes no images")
    return request


def encode_answer(answer: dict) -> bytes:
    try:
        return strict_json.dumps(answer)
    except (TypeError, ValueError) as exc:
        raise AnswerNotEncodable(f"the answer cannot be written as JSON: {exc}") from None


def kind_of(exc: BaseException) -> Kind:
    if isinstance(exc, OutOfMemory):
        return Kind.OUT_OF_MEMORY
    if isinstance(exc, ValueError):
        return Kind.INVALID
    return Kind.FAILED
