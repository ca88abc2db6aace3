"""Acquiring the model's turn unless something else happens first."""
from __future__ import annotations

import asyncio
import contextlib
from typing import Hashable

from .turns import Turns


async def acquire_unless(turns: Turns, caller: Hashable, *stops: asyncio.Event) -> asyncio.Event | None:
    """None once the turn is held, else the first stop set; one set while the turn is handed over wins."""
    already = next((stop for stop in stops if stop.is_set()), None)
    if already is not None:
        return already
    if turns.free():  # no future or task per request
        await turns.acquire(caller)
        return None
    acquiring = asyncio.ensure_future(turns.acquire(caller))
    watching = [asyncio.ensure_future(stop.wait()) for stop in stops]
    stopped: asyncio.Event | None = None
    acquired = False
    try:
        await asyncio.wait({acquiring, *watching}, return_when=asyncio.FIRST_COMPLETED)
        stopped = next((stop for stop in stops if stop.is_set()), None)
        acquired = stopped is None and acquiring.done()
    finally:
        for watch in watching:
            watch.cancel()
        if not acquired:
            acquiring.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await acquiring
            if not acquiring.cancelled():  # it got the turn after all: give it back
                turns.release()
    return stopped
