"""The Starlette application: both surfaces' routes, /openapi.json and the playground, wired only."""
from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from .drain import Drain
from .edge.access import AccessLog
from .edge.admission import Admission
from .edge.auth import BearerAuth
from .edge.body import BodyReader, KnownEncoding
from .edge.disconnect import DisconnectWatch
from .edge.drain_gate import RefuseWhileDraining
from .edge.framing import CloseUnread, TransferEncodingGuard
from .edge.queue_share import QueueShare
from .edge.request_id import RequestId
from .edge.tokens import AcceptedTokens
from .edge.trace import TraceRequest
from .errors.handlers import EXCEPTION_HANDLERS
from .errors.openapi import secured_gets, served
from .health import HEALTH_PATH, HealthCheck, health_route
from .metrics import ShimMetrics
from .playground.routes import playground_routes
from .port.calls import CallRunner
from .port.model import Model
from .port.triton import TritonModel
from .port.turns import Turns
from .port.watch import ModelWatch
from .semif.routes import semif_routes
from .semif.service import DecisionService
from .server.limits import ConnectionLimits
from .server.roster import address_matcher, source_of
from .settings import ShimSettings
from .systemone.conventions import SystemOneConventions
from .systemone.routes import systemone_routes
from .systemone.service import SystemOneService

OPENAPI_PATH = Path(__file__).with_name("openapi.json")


LAST_RESORT_500 = Middleware(ServerErrorMiddleware)


class ShimApp(Starlette):
    """Starlette with LAST_RESORT_500 placed in the middleware list: the layers above it wrap even its 500."""

    def __init__(self, *, middleware: Sequence[Middleware], **kwargs: Any):
        (split,) = [index for index, layer in enumerate(middleware) if layer is LAST_RESORT_500]
        self._outside_last_resort = list(middleware[:split])
        super().__init__(middleware=middleware[split + 1:], **kwargs)

    def build_middleware_stack(self) -> ASGIApp:
        app = super().build_middleware_stack()
        for cls, args, kwargs in reversed(self._outside_last_resort):
            app = cls(app, *args, **kwargs)
        return app


def openapi_document() -> dict:
    """shim/openapi.json with the registry's error codes filled in."""
    return served(json.loads(OPENAPI_PATH.read_bytes()))


def openapi_route(document: dict) -> Route:
    body = json.dumps(document).encode()

    async def openapi_json(request: Request) -> Response:
        return Response(body, media_type="application/json")

    return Route("/openapi.json", openapi_json, methods=["GET"])


def lifespan_of(watch: ModelWatch, health_check: HealthCheck, mcp):
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        await watch.open()
        tasks = [asyncio.create_task(health_check.keep_checking(), name="model-check"),
                 asyncio.create_task(watch.run(), name="model-watch")]
        try:
            async with contextlib.AsyncExitStack() as stack:
                if mcp is not None:
                    await stack.enter_async_context(mcp.running())
                yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await watch.close()

    return lifespan


class Service(NamedTuple):
    app: Starlette
    settings: ShimSettings
    drain: Drain
    watch: ModelWatch
    limits: ConnectionLimits


def middleware_stack(settings: ShimSettings, metrics: ShimMetrics, drain: Drain,
                     openapi: dict) -> list[Middleware]:
    return [
        # Outside the last-resort 500, so that its answer has the request id, the access line and the conventions.
        Middleware(RequestId),
        *([Middleware(TraceRequest, route_of=metrics.route_of)] if settings.otlp_endpoint else []),
        Middleware(SystemOneConventions),
        Middleware(AccessLog, metrics=metrics),
        Middleware(CloseUnread),
        Middleware(TransferEncodingGuard),
        LAST_RESORT_500,
        # The contract's order for a POST: a refused one takes no slot.
        Middleware(BearerAuth,
                   tokens=AcceptedTokens(settings.api_token, settings.api_token_next, settings.api_keys),
                   authenticated_paths=secured_gets(openapi) | {MCP_PATH}),
        Middleware(RefuseWhileDraining, drain=drain),
        Middleware(KnownEncoding),
        Middleware(Admission, share=queue_share(settings), drain=drain,
                   key_shares={key.name: key.share for key in settings.api_keys if key.share is not None},
                   named_callers=bool(settings.api_keys)),
        Middleware(BodyReader, max_body_bytes=settings.max_body_bytes,
                   body_timeout_seconds=settings.body_timeout_seconds, max_decode_ratio=settings.max_decode_ratio),
        Middleware(DisconnectWatch),
    ]


def queue_share(settings: ShimSettings) -> QueueShare:
    return QueueShare(settings.max_queue, settings.max_queue_per_peer or None, source=source_of,
                      exempt=address_matcher(settings.balancer_addresses), waiting=lambda cycle: cycle.waiting)


def create_app(settings: ShimSettings, model: Model | None = None, metrics: ShimMetrics | None = None) -> Starlette:
    return build_service(settings, model, metrics).app


def build_service(settings: ShimSettings, model: Model | None = None, metrics: ShimMetrics | None = None) -> Service:
    """Both surfaces share one CallRunner, so one lock (INV-2)."""
    model = model if model is not None else TritonModel(settings)
    metrics = metrics if metrics is not None else ShimMetrics()
    lock = Turns()  # the watch pings under it too
    watch = ModelWatch(model, lock, settings.probe_seconds)
    drain = Drain(settings.drain_seconds)
    openapi = openapi_document()
    health_check = HealthCheck(watch, metrics)
    runner = CallRunner(watch, metrics, lock)
    systemone_service = SystemOneService(runner, health_check.facts, settings)
    mcp = _mcp_tools(systemone_service, openapi) if settings.mcp else None
    api_routes = [health_route(settings, health_check, drain),
                  *semif_routes(DecisionService(runner, settings)),
                  *systemone_routes(systemone_service)]
    metrics.name_routes(route.path for route in api_routes)
    app = ShimApp(
        routes=[
            *api_routes,
            openapi_route(openapi),
            *([Route(MCP_PATH, mcp, methods=["POST"])] if mcp is not None else []),
            *(playground_routes() if settings.playground else []),
        ],
        middleware=middleware_stack(settings, metrics, drain, openapi),
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan_of(watch, health_check, mcp),
    )
    app.router.redirect_slashes = False  # /decide/ is a 404, never a redirect
    return Service(app, settings, drain, watch, ConnectionLimits.of(settings, HEALTH_PATH))


MCP_PATH = "/mcp"


def _mcp_tools(service: SystemOneService, openapi: dict):
    """mcp is imported only when MCP=1; its absence then stops the start."""
    from .systemone.mcp import SystemOneTools

    return SystemOneTools(service, openapi)
