"""Waiting for the inference lock (INV-2), given up when the client goes away or the drain stops the queue: the
exception raised says which, and the exception handlers turn it into HTTP."""
from __future__ import annotations

import asyncio

from ..client_gone import client_gone_event, gone_error
from ..drain import Drain
from .locks import acquire_unless


class QueueStopped(Exception):
    """The drain stopped the queue before this request held the lock: the request was not started."""


async def acquire(lock: asyncio.Lock, drain: Drain | None = None) -> None:
    """ClientGone when the client goes first, QueueStopped when the drain stops the queue first."""
    stops = [event for event in (client_gone_event(), drain.stops_queue if drain is not None else None)
             if event is not None]
    if drain is not None and drain.refusing:
        raise QueueStopped
    stopped = await acquire_unless(lock, *stops)
    if stopped is None:
        return
    if drain is not None and stopped is drain.stops_queue:
        raise QueueStopped
    raise gone_error()
