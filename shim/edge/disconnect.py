"""A POST's channel watched for the client's leaving, so that a request whose client went away is never scored."""
from __future__ import annotations

import asyncio
import contextlib

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import cycle
from .posts import is_post


class _Channel:
    def __init__(self, receive: Receive, gone: asyncio.Event):
        self._receive = receive
        self._gone = gone
        self._listener: asyncio.Task | None = None

    async def receive(self) -> Message:
        if self._listener is not None:  # the body was read: what can come now is the end
            await self._gone.wait()
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self._gone.set()
        elif not message.get("more_body", False):
            self._listener = asyncio.create_task(self._listen(), name="client-watch")
        return message

    async def _listen(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self._gone.set()

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener


class DisconnectWatch:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_post(scope):
            await self.app(scope, receive, send)
            return
        channel = _Channel(receive, cycle.of_scope(scope).client_gone)
        try:
            await self.app(scope, channel.receive, send)
        finally:
            await channel.close()
