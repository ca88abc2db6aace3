"""One JSON line per call in Triton's log, successes included, written off the response path.

    {"request_id": "<request id>.<call index>", "outcome": "ok", "input_tokens": 358, "ms": 27.31}
    {"request_id": "<request id>.<call index>", "outcome": "invalid", "input_tokens": null, "ms": 0.2,
     "error": "invalid_request: call 1: ..."}

With "trace_id": "<32 hex digits>" after "ms" when the shim traces the request (docs/operations.md, "Tracing").

outcome is the calls counter's label (intern_decision_calls_total); ms is the model's time on the call (the
inference-seconds histogram's). Never the state, a question or an option: only ids, the outcome, sizes and time.
Triton writes each line after its own prefix, as an escaped JSON string:  I1130 15:40:59.961443 20912
model.py:37] "{\"request_id\": ...}".

Each pb_utils.Logger line is a round trip from the python backend stub to the server (about 50 µs measured on the
CPU stack), so callers only queue the lines (logging's QueueHandler) and a QueueListener thread hands them to
Triton's log; close() writes what is queued.
"""
from __future__ import annotations

import json
import logging
import queue
from dataclasses import dataclass
from logging.handlers import QueueHandler, QueueListener

from .metrics import CallRecord

CALL_LOGGER = "intern_decision.calls"


@dataclass(frozen=True)
class CallFailure:
    """The call a request stopped at, and the error it was answered with."""

    call: int  # the failed call's index
    error: str


def call_line(request_id: str, index: int, call: CallRecord, error: str | None = None,
              trace_id: str | None = None) -> str:
    line = {"request_id": f"{request_id}.{index}", "outcome": call.outcome, "input_tokens": call.input_tokens,
            "ms": round(call.seconds * 1000, 3)}
    if trace_id is not None:
        line["trace_id"] = trace_id
    if error is not None:
        line["error"] = error
    return json.dumps(line, ensure_ascii=False)


class CallLog:
    def __init__(self, handler: logging.Handler):
        """handler: where the lines end up (Triton's log); it should format a record as its message alone."""
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._queue_handler = QueueHandler(self._queue)
        self._logger = logging.getLogger(CALL_LOGGER)
        self._logger.addHandler(self._queue_handler)
        self._logger.setLevel(logging.INFO)
        self._logger.propagate = False
        self._listener = QueueListener(self._queue, handler)
        self._listener.start()

    def write(self, request_id: str, calls: list[CallRecord], failure: CallFailure | None = None,
              trace_id: str | None = None) -> None:
        """One line per call that ran, in order, from call 0. With a failure, the last record is the failed call's.
        trace_id: the shim's trace of the request, when it traces. Returns at once."""
        for index, call in enumerate(calls):
            if failure is not None and index == len(calls) - 1:
                self._logger.warning(call_line(request_id, failure.call, call, failure.error, trace_id))
            else:
                self._logger.info(call_line(request_id, index, call, trace_id=trace_id))

    def close(self) -> None:
        self._logger.removeHandler(self._queue_handler)
        self._listener.stop()
