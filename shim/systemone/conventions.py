"""TypeSafe's request id header on the System One routes, which the TypeSafe SDK reads, beside X-Request-Id."""
from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import cycle
from ..errors.envelope import is_system_one

REQUEST_ID_HEADER = "x-typesafe-request-id"


class SystemOneConventions:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_system_one(scope["path"]):
            await self.app(scope, receive, send)
            return

        async def send_conventionally(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = cycle.of_scope(scope).id
            await send(message)

        await self.app(scope, receive, send_conventionally)
