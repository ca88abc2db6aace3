"""Triton python backend for Intern-Decision: one inference request carries all of an HTTP request's calls
(docs/wire-protocol.md). The work is in intern_decision_model; this file only adapts it to Triton."""
import os

# INV-5: set before anything can import torch or transformers.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# One thread pool is enough for a tokenizer that encodes one call at a time; the in-process baseline sets the same.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import logging  # noqa: E402
import time  # noqa: E402
from contextlib import closing  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402

from intern_decision_model import protocol  # noqa: E402
from intern_decision_model.calllog import CallFailure, CallLog  # noqa: E402
from intern_decision_model.checkpoint import StartupRefused  # noqa: E402
from intern_decision_model.engine import ServingEngine  # noqa: E402
from intern_decision_model.metrics import CallRecord, ModelMetrics  # noqa: E402
from intern_decision_model.settings import Settings, instance_device  # noqa: E402
from wire import answer as wire_answer  # noqa: E402
from wire.protocol import OK_OUTCOME, REQUEST, RESPONSE, STATE, error_message, trace_id_of  # noqa: E402


class _TritonLogHandler(logging.Handler):
    """Sends the package's logging records to Triton's log."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            if record.levelno >= logging.ERROR:
                pb_utils.Logger.log_error(text)
            elif record.levelno >= logging.WARNING:
                pb_utils.Logger.log_warn(text)
            else:
                pb_utils.Logger.log_info(text)
        except Exception:  # logging's rule: a handler never raises, so the call log's thread lives on
            self.handleError(record)


log = logging.getLogger("intern_decision")


@dataclass(frozen=True)
class DecodedCall:
    """One call of the request, read: the predict() request, and the time reading it took (part of the call's)."""

    payload: dict
    decode_seconds: float


class _CallTimer:
    """The call under way and when its current step began: what a failure is charged to."""

    def __init__(self) -> None:
        self.start(0)

    def start(self, call: int) -> None:
        self.call, self._started = call, time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self._started


def _route_logging() -> None:
    if not any(isinstance(handler, _TritonLogHandler) for handler in log.handlers):
        handler = _TritonLogHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


class TritonPythonModel:
    def initialize(self, args):
        _route_logging()
        self._engine = None
        try:
            settings = Settings.from_env(os.environ)
            device = instance_device(settings.device, args["model_instance_kind"], args["model_instance_device_id"])
            self._engine = ServingEngine.start(settings, device)
            self._metrics = _start_metrics(args["model_name"], self._engine)
            self._call_log = CallLog(_TritonLogHandler())  # the message alone: each line is a JSON object
        except Exception as exc:
            log.error("startup refused: %s: %s", type(exc).__name__, exc)
            self.finalize()
            raise

    def execute(self, requests):
        return [self._respond(request) for request in requests]

    def _respond(self, request):
        """Always a response: every call's answer, or a Triton error naming the kind and the failed call."""
        request_id = request.request_id() or "-"
        records: list[CallRecord] = []  # one per call answered, then the failed call's
        failure: CallFailure | None = None
        timer = _CallTimer()  # a failure before the first call is call 0's
        try:
            raws = _call_strings(pb_utils.get_input_tensor_by_name(request, REQUEST))
            if not raws:
                return _pong()
            timer.start(0)
            state = _shared_state(pb_utils.get_input_tensor_by_name(request, STATE))  # parsed once, in call 0's time
            decoded: list[DecodedCall] = []
            for call, raw in enumerate(raws):  # every call is read before any is scored
                if call:
                    timer.start(call)
                decoded.append(DecodedCall(protocol.decode_call(raw, state), timer.seconds()))
            encoded: list[bytes] = []
            with closing(self._engine.answer_calls([each.payload for each in decoded])) as answers:
                for call, each in enumerate(decoded):  # scored one after another; the first failure ends the request
                    timer.start(call)
                    answer = next(answers)
                    encoded.append(protocol.encode_answer(answer))
                    records.append(CallRecord(OK_OUTCOME, each.decode_seconds + timer.seconds(),
                                              wire_answer.input_tokens(answer)))
                    # counted as each call ends: the liveness check tells a busy model from a hung one by it
                    self._metrics.record(records[-1:])
            output = pb_utils.Tensor(RESPONSE, np.array(encoded, dtype=np.object_))
            response = pb_utils.InferenceResponse(output_tensors=[output])
        except Exception as exc:
            kind = protocol.kind_of(exc)
            records.append(CallRecord(kind.outcome, timer.seconds(), None))
            self._metrics.record(records[-1:])
            failure = CallFailure(timer.call, error_message(kind, timer.call, str(exc)))
            response = pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(
                failure.error, getattr(pb_utils.TritonError, kind.triton_code)))
        self._call_log.write(request_id, records, failure, trace_id_of(request.parameters()))
        return response

    def finalize(self):
        metrics, self._metrics = getattr(self, "_metrics", None), None
        if metrics is not None:
            metrics.close()
        call_log, self._call_log = getattr(self, "_call_log", None), None
        if call_log is not None:
            call_log.close()
        engine, self._engine = getattr(self, "_engine", None), None
        if engine is not None:
            engine.close()
            log.info("finalized: engine released")


def _start_metrics(model_name, engine):
    try:
        return ModelMetrics(pb_utils, model_name, engine.facts, lambda: engine.memory,
                            lambda: engine.memory_baseline, engine.graph_facts)
    except Exception as exc:
        raise StartupRefused(f"metrics check failed: the model's metrics could not be registered: "
                             f"{type(exc).__name__}: {exc}") from exc


def _pong():
    """The answer to a ping (wire/ping.py): an empty RESPONSE, so the caller knows that execute runs."""
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(RESPONSE, np.array([], dtype=np.object_))])


def _shared_state(tensor) -> protocol.SharedState | None:
    if tensor is None:
        return None
    values = _strings(tensor)
    if len(values) != 1:
        raise protocol.InvalidRequest(f"{STATE} must hold one state, got {len(values)}")
    return protocol.decode_state(values[0])


def _strings(tensor) -> list:
    values = tensor.as_numpy().reshape(-1)
    return [value if isinstance(value, bytes) else str(value).encode("utf-8") for value in values]


def _call_strings(tensor) -> list:
    if tensor is None:
        raise protocol.InvalidRequest(f"the request carries no {REQUEST} tensor")
    return _strings(tensor)
