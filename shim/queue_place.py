"""An admitted POST's place in the queue, as its wait for the lock sees it: the admission (shim/edge/admission.py)
may hand the place of a request still waiting to a lighter source's, and that wait then gives up (429 busy)."""
from __future__ import annotations

import asyncio
import contextlib
from contextvars import ContextVar
from typing import Callable, Iterator

_current: ContextVar["Place | None"] = ContextVar("intern_decision_queue_place", default=None)


class Place:
    """`reclaimed` is set once the place went to another request; `waits` is told when the wait begins and ends."""

    def __init__(self, waits: Callable[[bool], None]):
        self.reclaimed = asyncio.Event()
        self._waits = waits

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        self._waits(True)
        try:
            yield
        finally:
            self._waits(False)


@contextlib.contextmanager
def holding(place: Place) -> Iterator[None]:
    """The request being handled holds `place` while the app runs inside."""
    token = _current.set(place)
    try:
        yield
    finally:
        _current.reset(token)


def current_place() -> Place | None:
    """The request's place; None outside an admitted POST (the watch's pings, MCP's tools run outside its context)."""
    return _current.get()
