"""Waiting for the inference lock (INV-2), given up when the client goes away, the drain stops the queue or a
lighter source takes the request's place: the exception raised says which, and the exception handlers answer it."""
from __future__ import annotations

import contextlib

from ..client_gone import client_gone_event, gone_error
from ..drain import Drain
from ..queue_place import current_place
from .locks import acquire_unless
from .turns import Turns


class QueueStopped(Exception):
    """The drain stopped the queue before this request held the lock: the request was not started."""


class Reclaimed(Exception):
    """This request's place went to a lighter source's before it held the lock: the request was not started."""


async def acquire(turns: Turns, drain: Drain | None = None) -> None:
    """ClientGone when the client goes first, QueueStopped when the drain stops the queue first, Reclaimed when the
    request's place is taken first."""
    place = current_place()
    reclaimed = place.reclaimed if place is not None else None
    stops = [event for event in (client_gone_event(), drain.stops_queue if drain is not None else None, reclaimed)
             if event is not None]
    if drain is not None and drain.refusing:
        raise QueueStopped
    with place.waiting() if place is not None else contextlib.nullcontext():
        stopped = await acquire_unless(turns, place.caller if place is not None else None, *stops)
    if stopped is None:
        if place is not None:
            place.scoring = True
        return
    if drain is not None and stopped is drain.stops_queue:
        raise QueueStopped
    if stopped is reclaimed:
        raise Reclaimed
    raise gone_error()
