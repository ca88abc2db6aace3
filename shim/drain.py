"""Draining a shim on SIGTERM (docs/operations.md, "Draining"): stop admitting, finish what was admitted, exit.
begin() runs in a signal handler and only records the moment; the server ticks the drain from its loop."""
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
        self.stops_queue = asyncio.Event()  # set by tick() once refusing: the requests waiting for the lock give up

    @property
    def admitted(self) -> int:
        """POSTs admitted and not yet answered (shim/edge/admission.py counts them through admission())."""
        return self._admitted

    @contextlib.contextmanager
    def admission(self) -> Iterator[None]:
        """One admitted POST, counted while it runs: the drain is not done before it is answered."""
        self._admitted += 1
        try:
            yield
        finally:
            self._admitted -= 1

    @property
    def draining(self) -> bool:
        return self._began_at is not None

    def begin(self) -> None:
        """Safe to call from a signal handler: it only records the moment."""
        if self._began_at is None:
            self._began_at = self._clock()

    @property
    def refusing(self) -> bool:
        """Whether a new POST is refused: the drain began more than announce_seconds ago."""
        return self._began_at is not None and self._clock() - self._began_at >= self._announce_seconds

    @property
    def done(self) -> bool:
        return self.refusing and self.admitted == 0

    def tick(self) -> None:
        """From the event loop: wake the requests waiting for the lock once the drain refuses."""
        if self.refusing and not self.stops_queue.is_set():
            self.stops_queue.set()
