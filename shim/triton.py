"""The model behind Triton, over tritonclient's asyncio HTTP client (the wire protocol: docs/wire-protocol.md).

Inference and health use separate clients, so /health never queues behind an inference's connection. The model
facts come from the intern_decision_model_info gauge on Triton's metrics port, which Triton serves itself.
"""
from __future__ import annotations

import asyncio
import json

import aiohttp
import numpy as np
import tritonclient.http.aio as triton_http
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.http import InferInput
from tritonclient.utils import InferenceServerException

from .errors import from_triton, model_unavailable
from .settings import ShimSettings

INFO_METRIC = "intern_decision_model_info"
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


def facts_from_metrics(text: str, model_name: str) -> dict | None:
    """The model's pins and limits from the info gauge, or None while the model has not published them."""
    for family in text_string_to_metric_families(text):
        if family.name != INFO_METRIC:
            continue
        for sample in family.samples:
            labels = dict(sample.labels)
            if labels.pop("model", None) == model_name and sample.value == 1:
                cap = labels.get("vram_cap_gib", "")
                labels["vram_cap_gib"] = float(cap) if cap else None
                labels["max_tokens"] = int(labels["max_tokens"])
                return labels
    return None


class TritonModel:
    def __init__(self, settings: ShimSettings):
        self._settings = settings
        self._infer_client: triton_http.InferenceServerClient | None = None
        self._health_client: triton_http.InferenceServerClient | None = None
        self._metrics_session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        settings = self._settings
        self._infer_client = triton_http.InferenceServerClient(settings.triton_url,
                                                               conn_timeout=settings.call_timeout_seconds)
        self._health_client = triton_http.InferenceServerClient(settings.triton_url,
                                                                conn_timeout=settings.health_timeout_seconds)
        self._metrics_session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=settings.health_timeout_seconds))

    async def close(self) -> None:
        for client in (self._infer_client, self._health_client):
            if client is not None:
                await client.close()
        if self._metrics_session is not None:
            await self._metrics_session.close()

    async def predict(self, request: dict, request_id: str) -> dict:
        tensor = InferInput("REQUEST", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([json.dumps(request, ensure_ascii=False).encode()], dtype=np.object_))
        try:
            result = await self._infer_client.infer(self._settings.model_name, [tensor], request_id=request_id)
        except InferenceServerException as exc:
            raise from_triton(exc.status(), exc.message()) from None
        except TRANSPORT_ERRORS as exc:
            raise model_unavailable(f"Triton did not answer: {type(exc).__name__}: {exc}") from None
        return json.loads(result.as_numpy("RESPONSE")[0])

    async def ready(self) -> str | None:
        """None when Triton and the model are ready, else why not."""
        try:
            if not await self._health_client.is_server_ready():
                return "Triton is not ready"
            if not await self._health_client.is_model_ready(self._settings.model_name):
                return f"the model {self._settings.model_name!r} is not ready"
        except (InferenceServerException, *TRANSPORT_ERRORS) as exc:
            return f"Triton did not answer: {type(exc).__name__}: {exc}"
        return None

    async def facts(self) -> dict:
        try:
            async with self._metrics_session.get(self._settings.metrics_url) as response:
                response.raise_for_status()
                text = await response.text()
        except TRANSPORT_ERRORS as exc:
            raise model_unavailable(f"Triton's metrics did not answer: {type(exc).__name__}: {exc}") from None
        try:
            facts = facts_from_metrics(text, self._settings.model_name)
        except (ValueError, KeyError) as exc:
            raise model_unavailable(f"the model's {INFO_METRIC} cannot be read: {type(exc).__name__}: {exc}") from None
        if facts is None:
            raise model_unavailable(f"the model has not published {INFO_METRIC} yet")
        return facts
