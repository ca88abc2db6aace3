"""Whether the model answers, and healing it when it does not (docs/operations.md, "When the model process dies").

Triton's readiness does not see the python backend's stub process die: the model stays "ready" while every
inference answers "Stub process ... is not healthy", and Triton never starts a new stub. So the watch pings the
model through Triton (wire/ping.py) under the service's lock, so that a ping never waits behind an inference:

* at once when an inference failed with Triton's own error or got no answer; the model counts as down from that
  moment, so /health answers 503 and requests are refused at once instead of each waiting on a dead stub;
* every `probe_seconds` while up and idle (an inference in progress speaks for itself), every `retry_seconds`
  while down.

A ping that Triton answers with an error means the model's process is broken: the watch asks Triton to unload and
load the model again (a new stub), waiting RELOAD_DELAYS[k] seconds before reload k + 1, at most len(RELOAD_DELAYS)
times; the count starts over once the model has stayed up for `stable_seconds` after a reload. A Triton that does
not answer, or a ping that times out, is waited for, never reloaded: a restarted Triton loads the model itself.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from wire.answer import CallAnswer
from wire.facts import ModelFacts

from .errors import Failure, ModelFailure
from .model import Model, Probe

log = logging.getLogger("intern_decision.shim.watch")

RELOAD_DELAYS = (0.0, 5.0, 15.0, 45.0, 135.0)
RETRY_SECONDS = 1.0
STABLE_SECONDS = 60.0


class ModelWatch:
    """Wraps the model (a Model itself, for the service and the health check) and keeps `down`: None, or why the
    model is down. While it is down, inferences are refused at once (Failure.DOWN) and readiness says why."""

    def __init__(self, model: Model, lock: asyncio.Lock, probe_seconds: float, *,
                 retry_seconds: float = RETRY_SECONDS, reload_delays: tuple[float, ...] = RELOAD_DELAYS,
                 stable_seconds: float = STABLE_SECONDS, clock: Callable[[], float] = time.monotonic):
        self._model = model
        self._lock = lock
        self._probe_seconds = probe_seconds
        self._retry_seconds = retry_seconds
        self._reload_delays = reload_delays
        self._stable_seconds = stable_seconds
        self._clock = clock
        self._wake = asyncio.Event()
        self._wake.set()  # the first ping at once
        self._reloads = 0
        self._last_reload: float | None = None
        self.down: str | None = None

    async def predict_calls(self, requests: list[dict], request_id: str) -> list[CallAnswer]:
        if self.down is not None:
            raise ModelFailure(Failure.DOWN, self.down)
        try:
            return await self._model.predict_calls(requests, request_id)
        except ModelFailure as exc:
            if exc.failure.marks_down:
                self._mark_down(f"an inference failed ({exc.message}); checking the model")
                self._wake.set()
            raise

    async def ready(self) -> str | None:
        return self.down or await self._model.ready()

    async def facts(self) -> ModelFacts:
        return await self._model.facts()

    async def ping(self) -> Probe:
        return await self._model.ping()

    async def reload(self) -> str | None:
        return await self._model.reload()

    async def open(self) -> None:
        await self._model.open()

    async def close(self) -> None:
        await self._model.close()

    async def run(self) -> None:
        """Runs until cancelled; a failure of its own is logged and the watch goes on."""
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the model watch failed; going on")
                await asyncio.sleep(self._retry_seconds)

    async def step(self) -> None:
        """Wait for the next ping, ping, and act on the answer."""
        try:
            await asyncio.wait_for(self._wake.wait(),
                                   self._probe_seconds if self.down is None else self._retry_seconds)
        except TimeoutError:
            pass
        self._wake.clear()
        if self.down is None and self._lock.locked():
            return  # an inference is in progress: its own answer tells
        async with self._lock:
            probe = await self._model.ping()
        if probe.ok:
            self._mark_up()
        elif probe.reloadable:
            await self._heal(probe.reason)
        else:
            self._mark_down(probe.reason)

    async def _heal(self, reason: str) -> None:
        attempts = len(self._reload_delays)
        if self._reloads >= attempts:
            self._mark_down(f"{reason}; {attempts} reloads did not heal it: a person must look "
                            f"(docs/operations.md, \"When the model process dies\")", level=logging.ERROR)
            return
        delay = self._reload_delays[self._reloads]
        self._reloads += 1
        waiting = f", in {delay:g} s" if delay else ""
        self._mark_down(f"{reason}; reloading it (reload {self._reloads} of {attempts}{waiting})")
        if delay:
            await asyncio.sleep(delay)
        log.warning("reloading the model (reload %d of %d)", self._reloads, attempts)
        started = self._clock()
        problem = await self._model.reload()
        self._last_reload = self._clock()
        if problem is None:
            log.warning("the model was reloaded in %.1f s; checking it", self._last_reload - started)
            self._wake.set()
        else:
            self._mark_down(f"{reason}; reload {self._reloads} of {attempts} failed: {problem}",
                            level=logging.ERROR)

    def _mark_down(self, reason: str, level: int = logging.WARNING) -> None:
        if reason != self.down:
            log.log(level, "the model is down: %s", reason)
        self.down = reason

    def _mark_up(self) -> None:
        if self.down is not None:
            log.warning("the model answers again")
        self.down = None
        if self._last_reload is None or self._clock() - self._last_reload >= self._stable_seconds:
            self._reloads = 0
