"""One HTTP request's life in one object, as uvicorn keeps it on its request cycle: its id, usage and caller, and
once admitted, what ends its wait for the model's turn, each end raised as the registry's own error."""
from __future__ import annotations

import asyncio
import contextlib
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Hashable, Iterator, NoReturn

from starlette.types import Scope

from .drain import Drain
from .errors.codes import BUSY, CLIENT_GONE, DRAINING
from .errors.raised import ApiError

# Told to a request that waited, from the heaviest source, when a lighter source's POST took its place (opt-in).
RECLAIMED = "the queue is full and this client's source holds the most of it; retry later"

# Never reset: uvicorn's "Exception in ASGI application" line, written after the app returned, still carries the id.
_current: ContextVar[Cycle | None] = ContextVar("intern_decision_cycle", default=None)


@dataclass
class Usage:
    calls: int | None = None
    input_tokens: int | None = None


@dataclass(eq=False)
class Cycle:
    id: str
    usage: Usage = field(default_factory=Usage)
    caller: Hashable = None  # the model's turns are taken by caller (shim/port/turns.py); set when admitted
    drain: Drain | None = None
    scoring: bool = False  # it has held the model's turn
    waiting: bool = False  # in its first wait for the turn: the only time the opt-in share may give its place away
    waited: bool = False
    client_gone: asyncio.Event = field(default_factory=asyncio.Event)
    reclaimed: asyncio.Event = field(default_factory=asyncio.Event)

    def admit(self, caller: Hashable, drain: Drain) -> None:
        self.caller = caller
        self.drain = drain

    def stops(self) -> list[asyncio.Event]:
        """What ends a wait for the model's turn; ApiError (DRAINING) at once when the drain already refuses."""
        if self.drain is not None and self.drain.refusing:
            self.end(self.drain.stops_queue)
        queue = [self.drain.stops_queue] if self.drain is not None else []
        return [self.client_gone, *queue, self.reclaimed]

    def end(self, stop: asyncio.Event) -> NoReturn:
        """A request the drain stopped is 503 draining, its connection closed so that the retry goes to another
        replica; one whose place went to a lighter source is 429 busy; one whose client went away is 499."""
        if self.drain is not None and stop is self.drain.stops_queue:
            raise ApiError(DRAINING, DRAINING.words)
        if stop is self.reclaimed:
            raise ApiError(BUSY, RECLAIMED)
        raise ApiError(CLIENT_GONE, CLIENT_GONE.words)

    @contextlib.contextmanager
    def waiting_for_turn(self) -> Iterator[None]:
        self.waiting = not self.waited
        try:
            yield
        finally:
            self.waiting, self.waited = False, True


def begin(scope: Scope, request_id: str) -> Cycle:
    """The request's cycle, current from here on and kept in its scope for work run outside its task (MCP's)."""
    cycle = Cycle(request_id)
    scope.setdefault("state", {})["cycle"] = cycle
    _current.set(cycle)
    return cycle


def of_scope(scope: Scope) -> Cycle | None:
    return scope.get("state", {}).get("cycle")


def enter(cycle: Cycle | None) -> None:
    """Makes `cycle` current in a task that runs outside the request's own (the MCP SDK's handlers)."""
    _current.set(cycle)


def current() -> Cycle | None:
    return _current.get()


def current_id() -> str | None:
    cycle = _current.get()
    return None if cycle is None else cycle.id


def note_usage(calls: int | None = None, input_tokens: int | None = None) -> None:
    """What the current request sends the model, for its access line; a no-op outside a request."""
    cycle = _current.get()
    if cycle is None:
        return
    if calls is not None:
        cycle.usage.calls = calls
    if input_tokens is not None:
        cycle.usage.input_tokens = input_tokens
