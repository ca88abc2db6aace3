"""The model behind Triton (docs/wire-protocol.md): tritonclient's KServe v2 bodies over our own kept-alive
connections, one each for inferences, health and the watch, so /health never waits behind an inference."""
from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httptools
import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.http import InferenceServerClient, InferInput

from wire import ping, strict_json
from wire.answer import AnswerUnreadable, CallAnswer
from wire.env import host_port
from wire.facts import INFO_METRIC, ModelFacts
from wire.protocol import DATATYPE, REQUEST, RESPONSE, STATE, TRACE_ID_PARAMETER

from ..errors import (
    MODEL_FACTS_UNAVAILABLE,
    MODEL_NOT_ANSWERING,
    MODEL_NOT_READY,
    TRITON_NOT_READY,
    TRITON_UNREACHABLE,
    IncompleteAnswer,
    ModelFailure,
    Problem,
    from_triton,
    model_unavailable,
    unreachable,
)
from ..settings import ShimSettings
from ..tracing import current_trace_id, inject
from .graph_series import LiveGraphs, graphs_from_metrics
from .http1 import Http1Connection
from .model import Probe

TRANSPORT_ERRORS = (OSError, TimeoutError, httptools.HttpParserError)
# One thread builds the inference requests' bodies: the lock (INV-2) sends one at a time, so none waits for another.
_BODY_BUILDER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="triton-body")
JSON_HEADERS = {"Accept": "application/json"}


def facts_from_metrics(text: str, model_name: str) -> ModelFacts | None:
    """The model's pins and limits from the info gauge, or None while the model has not published them."""
    for family in text_string_to_metric_families(text):
        if family.name != INFO_METRIC:
            continue
        for sample in family.samples:
            labels = dict(sample.labels)
            if labels.pop("model", None) == model_name and sample.value == 1:
                return ModelFacts.from_labels(labels)
    return None


