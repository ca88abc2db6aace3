"""A request whose client went away before it reached the model is not scored, and counted; one already scoring
finishes (shim/cycle.py), over a fake model held by a gate."""
from __future__ import annotations

import asyncio

import pytest

from shim import cycle
from shim.app import create_app
from shim.cycle import Cycle
from shim.errors.codes import CLIENT_GONE
from shim.errors.raised import ApiError
from shim.metrics import ShimMetrics
from shim.port.calls import CallRunner
from shim.port.locks import acquire_unless
from shim.port.turns import Turns

from .asgi_exchange import RawRequest
from .fake_model import FakeModel
from .shim_helpers import AUTH, decide_body, make_settings, shared_body

pytestmark = pytest.mark.anyio


async def until(condition, seconds: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


def gone_count(metrics: ShimMetrics) -> float:
    return metrics.registry.get_sample_value("intern_decision_shim_client_gone_total")


def queued(metrics: ShimMetrics) -> float:
    return metrics.registry.get_sample_value("intern_decision_shim_requests_queued")


@pytest.fixture
def held():
    """An app over a model whose calls wait for a gate, and its metrics."""
    model = FakeModel(base={"approve": 1.0})
    model.gate = asyncio.Event()
    metrics = ShimMetrics()
    return create_app(make_settings(), model, metrics), model, metrics


async def test_a_request_whose_client_goes_while_it_waits_for_the_lock_is_never_scored(held):
    app, model, metrics = held
    scoring = RawRequest(app, "/decide", decide_body(id="first"), AUTH).start()
    await until(lambda: len(model.calls) == 1)
    waiting = RawRequest(app, "/decide", decide_body(id="second"), AUTH).start()
    await until(lambda: queued(metrics) == 1)
    waiting.leave.set()
    await asyncio.wait_for(waiting.task, 2)
    assert waiting.status == 499
    assert gone_count(metrics) == 1 and queued(metrics) == 0
    model.gate.set()
    await asyncio.wait_for(scoring.task, 2)
    assert scoring.status == 200
    assert len(model.calls) == 1 and len(model.request_ids) == 1
    after = RawRequest(app, "/decide", decide_body(id="third"), AUTH).start()
    await asyncio.wait_for(after.task, 2)
    assert after.status == 200 and len(model.calls) == 2  # the lock was left free


async def test_a_request_already_scoring_finishes_every_call_when_its_client_goes(held):
    app, model, metrics = held
    request = RawRequest(app, "/decide/shared", shared_body(40), AUTH).start()  # 3 calls
    await until(lambda: len(model.calls) == 1)
    request.leave.set()
    await asyncio.sleep(0.05)
    model.gate.set()
    await asyncio.wait_for(request.task, 2)
    assert len(model.calls) == 3
    assert gone_count(metrics) == 0


async def test_a_client_gone_before_its_turn_frees_its_queue_slot_at_once(held):
    _, model, metrics = held
    app = create_app(make_settings(max_queue="2", max_queue_per_peer="2"), model, metrics)
    scoring = RawRequest(app, "/decide", decide_body(id="first"), AUTH).start()
    await until(lambda: len(model.calls) == 1)
    waiting = RawRequest(app, "/decide", decide_body(id="second"), AUTH).start()
    await until(lambda: queued(metrics) == 1)
    refused = RawRequest(app, "/decide", decide_body(id="third"), AUTH).start()
    await asyncio.wait_for(refused.task, 2)
    assert refused.status == 429
    waiting.leave.set()
    await asyncio.wait_for(waiting.task, 2)
    admitted = RawRequest(app, "/decide", decide_body(id="fourth"), AUTH).start()
    await until(lambda: queued(metrics) == 1)
    model.gate.set()
    await asyncio.wait_for(asyncio.gather(scoring.task, admitted.task), 2)
    assert (scoring.status, admitted.status) == (200, 200)
    assert len(model.calls) == 2


async def test_a_turn_won_in_the_same_moment_the_client_goes_is_given_back_and_answered_499():
    lock, metrics = Turns(), ShimMetrics()
    request = Cycle("gone")
    request.client_gone.set()

    async def in_the_requests_task() -> None:
        cycle.enter(request)
        await CallRunner(FakeModel(), metrics, lock).run("a state", [{"questions": {}}], request.id)

    with pytest.raises(ApiError) as ended:
        await asyncio.create_task(in_the_requests_task())
    assert ended.value.error is CLIENT_GONE and not lock.locked() and gone_count(metrics) == 1


def test_only_a_requests_first_wait_for_its_turn_may_give_its_place_away():
    request = Cycle("twice")
    with request.waiting_for_turn():
        assert request.waiting
    with request.waiting_for_turn():
        assert not request.waiting


def test_a_free_lock_is_taken_at_once_with_no_task_or_future_to_watch_the_stops():
    """The common case costs nothing: the coroutine finishes on its first step, without suspending."""
    lock, stop = Turns(), asyncio.Event()
    stepping = acquire_unless(lock, "caller", stop)
    with pytest.raises(StopIteration) as finished:
        stepping.send(None)
    assert finished.value.value is None and lock.locked()


async def test_a_lock_about_to_be_handed_to_a_waiter_is_waited_for_and_the_stops_still_watched():
    lock, stop = Turns(), asyncio.Event()
    await lock.acquire("a")
    first = asyncio.ensure_future(lock.acquire("b"))
    await asyncio.sleep(0)
    lock.release()  # promised to `first`, which has not run yet
    second = asyncio.ensure_future(acquire_unless(lock, "c", stop))
    await asyncio.sleep(0)
    await first
    assert not second.done()
    stop.set()
    assert await second is stop
    lock.release()
    assert not lock.locked()


async def test_an_mcp_tool_call_whose_client_goes_while_it_waits_for_its_turn_is_never_scored(held):
    """The SDK runs the tool outside the request's task; the request's cycle goes with it, client_gone included."""
    _, model, metrics = held
    app = create_app(make_settings(mcp="1"), model, metrics)
    scoring = RawRequest(app, "/decide", decide_body(id="first"), AUTH).start()
    await until(lambda: len(model.calls) == 1)
    arguments = {"model": "Intern-Decision-4B", "state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "system_one",
                                                                             "arguments": arguments}}
    waiting = RawRequest(app, "/mcp", message, {**AUTH, "Accept": "application/json, text/event-stream",
                                                "MCP-Protocol-Version": "2025-11-25"}).start()
    await until(lambda: queued(metrics) == 1)
    waiting.leave.set()
    await asyncio.wait_for(waiting.task, 2)
    model.gate.set()
    await asyncio.wait_for(scoring.task, 2)
    assert len(model.calls) == 1 and gone_count(metrics) == 1 and queued(metrics) == 0
