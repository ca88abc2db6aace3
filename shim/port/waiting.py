"""Waiting for the inference lock (INV-2), which a request may give up before it holds it: when its client goes
away (shim/client_gone.py: never scored, 499), when the drain stops the queue (shim/drain.py: 503 `draining` with
Retry-After, answered before the grace period ends, never reset by a kill) or when its place in the queue goes to a
lighter source's request (shim/queue_place.py: 429 `busy`). What happened is told by the exception raised; the
exception handlers (shim/errors/handlers.py) turn it into HTTP."""
from __future__ import annotations

import asyncio
import contextlib

from ..client_gone import client_gone_event, gone_error
from ..drain import Drain
from ..queue_place import current_place
from .locks import acquire_unless


class QueueStopped(Exception):
    """The drain stopped the queue before this request held the lock: the request was not started."""


class Reclaimed(Exception):
    """This request's place went to a lighter source's before it held the lock: the request was not started."""


async def acquire(lock: asyncio.Lock, drain: Drain | None = None) -> None:
    """The lock for the request being handled; ClientGone when its client goes first, QueueStopped when the drain
    stops the queue first, Reclaimed when its place is taken first."""
    place = current_place()
    reclaimed = place.reclaimed if place is not None else None
    stops = [event for event in (client_gone_event(), drain.stops_queue if drain is not None else None, reclaimed)
             if event is not None]
    if drain is not None and drain.refusing:
        raise QueueStopped
    with place.waiting() if place is not None else contextlib.nullcontext():
        stopped = await acquire_unless(lock, *stops)
    if stopped is None:
        return
    if drain is not None and stopped is drain.stops_queue:
        raise QueueStopped
    if stopped is reclaimed:
        raise Reclaimed
    raise gone_error()
