"""One HTTP request's life in one object, as uvicorn's request cycle: its id, usage, caller, and what ends its wait
for the model's turn, raised as the registry's own error."""
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
    key: str | None = None  # the accepted token's name (shim/callers.py)
    caller: Hashable = None  # the model's turns are taken by caller
    drain: Drain | None = None
    scoring: bool = False
    waiting: bool = False  # first wait for the turn: only then may the opt-in share give its place away
    waited: bool = False
    client_gone: asyncio.Event = field(default_factory=asyncio.Event)
    reclaimed: asyncio.Event = field(default_factory=asyncio.Event)

    def admit(self, caller: Hashable, drain: Drain) -> None:
        self.caller = caller
        self.drain = drain

    def stops(self) -> list[asyncio.Event]:
        if self.drain is not None and self.drain.refusing:
            self.end(self.drain.stops_queue)
        queue = [self.drain.stops_queue] if self.drain is not None else []
        return [self.client_gone, *queue, self.reclaimed]

    def end(self, stop: asyncio.Event) -> NoReturn:
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
    """Kept in the scope too, for work run outside the request's task (MCP's)."""
    cycle = Cycle(request_id)
    scope.setdefault("state", {})["cycle"] = cycle
    _current.set(cycle)
    return cycle


def of_scope(scope: Scope) -> Cycle | None:
    return scope.get("state", {}).get("cycle")


def enter(cycle: Cycle | None) -> None:
    _current.set(cycle)


def current() -> Cycle | None:
    return _current.get()


def current_id() -> str | None:
    cycle = _current.get()
    return None if cycle is None else cycle.id


def note_usage(calls: int | None = None, input_tokens: int | None = None) -> None:
    cycle = _current.get()
    if cycle is None:
        return
    if calls is not None:
        cycle.usage.calls = calls
    if input_tokens is not None:
        cycle.usage.input_tokens = input_tokens
