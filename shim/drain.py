"""Draining on SIGTERM: stop admitting, finish what was admitted, exit. begin() runs in a signal handler and only
records the moment; the server ticks the drain from its loop."""
from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Callable, Iterator


class Drain:
    def __init__(self, announce_seconds: float, clock: Callable[[], float] = time.monotonic):
        self._announce_seconds = announce_seconds
        self._clock = clock
        self._began_at: float | None = None
        self._admitted = 0
        self.stops_queue = asyncio.Event()  # the requests waiting for the lock give up

    @property
    def admitted(self) -> int:
        return self._admitted

    @contextlib.contextmanager
    def admission(self) -> Iterator[None]:
        self._admitted += 1
        try:
            yield
        finally:
            self._admitted -= 1

    @property
    def draining(self) -> bool:
        return self._began_at is not None

    def begin(self) -> None:
        if self._began_at is None:
            self._began_at = self._clock()

    @property
    def refusing(self) -> bool:
        return self._began_at is not None and self._clock() - self._began_at >= self._announce_seconds

    @property
    def done(self) -> bool:
        return self.refusing and self.admitted == 0

    def tick(self) -> None:
        if self.refusing and not self.stops_queue.is_set():
            self.stops_queue.set()
