"""The request's server span (shim/tracing.py), installed only when tracing is on."""
from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import cycle
from ..tracing import request_span


class TraceRequest:
    def __init__(self, app: ASGIApp, route_of):
        """route_of: the metrics' route label, so that span names stay few."""
        self.app = app
        self._route_of = route_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        route = self._route_of(scope["path"])
        attributes = {"http.request.method": scope["method"], "http.route": route, "url.path": scope["path"],
                      "intern_decision.request_id": cycle.of_scope(scope).id}
        with request_span(f"{scope['method']} {route}", headers, attributes) as span:

            async def send_with_status(message: Message) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                await send(message)

            await self.app(scope, receive, send_with_status)
