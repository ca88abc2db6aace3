"""Triton python backend for Intern-Decision: one predict() per JSON-string request.

The work is done in intern_decision_model (beside this file, importable without Triton); this file only adapts it
to Triton: configuration and startup in initialize, tensors and errors in execute, metrics, and logging through
pb_utils.Logger. A request id given by the caller (tritonclient's request_id) appears in every log line about it.
"""
import os

# INV-5: set before anything can import torch or transformers.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import logging  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402

from intern_decision_model import protocol  # noqa: E402
from intern_decision_model.engine import ServingEngine  # noqa: E402
from intern_decision_model.metrics import ModelMetrics  # noqa: E402
from intern_decision_model.settings import Settings, instance_device  # noqa: E402


def _triton_codes() -> dict:
    # pb_utils.TritonError exists only once the stub has started, not while this file is imported.
    return {
        protocol.Kind.INVALID: pb_utils.TritonError.INVALID_ARG,
        protocol.Kind.OUT_OF_MEMORY: pb_utils.TritonError.UNAVAILABLE,
        protocol.Kind.FAILED: pb_utils.TritonError.INTERNAL,
    }


class _TritonLogHandler(logging.Handler):
    """Sends the package's logging records to Triton's log."""

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        if record.levelno >= logging.ERROR:
            pb_utils.Logger.log_error(text)
        elif record.levelno >= logging.WARNING:
            pb_utils.Logger.log_warn(text)
        else:
            pb_utils.Logger.log_info(text)


log = logging.getLogger("intern_decision")


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
        try:
            settings = Settings.from_env(os.environ)
            device = instance_device(settings.device, args["model_instance_kind"], args["model_instance_device_id"])
            self._engine = ServingEngine.start(settings, device)
        except Exception as exc:
            log.error("startup refused: %s: %s", type(exc).__name__, exc)
            raise
        self._metrics = ModelMetrics(pb_utils, args["model_name"], self._engine.facts)
        self._codes = _triton_codes()

    def execute(self, requests):
        return [self._respond(request) for request in requests]

    def _respond(self, request):
        """Always a response: the answer, or a Triton error whose message starts with the protocol's kind word."""
        started = time.perf_counter()
        request_id = request.request_id() or "-"
        outcome, tokens = "ok", None
        try:
            tensor = pb_utils.get_input_tensor_by_name(request, "REQUEST")
            payload = protocol.decode_request(None if tensor is None else _single_bytes(tensor))
            answer = self._engine.answer(payload)
            tokens = answer["usage"]["input_tokens"]
            output = pb_utils.Tensor("RESPONSE", np.array([protocol.encode_answer(answer)], dtype=np.object_))
            response = pb_utils.InferenceResponse(output_tensors=[output])
        except Exception as exc:
            kind = protocol.kind_of(exc)
            outcome, message = kind.outcome, protocol.error_message(kind, exc)
            log.warning("request %s: %s", request_id, message)
            response = pb_utils.InferenceResponse(output_tensors=[],
                                                  error=pb_utils.TritonError(message, self._codes[kind]))
        self._record(outcome, time.perf_counter() - started, tokens)
        return response

    def _record(self, outcome, seconds, tokens):
        # Metrics must never cost a caller its answer.
        try:
            self._metrics.record(outcome, seconds, tokens, self._engine.memory)
        except Exception:
            log.exception("metrics update failed")

    def finalize(self):
        engine, self._engine = getattr(self, "_engine", None), None
        if engine is not None:
            engine.close()
            log.info("finalized: engine released")


def _single_bytes(tensor) -> bytes:
    values = tensor.as_numpy().reshape(-1)
    if values.size != 1:
        raise protocol.InvalidRequest(f"REQUEST must hold exactly one string, got {values.size}")
    value = values[0]
    return value if isinstance(value, bytes) else str(value).encode("utf-8")
