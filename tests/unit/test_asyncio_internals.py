"""The private part of asyncio that shim/port/locks.py relies on: a lock's queue of waiters. If a Python release
renames or drops it, a new request would take the lock at once past the requests queued for it; this fails first."""
from __future__ import annotations

import asyncio

import pytest

from shim.port.locks import _free


@pytest.mark.anyio
async def test_a_lock_just_released_to_a_queued_waiter_is_not_free():
    lock = asyncio.Lock()
    await lock.acquire()
    assert not _free(lock)
    waiter = asyncio.ensure_future(lock.acquire())
    await asyncio.sleep(0)
    assert list(lock._waiters or ()), "asyncio.Lock no longer keeps its waiters in _waiters"
    lock.release()  # handed to the waiter, which has not run yet
    assert not lock.locked() and not _free(lock)
    await waiter
    lock.release()
    assert _free(lock)
