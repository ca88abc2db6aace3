"""Tensors and errors of the wire protocol (docs/wire-protocol.md): REQUEST [n] and RESPONSE [n] in run order,
STATE once for all the calls, and an error message `<kind word>: call <k>: <detail>`."""
from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass

MODEL_NAME = "intern_decision"
REQUEST = "REQUEST"
# Optional, [1]: the state every call of the request shares, as JSON text, sent once; its calls then carry none.
# The shim always sends it; without it each call carries its own state.
STATE = "STATE"
RESPONSE = "RESPONSE"
# Both tensors hold strings: BYTES on the wire (KServe v2), TYPE_STRING in the model's config.pbtxt and
# configs/cpu.pbtxt, which cannot import this module (tests/unit/test_wire.py holds them to these names).
DATATYPE = "BYTES"
CONFIG_DATA_TYPE = "TYPE_STRING"
# A traced request's trace id (32 hex digits), a string parameter of the inference request, for the model's call log.
TRACE_ID_PARAMETER = "trace_id"
_TRACE_ID = re.compile(r"[0-9a-f]{32}")


def predict_request(state: object, call: dict) -> dict:
    """The predict() request of a call sent without its state: the state first, as when the call carried it."""
    return {"state": state, **call}


def trace_id_of(parameters: str | None) -> str | None:
    """The trace id in an inference request's parameters (their JSON, as the python backend gives them), or None."""
    try:
        value = json.loads(parameters or "{}").get(TRACE_ID_PARAMETER)
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and _TRACE_ID.fullmatch(value) else None


class Kind(enum.Enum):
    """A failure of the model side: its error message's first word, its TritonError code, the HTTP status Triton
    gives that code, the calls counter's outcome label (what the shim answers for it: shim/errors/failures.py)."""

    INVALID = ("invalid_request", "INVALID_ARG", 400, "invalid")
    OUT_OF_MEMORY = ("out_of_memory", "UNAVAILABLE", 503, "out_of_memory")
    FAILED = ("scoring_failed", "INTERNAL", 500, "failed")

    def __init__(self, word: str, triton_code: str, triton_status: int, outcome: str):
        self.word = word
        self.triton_code = triton_code
        self.triton_status = triton_status
        self.outcome = outcome


OK_OUTCOME = "ok"
OUTCOMES = (OK_OUTCOME,) + tuple(kind.outcome for kind in Kind)

_ERROR = re.compile(r"(?P<word>[a-z_]+): call (?P<call>[0-9]+): (?P<detail>.*)", re.DOTALL)


@dataclass(frozen=True)
class CallError:
    kind: Kind
    call: int
    detail: str


def error_message(kind: Kind, call: int, detail: str) -> str:
    return f"{kind.word}: call {call}: {detail}"


def parse_error(triton_status: int | str | None, message: str) -> CallError | None:
    """The model's error from Triton's status and message, or None when Triton answered the error itself."""
    match = _ERROR.fullmatch(message)
    if match is None:
        return None
    for kind in Kind:
        if kind.word == match["word"] and str(kind.triton_status) == str(triton_status):
            return CallError(kind, int(match["call"]), match["detail"])
    return None
