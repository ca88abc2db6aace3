"""An admitted POST's place in the queue, as its wait for the model's turn sees it: whose it is (its caller, for the
turns), whether it is scoring yet, and, under the opt-in MAX_QUEUE_PER_PEER, whether the admission (shim/edge/
admission.py) handed it to a lighter source while it waited (the wait then gives up: 429 busy)."""
from __future__ import annotations

import asyncio
import contextlib
from contextvars import ContextVar
from typing import Callable, Hashable, Iterator

_current: ContextVar["Place | None"] = ContextVar("intern_decision_queue_place", default=None)


class Place:
    """`reclaimed` is set once the place went to another request; `waits` is told when the wait begins and ends."""

    def __init__(self, caller: Hashable, waits: Callable[[bool], None] = lambda waiting: None):
        self.caller = caller
        self.scoring = False  # it has held the model's turn
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


def current_caller() -> Hashable:
    """The caller of the request being handled; None outside an admitted POST."""
    place = _current.get()
    return None if place is None else place.caller
