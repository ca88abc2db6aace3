"""GET /health: whether the model is usable (the watch's verdict, Triton's readiness, the model's facts), and the
model_up gauge, refreshed by a background loop so it is current without anyone calling /health."""
from __future__ import annotations

import asyncio
import logging
import time

from starlette.requests import Request
from starlette.responses import JSONResponse
from wire.facts import ModelFacts

from .errors import UNAVAILABLE, ApiError, envelope
from .metrics import ShimMetrics
from .model import Model
from .planning import CHUNKING, MAX_QUESTIONS_PER_CALL
from .settings import ShimSettings

log = logging.getLogger("intern_decision.shim")

FACTS_TTL_SECONDS = 5.0
MODEL_CHECK_SECONDS = 5.0  # how often the model_up gauge is refreshed without anyone calling /health


class FactsCache:
    """The model's facts from Triton's metrics port, re-read after FACTS_TTL_SECONDS so a reload shows up."""

    def __init__(self, model: Model, clock=time.monotonic):
        self._model = model
        self._clock = clock
        self._facts: ModelFacts | None = None
        self._read_at = 0.0

    async def get(self) -> ModelFacts:
        if self._facts is None or self._clock() - self._read_at > FACTS_TTL_SECONDS:
            self._facts = await self._model.facts()
            self._read_at = self._clock()
        return self._facts

    def clear(self) -> None:
        self._facts = None


class HealthCheck:
    def __init__(self, model: Model, metrics: ShimMetrics):
        self._model = model
        self._metrics = metrics
        self.facts = FactsCache(model)

    async def check(self) -> tuple[str | None, ModelFacts | None]:
        """(why the model is not usable, or None; its facts when it is), as /health says; sets model_up."""
        not_ready, facts = await self._model.ready(), None
        if not_ready is None:
            try:
                facts = await self.facts.get()
            except ApiError as exc:
                not_ready = exc.message
        if not_ready is not None:
            self.facts.clear()  # a reloaded model may bring other pins
        self._metrics.model_up.set(not_ready is None)
        return not_ready, facts

    async def keep_checking(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:
                self._metrics.model_up.set(0)
                log.exception("the background model check failed")
            await asyncio.sleep(MODEL_CHECK_SECONDS)


def health_body(settings: ShimSettings, facts: ModelFacts) -> dict:
    return {
        "status": "ok",
        "model": {key: value for key, value in facts.as_dict().items() if key not in ("vram_cap_gib", "max_tokens")},
        "vram_cap_gib": facts.vram_cap_gib,
        "max_tokens": facts.max_tokens,
        "max_decisions": settings.max_decisions,
        "max_questions_per_call": MAX_QUESTIONS_PER_CALL,
        "chunking": CHUNKING,
        "workloads": [],
    }


async def health(request: Request) -> JSONResponse:
    not_ready, facts = await request.app.state.health.check()
    if not_ready is not None:
        body = {"status": "unavailable", **envelope(UNAVAILABLE.code, not_ready)}
        return JSONResponse(body, status_code=503)
    return JSONResponse(health_body(request.app.state.settings, facts))
