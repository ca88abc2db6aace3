"""A new POST on a draining shim: 503, the connection closed so that the client's next request goes to another
replica."""
from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from ..drain import Drain
from ..errors.answer import refuse
from ..errors.codes import DRAINING
from .posts import is_post


class RefuseWhileDraining:
    def __init__(self, app: ASGIApp, drain: Drain):
        self.app = app
        self._drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if is_post(scope) and self._drain.refusing:
            await refuse(scope, receive, send, DRAINING)
            return
        await self.app(scope, receive, send)
