"""The Starlette application: GET /health, POST /decide, POST /decide/shared, GET /openapi.json, every error in the
envelope and every response with X-Request-Id (the request-id layer wraps even Starlette's last-resort 500)."""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp
from wire.facts import ModelFacts

from .access import AccessLog
from .combining import IncompleteAnswer
from .drain import Drain
from .errors import DRAINING, HTTP_CODES, INVALID, SCORING_FAILED, ApiError, envelope
from .gone import ClientWatch
from .metrics import ShimMetrics
from .middleware import PostGuard, RequestId
from .planning import CHUNKING, MAX_QUESTIONS_PER_CALL
from .service import DecisionService
from .settings import ShimSettings
from .triton import TritonModel
from .validation import InvalidRequest, decide_body, parse_json, shared_body
from .watch import ModelWatch

log = logging.getLogger("intern_decision.shim")

FACTS_TTL_SECONDS = 5.0
MODEL_CHECK_SECONDS = 5.0  # how often the model_up gauge is refreshed without anyone calling /health
OPENAPI_PATH = Path(__file__).with_name("openapi.json")


class FactsCache:
    """The model's facts from Triton's metrics port, re-read after FACTS_TTL_SECONDS so a reload shows up."""

    def __init__(self, model: Any, clock=time.monotonic):
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


class ShimApp(Starlette):
    """Starlette with the request id and the access line outside its ServerErrorMiddleware, so that even an
    unexpected exception's 500 carries the id and is counted."""

    def __init__(self, *, metrics: ShimMetrics, **kwargs: Any):
        self._metrics = metrics
        super().__init__(**kwargs)

    def build_middleware_stack(self) -> ASGIApp:
        return RequestId(AccessLog(super().build_middleware_stack(), metrics=self._metrics))


def openapi_document() -> bytes:
    """The surface's OpenAPI document as served; refuses to start when it is missing or not JSON."""
    raw = OPENAPI_PATH.read_bytes()
    json.loads(raw)
    return raw


def create_app(settings: ShimSettings, model: Any = None, metrics: ShimMetrics | None = None) -> Starlette:
    """model: anything with TritonModel's async predict_calls/ready/facts/ping/open/close (a fake in unit
    tests). metrics: the series this app updates (a fresh set when None); python -m shim serves their registry."""
    model = model if model is not None else TritonModel(settings)
    metrics = metrics if metrics is not None else ShimMetrics()
    openapi = openapi_document()
    lock = asyncio.Lock()  # INV-2: one request's calls at a time; the watch pings under it too
    watch = ModelWatch(model, lock, settings.probe_seconds)
    service = DecisionService(watch, settings.max_decisions, metrics, lock)
    facts = FactsCache(model)
    drain = Drain(settings.drain_seconds)

    async def check_model() -> tuple[str | None, ModelFacts | None]:
        """(why the model is not usable, or None; its facts when it is), as /health says; sets model_up."""
        not_ready, cached_facts = watch.down or await model.ready(), None
        if not_ready is None:
            try:
                cached_facts = await facts.get()
            except ApiError as exc:
                not_ready = exc.message
        if not_ready is not None:
            facts.clear()  # a restarted Triton may bring other pins
        metrics.model_up.set(not_ready is None)
        return not_ready, cached_facts

    async def keep_checking_model() -> None:
        while True:
            try:
                await check_model()
            except Exception:
                metrics.model_up.set(0)
                log.exception("the background model check failed")
            await asyncio.sleep(MODEL_CHECK_SECONDS)

    async def health(request: Request) -> JSONResponse:
        if drain.draining:
            return JSONResponse({"status": "draining", **envelope(DRAINING[1], "this replica is shutting down")},
                                status_code=DRAINING[0])
        not_ready, cached_facts = await check_model()
        if not_ready is not None:
            body = {"status": "unavailable", **envelope("model_unavailable", not_ready)}
            return JSONResponse(body, status_code=503)
        return JSONResponse({
            "status": "ok",
            "model": {key: value for key, value in cached_facts.as_dict().items()
                      if key not in ("vram_cap_gib", "max_tokens")},
            "vram_cap_gib": cached_facts.vram_cap_gib,
            "max_tokens": cached_facts.max_tokens,
            "max_decisions": settings.max_decisions,
            "max_questions_per_call": MAX_QUESTIONS_PER_CALL,
            "chunking": CHUNKING,
            "workloads": [],
        })

    async def decide(request: Request) -> JSONResponse:
        state, decision = decide_body(parse_json(await request.body()))
        return JSONResponse(await service.decide(state, decision, request.state.request_id))

    async def decide_shared(request: Request) -> JSONResponse:
        state, decisions = shared_body(parse_json(await request.body()))
        return JSONResponse(await service.decide_shared(state, decisions, request.state.request_id))

    async def openapi_json(request: Request) -> Response:
        return Response(openapi, media_type="application/json")

    async def invalid_request(request: Request, exc: InvalidRequest) -> JSONResponse:
        status, code = INVALID
        return JSONResponse(envelope(code, str(exc)), status_code=status)

    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        if exc.status >= 500:
            log.warning("%s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(envelope(exc.code, exc.message), status_code=exc.status)

    async def incomplete_answer(request: Request, exc: IncompleteAnswer) -> JSONResponse:
        log.error("%s %s: %s", request.method, request.url.path, exc)
        status, code = SCORING_FAILED
        return JSONResponse(envelope(code, str(exc)), status_code=status)

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code = HTTP_CODES.get(exc.status_code, "http_error")
        return JSONResponse(envelope(code, exc.detail), status_code=exc.status_code, headers=exc.headers)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        """Starlette's last resort (ServerErrorMiddleware, inside RequestId and the access line)."""
        log.exception("%s %s: failed while building the response", request.method, request.url.path)
        status, code = SCORING_FAILED
        return JSONResponse(envelope(code, f"failed while building the response: {type(exc).__name__}"),
                            status_code=status)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        await model.open()
        tasks = [asyncio.create_task(keep_checking_model(), name="model-check"),
                 asyncio.create_task(watch.run(), name="model-watch")]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await model.close()

    app = ShimApp(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/decide", decide, methods=["POST"]),
            Route("/decide/shared", decide_shared, methods=["POST"]),
            Route("/openapi.json", openapi_json, methods=["GET"]),
        ],
        middleware=[Middleware(PostGuard, api_token=settings.api_token, max_queue=settings.max_queue,
                               max_body_bytes=settings.max_body_bytes,
                               body_timeout_seconds=settings.body_timeout_seconds,
                               api_token_next=settings.api_token_next, drain=drain),
                    Middleware(ClientWatch)],
        metrics=metrics,
        exception_handlers={InvalidRequest: invalid_request, ApiError: api_error, IncompleteAnswer: incomplete_answer,
                            HTTPException: http_error, Exception: unexpected},
        lifespan=lifespan,
    )
    app.router.redirect_slashes = False  # /decide/ is 404 not_found, never a redirect
    app.state.watch = watch
    app.state.drain = drain  # begun by the server on SIGTERM (shim/server.py)
    return app
