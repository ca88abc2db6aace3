"""One JSON line per call in Triton's log, never the state, a question or an option; queued off the response path,
as each pb_utils.Logger line is a round trip (docs/operations.md, "The model's log")."""
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
    call: int
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
        """The handler formats a record as its message alone."""
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
        """With a failure, the last record is the failed call's."""
        for index, call in enumerate(calls):
            if failure is not None and index == len(calls) - 1:
                self._logger.warning(call_line(request_id, failure.call, call, failure.error, trace_id))
            else:
                self._logger.info(call_line(request_id, index, call, trace_id=trace_id))

    def close(self) -> None:
        self._logger.removeHandler(self._queue_handler)
        self._listener.stop()
