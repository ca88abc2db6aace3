"""Draining a shim on SIGTERM (docs/scaling-out.md, "Drain"): stop admitting, finish what was admitted, exit.

At SIGTERM /health answers 503 `draining` at once, so the balancer (HAProxy's check, Kubernetes' readiness) takes
the replica out. New POSTs are still admitted for `announce_seconds`, the time the balancer needs to notice:
refusing them at once would fail the requests it sends in that window (HAProxy retries a connection failure only,
never an answer). After it, a new POST is 503 `draining` with Retry-After and `Connection: close`. The shim exits
once the announcement is over and no admitted request is left; Triton, started first, outlives it.
"""
from __future__ import annotations

import time
from typing import Callable


class Drain:
    def __init__(self, announce_seconds: float, clock: Callable[[], float] = time.monotonic):
        self._announce_seconds = announce_seconds
        self._clock = clock
        self._began_at: float | None = None
        self.admitted = 0  # POSTs admitted and not yet answered, counted by the POST guard

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
        """The drain is over: refusing new requests and none of the admitted ones left."""
        return self.refusing and self.admitted == 0
