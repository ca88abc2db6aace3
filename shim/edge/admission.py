"""Admission (429, with Retry-After) before a byte of the body is read: at most MAX_QUEUE POSTs queued or scoring,
MAX_QUEUE_PER_PEER of them from one source; when full, a lighter source's POST takes a heavier one's waiting place.
The drain counts every admitted POST until it is answered, a reclaimed one included."""
from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..drain import Drain
from ..errors.codes import BUSY
from ..errors.answer import refuse
from ..queue_place import Place, holding
from .posts import is_post
from .queue_share import QueueShare


class Admission:
    def __init__(self, app: ASGIApp, share: QueueShare, drain: Drain):
        self.app = app
        self._share = share
        self._drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_post(scope):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        peer = client[0] if client else None
        place = Place(lambda waiting: self._share.waiting(place, waiting))
        verdict = self._share.admit(place, peer)
        if not verdict.admitted:
            await refuse(scope, receive, send, BUSY, self._refusal(verdict.over, peer))
            return
        if verdict.reclaim is not None:
            verdict.reclaim.reclaimed.set()
        async def send_and_leave(message: Message) -> None:
            await send(message)
            # The place is free once the answer is sent: the client's next request may come before this returns.
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self._share.left(place)

        try:
            with self._drain.admission(), holding(place):
                await self.app(scope, receive, send_and_leave)
        finally:
            self._share.left(place)

    def _refusal(self, over: str | None, peer: str | None) -> str:
        if over == "peer":
            return (f"this client's source already holds {self._share.held_by(peer)} requests queued or scoring, "
                    f"its share (MAX_QUEUE_PER_PEER); retry later")
        return f"{self._share.total} requests are already queued or scoring; retry later"
