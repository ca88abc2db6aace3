"""One access line and the request series per HTTP request; an app that raised counts as 500, a request that
ended without a response as 499."""
from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import cycle
from ..callers import UNNAMED
from ..errors.codes import CLIENT_GONE
from ..metrics import ShimMetrics

log = logging.getLogger("intern_decision.shim.access")


class AccessLog:
    def __init__(self, app: ASGIApp, metrics: ShimMetrics):
        self.app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request = cycle.of_scope(scope)
        status: int | None = None

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self._metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_noting_status)
        except BaseException:
            status = status or 500
            raise
        finally:
            status = status or CLIENT_GONE.status
            seconds = time.perf_counter() - started
            self._metrics.in_flight.dec()
            route = self._metrics.route_of(scope["path"])
            key = request.key or UNNAMED
            self._metrics.answered(route, status, seconds, key)
            log.info("%s %s %d", scope["method"], route, status,
                     extra={"method": scope["method"], "route": route, "status": status,
                            "duration_ms": round(seconds * 1000, 3), "calls": request.usage.calls,
                            "caller": key, "input_tokens": request.usage.input_tokens})
