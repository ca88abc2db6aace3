"""A request's JSON, read strictly where it cannot stall the event loop: small text on the loop, larger text on one
worker thread that rests after each parse and takes callers in turn."""
from __future__ import annotations

import asyncio
import gc
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from starlette.requests import Request

from wire import strict_json

from . import cycle
from .port.turns import Turns
from .tracing import span

ON_LOOP_BYTES = 8 * 1024
T = TypeVar("T")


class _Worker:
    """The next job is the oldest of the caller served least recently: one caller's large bodies never hold
    another's."""

    def __init__(self) -> None:
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="body-parse")
        self._rest_until = 0.0  # the worker thread's alone
        self._turns = Turns()

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        request = cycle.current()
        await self._turns.acquire(None if request is None else request.caller)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._worker, self._run, work, args)
        finally:
            self._turns.release()

    def _run(self, work: Callable[..., T], args: tuple) -> T:
        time.sleep(max(0.0, self._rest_until - time.monotonic()))
        started = time.monotonic()
        collecting = gc.isenabled()
        gc.disable()  # process-wide: this one worker is all that turns it off, and back on
        try:
            return work(*args)
        finally:
            if collecting:
                gc.enable()
            ended = time.monotonic()
            self._rest_until = ended + (ended - started)


_worker = _Worker()


async def strict_body(raw: bytes, what: str = "the body") -> Any:
    with span("parse body"):
        if len(raw) <= ON_LOOP_BYTES:
            return strict_json.loads(raw, what)
        return await _worker.run(strict_json.loads, raw, what)


async def read_body(large: bool, work: Callable[..., T], *args: Any) -> T:
    if not large:
        return work(*args)
    return await _worker.run(work, *args)


async def request_json(request: Request, invalid: Callable[[str], Exception]) -> tuple[Any, bool]:
    raw = await request.body()
    try:
        return await strict_body(raw), len(raw) > ON_LOOP_BYTES
    except strict_json.NotStrictJson as exc:
        raise invalid(str(exc)) from None


def json_object(value: Any, refused: Callable[[], Exception]) -> dict:
    if not isinstance(value, dict):
        raise refused()
    return value
