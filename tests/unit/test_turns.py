"""The model's turns (shim/port/turns.py): the next holder is the oldest waiting request of the caller served least
recently; one caller's requests keep their order; a cancelled wait never holds the turn."""
from __future__ import annotations

import asyncio

import pytest

from shim.port.turns import REMEMBERED_CALLERS, Turns

pytestmark = pytest.mark.anyio


async def served_order(turns: Turns, arrivals: list[str]) -> list[str]:
    """Each arrival (a caller's name) waits while the turn is held, in this order; the order they are served in."""
    served: list[str] = []

    async def one(caller: str, number: int) -> None:
        await turns.acquire(caller)
        served.append(f"{caller}{number}")
        await asyncio.sleep(0)
        turns.release()

    await turns.acquire("holder")
    tasks = [asyncio.create_task(one(caller, number)) for number, caller in enumerate(arrivals)]
    await asyncio.sleep(0)
    assert turns.waiting() == len(arrivals)
    turns.release()
    await asyncio.gather(*tasks)
    assert turns.free()
    return served


async def test_a_caller_behind_another_callers_backlog_is_served_next():
    served = await served_order(Turns(), ["a"] * 24 + ["v"])
    assert served[:2] == ["a0", "v24"] and served[2:] == [f"a{n}" for n in range(1, 24)]


async def test_callers_take_turns_and_each_callers_requests_keep_their_order():
    served = await served_order(Turns(), ["a", "a", "a", "b", "b", "c"])
    assert served == ["a0", "b3", "c5", "a1", "b4", "a2"]


async def test_a_caller_served_before_comes_after_one_never_served():
    turns = Turns()
    await turns.acquire("a")
    turns.release()
    assert await served_order(turns, ["a", "b"]) == ["b1", "a0"]


async def test_the_caller_remembered_longest_ago_is_forgotten_and_counts_as_never_served():
    turns = Turns()
    for number in range(REMEMBERED_CALLERS):
        await turns.acquire(number)
        turns.release()
    # the holder's turn makes one too many: caller 0, served longest ago, is forgotten, and 1 still remembered
    assert await served_order(turns, [1, 0]) == ["01", "10"]


async def test_a_free_turn_is_taken_without_suspending():
    turns = Turns()
    stepping = turns.acquire("a")
    with pytest.raises(StopIteration):
        stepping.send(None)
    assert turns.locked() and not turns.free()


async def cancelled_woken_then_released(turns: Turns, waiting: asyncio.Task) -> None:
    waiting.cancel()
    await asyncio.sleep(0)  # it has run and left the line
    turns.release()


async def released_then_cancelled(turns: Turns, waiting: asyncio.Task) -> None:
    turns.release()  # handed to it, which has not run yet
    waiting.cancel()


async def cancelled_then_released_unwoken(turns: Turns, waiting: asyncio.Task) -> None:
    waiting.cancel()  # its future is cancelled; the task has not run to forget it
    turns.release()


@pytest.mark.parametrize("moment", [cancelled_woken_then_released, released_then_cancelled,
                                    cancelled_then_released_unwoken])
async def test_a_cancelled_wait_never_keeps_the_turn_and_the_next_waiter_gets_it(moment):
    turns = Turns()
    await turns.acquire("a")
    cancelled = asyncio.create_task(turns.acquire("b"))
    after = asyncio.create_task(turns.acquire("c"))
    await asyncio.sleep(0)
    await moment(turns, cancelled)
    await asyncio.gather(cancelled, return_exceptions=True)
    await asyncio.wait_for(after, 1)
    assert cancelled.cancelled() and turns.locked() and turns.waiting() == 0
    turns.release()
    assert turns.free()


async def test_releasing_a_turn_not_held_is_an_error():
    with pytest.raises(RuntimeError):
        Turns().release()
