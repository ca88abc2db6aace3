"""Every response carries X-Request-Id: the caller's (visible ASCII, up to 128 characters) or a new one, also sent
to Triton and on every log line."""
from __future__ import annotations

import re
import uuid

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import cycle

_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}")
REQUEST_ID_HEADER = "X-Request-Id"


class RequestId:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get(REQUEST_ID_HEADER, "")
        request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        cycle.begin(scope, request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])  # optional in ASGI
                MutableHeaders(scope=message).append(REQUEST_ID_HEADER, request_id)
            await send(message)

        await self.app(scope, receive, send_with_id)
