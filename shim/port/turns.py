"""A lock handed to callers in turn (the inference lock, INV-2, and the body worker's): the next holder is the
oldest request of the caller served least recently, so no caller waits behind another's backlog."""
from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict, deque
from typing import Hashable

REMEMBERED_CALLERS = 4096  # one forgotten was served least recently anyway


class Turns:
    def __init__(self) -> None:
        self._held = False
        self._waiting: dict[Hashable, deque[tuple[int, asyncio.Future[None]]]] = {}
        self._last_turn: OrderedDict[Hashable, int] = OrderedDict()  # oldest first
        self._turns = itertools.count()
        self._arrivals = itertools.count()

    def locked(self) -> bool:
        return self._held

    def free(self) -> bool:
        return not self._held and not self._waiting

    def waiting(self) -> int:
        return sum(len(queue) for queue in self._waiting.values())

    async def acquire(self, caller: Hashable = None) -> None:
        if self.free():
            self._hand_to(caller)
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (next(self._arrivals), turn)
        self._waiting.setdefault(caller, deque()).append(entry)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # handed over as it was cancelled
                self.release()
            else:
                self._forget(caller, entry)
            raise

    def release(self) -> None:
        if not self._held:
            raise RuntimeError("Turns.release() while not held")
        self._held = False
        while self._waiting:
            caller = min(self._waiting, key=lambda each: (self._last_turn.get(each, -1), self._waiting[each][0][0]))
            queue = self._waiting[caller]
            _, turn = queue.popleft()
            if not queue:
                del self._waiting[caller]
            if not turn.cancelled():
                self._hand_to(caller)
                turn.set_result(None)
                return

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def _hand_to(self, caller: Hashable) -> None:
        self._held = True
        self._last_turn[caller] = next(self._turns)
        self._last_turn.move_to_end(caller)
        if len(self._last_turn) > REMEMBERED_CALLERS:
            self._last_turn.popitem(last=False)

    def _forget(self, caller: Hashable, entry: tuple[int, asyncio.Future[None]]) -> None:
        queue = self._waiting.get(caller)
        if queue is None or entry not in queue:
            return
        queue.remove(entry)
        if not queue:
            del self._waiting[caller]
