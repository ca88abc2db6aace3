"""Admission (429) before a byte of the body is read: at most MAX_QUEUE POSTs queued or scoring, the next refused at
once. Opt-in: a named key's share, binding only while another caller waits, and MAX_QUEUE_PER_PEER, under which a
lighter source's POST takes a heavier one's waiting place or waits in line for the next one freed."""
from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import cycle as cycles
from ..cycle import Cycle
from ..drain import Drain
from ..errors.answer import refuse
from ..errors.codes import BUSY
from .posts import is_post
from .queue_share import QueueAdmission, QueueShare

# The Retry-After a POST refused for a full queue would be told.
LINE_SECONDS = 1.0


class Admission:
    def __init__(self, app: ASGIApp, share: QueueShare, drain: Drain, key_shares: dict[str, int] | None = None,
                 named_callers: bool = False):
        self.app = app
        self._share = share
        self._drain = drain
        self._key_shares = key_shares or {}
        self._named_callers = named_callers  # a caller is the key presented; else the source address
        self._places: set[Cycle] = set()  # admitted and not answered
        self._line: dict[Cycle, asyncio.Future[bool]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_post(scope):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        peer = client[0] if client else None
        cycle = cycles.of_scope(scope)
        caller = cycle.key if self._named_callers else self._share.source(peer)
        if self._over_key_share(caller):
            await refuse(scope, receive, send, BUSY, f"the caller {caller!r} already holds "
                         f"{self._key_shares[caller]} requests queued or scoring, its share, while another caller "
                         f"waits; retry later")
            return
        verdict = self._share.admit(cycle, peer)
        if verdict.over == "total" and await self._in_line(cycle, peer):
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
                self._leave(cycle)

        cycle.admit(caller, self._drain)
        self._places.add(cycle)
        try:
            with self._drain.admission():
                await self.app(scope, receive, send_and_leave)
        finally:
            self._leave(cycle)

    def _over_key_share(self, caller: object) -> bool:
        share = self._key_shares.get(caller)  # type: ignore[call-overload]
        if share is None:
            return False
        mine = sum(other.caller == caller for other in self._places)
        return mine >= share and any(other.caller != caller and not other.scoring for other in self._places)

    async def _in_line(self, cycle: Cycle, peer: str | None) -> bool:
        in_line, pushed = self._share.line_up(cycle, peer)
        if pushed is not None:
            self._line.pop(pushed).set_result(False)
        if not in_line:
            return False
        turn = self._line[cycle] = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait({turn}, timeout=LINE_SECONDS)
        except BaseException:  # cancelled: a place handed over meanwhile is given back
            if turn.done() and turn.result():
                self._leave(cycle)
            raise
        finally:
            if not (turn.done() and turn.result()):
                self._share.out_of_line(cycle)
                self._line.pop(cycle, None)
        return turn.done() and turn.result()

    def _leave(self, cycle: Cycle) -> None:
        self._places.discard(cycle)
        turn = self._share.left(cycle)
        if turn is not None:
            self._line.pop(turn).set_result(True)

    def _refusal(self, over: str | None, peer: str | None) -> str:
        if over == "peer":
            return (f"this client's source already holds {self._share.held_by(peer)} requests queued or scoring, "
                    f"its share (MAX_QUEUE_PER_PEER); retry later")
        return f"{self._share.total} requests are already queued or scoring; retry later"
