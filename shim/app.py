"""The Starlette application: GET /health, POST /decide, POST /decide/shared, the System One surface (GET
/v1/models, POST /v1/systemone, POST /v1/systemone/batch, and its operations as MCP tools at /mcp), GET
/openapi.json, every error in the envelope and every response with X-Request-Id (the request-id layer wraps even
Starlette's last-resort 500); the System One paths also follow TypeSafe's conventions (shim/systemone/
conventions.py).

create_app only wires the parts together: the routes' handlers (shim/semif.py, shim/systemone/, shim/health.py),
the error handlers (shim/handlers.py) and the middleware stand in modules of their own.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from . import semif
from .calls import CallRunner
from .access import AccessLog
from .drain import Drain
from .framing import CloseUnread, TransferEncodingGuard
from .gone import ClientWatch
from .handlers import EXCEPTION_HANDLERS
from .health import HealthCheck, health
from .metrics import ShimMetrics
from .middleware import PostGuard, RequestId
from .model import Model
from .service import DecisionService
from .settings import ShimSettings
from .systemone import routes as systemone
from .systemone.conventions import SystemOneConventions
from .systemone.service import SystemOneService
from .triton import TritonModel
from .watch import ModelWatch

OPENAPI_PATH = Path(__file__).with_name("openapi.json")


class ShimApp(Starlette):
    """Starlette with the request id and the access line outside its ServerErrorMiddleware, so that even an
    unexpected exception's 500 carries the id and is counted; inside them the request's framing (shim/framing.py):
    a Transfer-Encoding other than chunked refused, a response before the body's end closing the connection."""

    def __init__(self, *, metrics: ShimMetrics, typesafe_prefixes: tuple[str, ...], **kwargs: Any):
        self._metrics = metrics
        self._typesafe_prefixes = typesafe_prefixes
        super().__init__(**kwargs)

    def build_middleware_stack(self) -> ASGIApp:
        framed = CloseUnread(TransferEncodingGuard(super().build_middleware_stack()))
        return RequestId(SystemOneConventions(AccessLog(framed, metrics=self._metrics), self._typesafe_prefixes))


def openapi_document() -> bytes:
    """The surface's OpenAPI document as served; refuses to start when it is missing or not JSON."""
    raw = OPENAPI_PATH.read_bytes()
    json.loads(raw)
    return raw


async def openapi_json(request: Request) -> Response:
    return Response(request.app.state.openapi, media_type="application/json")


@contextlib.asynccontextmanager
async def lifespan(app: Starlette):
    watch: ModelWatch = app.state.watch
    await watch.open()
    tasks = [asyncio.create_task(app.state.health.keep_checking(), name="model-check"),
             asyncio.create_task(watch.run(), name="model-watch")]
    try:
        async with contextlib.AsyncExitStack() as stack:
            if app.state.mcp is not None:
                await stack.enter_async_context(app.state.mcp.running())
            yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await watch.close()


def create_app(settings: ShimSettings, model: Model | None = None, metrics: ShimMetrics | None = None) -> Starlette:
    """model: the Triton model (a fake in unit tests). metrics: the series this app updates (a fresh set when
    None); python -m shim serves their registry."""
    model = model if model is not None else TritonModel(settings)
    metrics = metrics if metrics is not None else ShimMetrics()
    lock = asyncio.Lock()  # INV-2: one request's calls at a time; the watch pings under it too
    watch = ModelWatch(model, lock, settings.probe_seconds)
    drain = Drain(settings.drain_seconds)  # begun by the server on SIGTERM (shim/server.py)
    openapi = openapi_document()
    health_check = HealthCheck(watch, metrics)
    systemone_service = SystemOneService(CallRunner(watch, metrics, lock, drain), health_check.facts, settings)
    mcp = _mcp_tools(systemone_service, json.loads(openapi)) if settings.mcp else None
    app = ShimApp(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/decide", semif.decide, methods=["POST"]),
            Route("/decide/shared", semif.decide_shared, methods=["POST"]),
            Route("/v1/models", systemone.models, methods=["GET"]),
            Route("/v1/systemone", systemone.system_one, methods=["POST"]),
            Route("/v1/systemone/batch", systemone.batch, methods=["POST"]),
            Route("/openapi.json", openapi_json, methods=["GET"]),
            *([Route(MCP_PATH, mcp, methods=["POST"])] if mcp is not None else []),
        ],
        middleware=[Middleware(PostGuard, api_token=settings.api_token, max_queue=settings.max_queue,
                               max_body_bytes=settings.max_body_bytes,
                               body_timeout_seconds=settings.body_timeout_seconds,
                               api_token_next=settings.api_token_next, drain=drain,
                               authenticated_paths=frozenset({"/v1/models", MCP_PATH})),
                    Middleware(ClientWatch)],
        metrics=metrics,
        typesafe_prefixes=("/v1/",),
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
    app.router.redirect_slashes = False  # /decide/ is 404 not_found, never a redirect
    app.state.settings = settings
    app.state.openapi = openapi
    app.state.watch = watch
    app.state.drain = drain
    app.state.health = health_check
    app.state.service = DecisionService(watch, settings.max_decisions, metrics, lock, drain)
    app.state.systemone = systemone_service
    app.state.mcp = mcp
    return app


MCP_PATH = "/mcp"


def _mcp_tools(service: SystemOneService, openapi: dict):
    """The MCP endpoint; the mcp package is imported only when it is on (MCP=1), and its absence then stops the
    start."""
    from .systemone.mcp import SystemOneTools

    return SystemOneTools(service, openapi)