class TritonModel:
    def __init__(self, settings: ShimSettings):
        self._settings = settings
        self._infer_path = ping.infer_path(settings.model_name)
        self._key = {ping.API_KEY_HEADER: settings.triton_api_key}
        self._inference = Http1Connection(*host_port(settings.triton_url))
        self._health = Http1Connection(*host_port(settings.triton_url))
        self._control = Http1Connection(*host_port(settings.triton_url))
        metrics = urlsplit(settings.metrics_url)
        self._metrics = Http1Connection(metrics.hostname, metrics.port or 80)
        self._metrics_target = metrics.path + (f"?{metrics.query}" if metrics.query else "")

    async def open(self) -> None:
        """Connections open on first use."""

    async def close(self) -> None:
        for connection in (self._inference, self._health, self._control, self._metrics):
            await connection.close()

    async def predict_calls(self, state: object, calls: list[dict], request_id: str) -> list[CallAnswer]:
        """All the calls in one inference request; the whole request fails with the first call that fails."""
        trace_id = current_trace_id()
        body, json_size = await asyncio.get_running_loop().run_in_executor(_BODY_BUILDER, request_body, state, calls,
                                                                           request_id, trace_id)
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(json_size),
                   **self._key}
        if trace_id is not None:  # Triton's spans join the request's trace; the model logs the trace id
            inject(headers)
        timeout = self._settings.call_timeout_seconds * len(calls)
        try:
            response = await self._inference.request("POST", self._infer_path, timeout, body, headers)
        except TRANSPORT_ERRORS as exc:
            raise unreachable(f"Triton did not answer: {type(exc).__name__}: {exc}") from None
        if response.status != 200:
            raise from_triton(response.status, _triton_error(response.body))
        try:
            header_length = response.headers.get("inference-header-content-length")
            result = InferenceServerClient.parse_response_body(
                response.body, header_length=None if header_length is None else int(header_length))
            raws = result.as_numpy(RESPONSE).reshape(-1)
        except Exception as exc:  # tritonclient raises several kinds for an unreadable body
            raise IncompleteAnswer(f"the model's answer cannot be read: {type(exc).__name__}: {exc}") from None
        if len(raws) != len(calls):
            raise IncompleteAnswer(f"the model answered {len(raws)} calls of {len(calls)}")
        return [read_answer(raw, call) for call, raw in enumerate(raws)]

    async def ready(self) -> Problem | None:
        """None when Triton and the model are ready, else why not."""
        timeout = self._settings.health_timeout_seconds
        try:
            server = await self._health.request("GET", "/v2/health/ready", timeout, headers=JSON_HEADERS)
            if server.status != 200:
                return Problem(TRITON_NOT_READY, "Triton is not ready")
            model = await self._health.request("GET", f"/v2/models/{self._settings.model_name}/ready", timeout,
                                               headers=JSON_HEADERS)
            if model.status != 200:
                return Problem(MODEL_NOT_READY, f"the model {self._settings.model_name!r} is not ready")
        except TRANSPORT_ERRORS as exc:
            return Problem(TRITON_UNREACHABLE, f"Triton did not answer: {type(exc).__name__}: {exc}")
        return None

    async def ping(self) -> Probe:
        """Whether the model answers a ping (wire/ping.py), and when not whether Triton answered it."""
        timeout = self._settings.health_timeout_seconds
        try:
            response = await self._control.request("POST", self._infer_path, timeout, ping.BODY,
                                                   ping.headers(self._settings.triton_api_key))
        except TimeoutError:
            return Probe(False, Problem(MODEL_NOT_ANSWERING, f"the model did not answer a ping within {timeout:g} s"))
        except TRANSPORT_ERRORS as exc:
            return Probe(False, Problem(TRITON_UNREACHABLE, f"Triton did not answer: {type(exc).__name__}: {exc}"))
        problem = ping.pong_error(response.status, response.body)
        if problem is None:
            return Probe(True)
        return Probe(False, Problem(MODEL_NOT_ANSWERING, f"the model does not answer a ping: {problem}"),
                     triton_answered=True)

    async def facts(self) -> ModelFacts:
        text = await self._metrics_text()
        try:
            facts = facts_from_metrics(text, self._settings.model_name)
        except (ValueError, KeyError) as exc:
            raise facts_unavailable(f"the model's {INFO_METRIC} cannot be read: {type(exc).__name__}: {exc}") from None
        if facts is None:
            raise facts_unavailable(f"the model has not published {INFO_METRIC} yet")
        return facts

    async def graphs(self) -> LiveGraphs | None:
        try:
            return graphs_from_metrics(await self._metrics_text(), self._settings.model_name)
        except (ModelFailure, ValueError):
            return None

    async def _metrics_text(self) -> str:
        try:
            response = await self._metrics.request("GET", self._metrics_target,
                                                   self._settings.health_timeout_seconds)
        except TRANSPORT_ERRORS as exc:
            raise facts_unavailable(f"Triton's metrics did not answer: {type(exc).__name__}: {exc}") from None
        if response.status != 200:
            raise facts_unavailable(f"Triton's metrics answered {response.status}")
        try:
            return response.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise facts_unavailable(f"Triton's metrics are not UTF-8: {exc}") from None


def facts_unavailable(message: str) -> ModelFailure:
    return model_unavailable(message, MODEL_FACTS_UNAVAILABLE)


def request_body(state: object, calls: list[dict], request_id: str,
                 trace_id: str | None = None) -> tuple[bytes, int]:
    """The inference request's body and the length of its JSON header, the state once in STATE: its cost grows with
    the state and the number of calls (a 1 MiB state in 64 calls took 105–185 ms), so it is built on _BODY_BUILDER,
    never on the loop."""
    tensors = [_strings(REQUEST, [strict_json.dumps(call) for call in calls]),
               _strings(STATE, [strict_json.dumps(state)])]
    return InferenceServerClient.generate_request_body(
        tensors, request_id=request_id, parameters=None if trace_id is None else {TRACE_ID_PARAMETER: trace_id})


def _strings(name: str, texts: list[bytes]) -> InferInput:
    tensor = InferInput(name, [len(texts)], DATATYPE)
    tensor.set_data_from_numpy(np.array(texts, dtype=np.object_))
    return tensor


def read_answer(raw: bytes, call: int) -> CallAnswer:
    try:
        return CallAnswer.read(json.loads(raw))
    except (ValueError, AnswerUnreadable) as exc:  # AnswerUnreadable names what is missing
        raise IncompleteAnswer(f"the model's answer to call {call} cannot be read: {exc}") from None


def _triton_error(body: bytes) -> str:
    """The message of Triton's error body {"error": "..."}, or the body itself when it is not that."""
    try:
        message = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace")
    return message if isinstance(message, str) else json.dumps(message)
