"""A POST's channel watched for the client's leaving (shim/client_gone.py), so that a request whose client went away
is never scored; the innermost middleware, inside the body reader, once the body is read."""
from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from ..client_gone import watched
from .posts import is_post


class DisconnectWatch:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_post(scope):
            await self.app(scope, receive, send)
            return
        async with watched(receive) as watched_receive:
            await self.app(scope, watched_receive, send)
