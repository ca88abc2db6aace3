"""Admission (429, with Retry-After) before a byte of the body is read: at most MAX_QUEUE POSTs queued or scoring,
MAX_QUEUE_PER_PEER of them from one source; when full, a lighter source's POST takes a heavier one's waiting place
or waits in line for the next one freed. The drain counts every admitted POST until it is answered."""
from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..drain import Drain
from ..errors.codes import BUSY
from ..errors.answer import refuse
from ..queue_place import Place, holding
from .posts import is_post
from .queue_share import QueueAdmission, QueueShare

# How long a POST refused for a full queue may wait in line for a place: the Retry-After it would be told.
LINE_SECONDS = 1.0


class Admission:
    def __init__(self, app: ASGIApp, share: QueueShare, drain: Drain):
        self.app = app
        self._share = share
        self._drain = drain
        self._line: dict[Place, asyncio.Future[bool]] = {}  # the requests waiting in line for a place

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_post(scope):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        peer = client[0] if client else None
        place = Place(lambda waiting: self._share.waiting(place, waiting))
        verdict = self._share.admit(place, peer)
        if verdict.over == "total" and await self._in_line(place, peer):
            verdict = QueueAdmission(True)
        if not verdict.admitted:
            await refuse(scope, receive, send, BUSY, self._refusal(verdict.over, peer))
            return
        if verdict.reclaim is not None:
            verdict.reclaim.reclaimed.set()

        async def send_and_leave(message: Message) -> None:
            await send(message)
            # The place is free once the answer is sent: the client's next request may come before this returns.
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self._leave(place)

        try:
            with self._drain.admission(), holding(place):
                await self.app(scope, receive, send_and_leave)
        finally:
            self._leave(place)

    async def _in_line(self, place: Place, peer: str | None) -> bool:
        """Waits in line for a place, LINE_SECONDS at most: whether one was handed to it."""
        in_line, pushed = self._share.line_up(place, peer)
        if pushed is not None:
            self._line.pop(pushed).set_result(False)
        if not in_line:
            return False
        turn = self._line[place] = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait({turn}, timeout=LINE_SECONDS)
        except BaseException:  # cancelled: a place handed over meanwhile is given back
            if turn.done() and turn.result():
                self._leave(place)
            raise
        finally:
            if not (turn.done() and turn.result()):
                self._share.out_of_line(place)
                self._line.pop(place, None)
        return turn.done() and turn.result()

    def _leave(self, place: Place) -> None:
        turn = self._share.left(place)
        if turn is not None:
            self._line.pop(turn).set_result(True)

    def _refusal(self, over: str | None, peer: str | None) -> str:
        if over == "peer":
            return (f"this client's source already holds {self._share.held_by(peer)} requests queued or scoring, "
                    f"its share (MAX_QUEUE_PER_PEER); retry later")
        return f"{self._share.total} requests are already queued or scoring; retry later"
