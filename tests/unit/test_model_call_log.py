"""The model's per-call log lines: JSON, one per call that ran, written by a thread of their own, flushed on close."""
import json
import logging
import threading

from intern_decision_model.calllog import CallFailure, CallLog, call_line
from intern_decision_model.metrics import CallRecord
from wire.protocol import TRACE_ID_PARAMETER, trace_id_of


class Collecting(logging.Handler):
    """Stands in for Triton's log: what arrives, at which level, on which thread."""

    def __init__(self):
        super().__init__()
        self.lines: list[tuple[int, str, str]] = []
        self.gate = threading.Event()
        self.gate.set()

    def emit(self, record):
        self.gate.wait(5)
        self.lines.append((record.levelno, self.format(record), threading.current_thread().name))


def test_a_line_names_the_call_and_says_outcome_tokens_and_time_only():
    line = json.loads(call_line("req-1", 2, CallRecord("ok", 0.02731, 358)))
    assert line == {"request_id": "req-1.2", "outcome": "ok", "input_tokens": 358, "ms": 27.31}
    failed = json.loads(call_line("req-1", 0, CallRecord("out_of_memory", 0.5, None), "out_of_memory: call 0: CUDA"))
    assert failed == {"request_id": "req-1.0", "outcome": "out_of_memory", "input_tokens": None, "ms": 500.0,
                      "error": "out_of_memory: call 0: CUDA"}


def test_every_call_is_logged_off_the_caller_thread_and_close_flushes():
    target = Collecting()
    target.gate.clear()  # Triton's log is slow: write() must not wait for it
    log = CallLog(target)
    log.write("r", [CallRecord("ok", 0.01, 100), CallRecord("ok", 0.02, 120), CallRecord("invalid", 0.001, None)],
              failure=CallFailure(2, "invalid_request: call 2: Supply 1–16 questions."))
    log.write("s", [CallRecord("failed", 0.001, None)], failure=CallFailure(3, "invalid_request: call 3: not JSON"))
    assert target.lines == []
    target.gate.set()
    log.close()
    assert [(level, json.loads(text)["request_id"], json.loads(text)["outcome"]) for level, text, _ in target.lines] \
        == [(logging.INFO, "r.0", "ok"), (logging.INFO, "r.1", "ok"), (logging.WARNING, "r.2", "invalid"),
            (logging.WARNING, "s.3", "failed")]
    assert json.loads(target.lines[2][1])["error"] == "invalid_request: call 2: Supply 1–16 questions."
    assert {thread for _, _, thread in target.lines} != {threading.current_thread().name}


def test_the_lines_do_not_reach_the_packages_other_handlers():
    target = Collecting()
    seen = Collecting()
    package = logging.getLogger("intern_decision")
    package.addHandler(seen)
    try:
        log = CallLog(target)
        log.write("r", [CallRecord("ok", 0.01, 100)])
        log.close()
    finally:
        package.removeHandler(seen)
    assert len(target.lines) == 1 and seen.lines == []


def test_a_traced_requests_lines_carry_its_trace_id_read_from_the_request_parameters():
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id_of(json.dumps({TRACE_ID_PARAMETER: trace_id})) == trace_id
    for untraced in (None, "", "{}", "not json", "[]", json.dumps({TRACE_ID_PARAMETER: "4BF9"}),
                     json.dumps({TRACE_ID_PARAMETER: trace_id.upper()}), json.dumps({TRACE_ID_PARAMETER: 7})):
        assert trace_id_of(untraced) is None, untraced
    target = Collecting()
    log = CallLog(target)
    log.write("r", [CallRecord("ok", 0.01, 100), CallRecord("invalid", 0.001, None)],
              failure=CallFailure(1, "invalid_request: call 1: x"), trace_id=trace_id)
    log.write("s", [CallRecord("ok", 0.01, 100)])
    log.close()
    lines = [json.loads(text) for _, text, _ in target.lines]
    assert [line.get("trace_id") for line in lines] == [trace_id, trace_id, None]
    assert "trace_id" not in lines[2]
