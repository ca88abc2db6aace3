"""Acquiring an asyncio lock unless something else happens first: the one primitive behind giving up a wait for the
inference lock (shim/client_gone.py, shim/port/waiting.py)."""
from __future__ import annotations

import asyncio
import contextlib


async def acquire_unless(lock: asyncio.Lock, *stops: asyncio.Event) -> asyncio.Event | None:
    """None once the lock is held, else the stop that was set first; a stop set while the lock is handed over wins."""
    already = next((stop for stop in stops if stop.is_set()), None)
    if already is not None:
        return already
    if _free(lock):  # taken at once, no wait to give up: no future or task per request
        await lock.acquire()
        return None
    acquiring = asyncio.ensure_future(lock.acquire())
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
            if not acquiring.cancelled():  # it got the lock after all: give it back
                lock.release()
    return stopped


def _free(lock: asyncio.Lock) -> bool:
    """Whether lock.acquire() would return without suspending: unlocked, and no waiter it would be handed to first."""
    return not lock.locked() and not getattr(lock, "_waiters", None)
