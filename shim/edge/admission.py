"""Admission (429, with Retry-After) before a byte of the body is read: at most MAX_QUEUE POSTs queued or scoring.
The count is the drain's: the drain ends when it is back to 0, so the two can never disagree."""
from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from ..drain import Drain
from ..errors.codes import BUSY
from ..errors.answer import refuse
from .posts import is_post


class Admission:
    def __init__(self, app: ASGIApp, max_queue: int, drain: Drain):
        self.app = app
        self._max_queue = max_queue
        self._drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_post(scope):
            await self.app(scope, receive, send)
            return
        if self._drain.admitted >= self._max_queue:
            await refuse(scope, receive, send, BUSY,
                         f"{self._max_queue} requests are already queued or scoring; retry later")
            return
        with self._drain.admission():
            await self.app(scope, receive, send)
