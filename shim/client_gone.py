"""A request whose client went away before it reached the model is not scored (499); one already scoring finishes.
The edge's DisconnectWatch hands the app a watched channel; the lock's wait gives up when the client goes."""
from __future__ import annotations

import asyncio
import contextlib
from contextvars import ContextVar
from typing import AsyncIterator

from starlette.types import Message, Receive

from .errors.codes import CLIENT_GONE

# The status of a request whose client went away: logged, never seen by anyone (there is no one to answer).
CLIENT_WENT_AWAY = CLIENT_GONE.status

_current: ContextVar["_Channel | None"] = ContextVar("intern_decision_client", default=None)


class ClientGone(Exception):
    """The client went away before its request reached the model (the exception handlers log it 499)."""


class _Channel:
    def __init__(self, receive: Receive):
        self._receive = receive
        self.gone = asyncio.Event()
        self._listener: asyncio.Task | None = None

    async def receive(self) -> Message:
        if self._listener is not None:  # the body was read: what can come now is the end
            await self.gone.wait()
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self.gone.set()
        elif not message.get("more_body", False):
            self._listener = asyncio.create_task(self._listen(), name="client-watch")
        return message

    async def _listen(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self.gone.set()

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener


@contextlib.asynccontextmanager
async def watched(receive: Receive) -> AsyncIterator[Receive]:
    """The request's channel, watched for the client's leaving while the app runs inside."""
    channel = _Channel(receive)
    token = _current.set(channel)
    try:
        yield channel.receive
    finally:
        _current.reset(token)
        await channel.close()


def client_gone_event() -> asyncio.Event | None:
    """Set when the request's client goes away; None outside a watched request."""
    channel = _current.get()
    return None if channel is None else channel.gone


def gone_error() -> ClientGone:
    return ClientGone(CLIENT_GONE.words)
