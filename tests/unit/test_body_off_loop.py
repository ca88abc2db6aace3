"""No body work on the event loop: a large System One body is read into its request (structured instructions made
JSON text) on the body worker, the Triton request is built on a thread of its own, and MCP's check of what the SDK
may parse charges a value by the bytes it serializes to."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import pytest

from shim import cycle
from shim.cycle import Cycle
from shim.json_body import _Worker
from shim.systemone import mcp_body
from shim.systemone import request as systemone_request

from .fake_model import FakeModel
from .shim_helpers import AUTH, client_for, make_settings

pytestmark = pytest.mark.anyio


def structured_body(floats: int) -> dict:
    return {"model": "Intern-Decision-4B", "state": "s",
            "questions": {"q": {"type": "noul", "instructions": {"weights": [0.123456789] * floats}}}}


async def test_a_large_bodys_structured_instructions_become_text_off_the_loop(monkeypatch):
    threads = []
    real = systemone_request.text_of
    monkeypatch.setattr(systemone_request, "text_of",
                        lambda value: (threads.append(threading.current_thread().name), real(value))[1])
    model = FakeModel()
    async with client_for(model) as client:
        small = await client.post("/v1/systemone", json=structured_body(10), headers=AUTH)
        large = await client.post("/v1/systemone", json=structured_body(50_000), headers=AUTH)
    assert small.status_code == large.status_code == 200, large.text[:300]
    assert threads[0] == threading.current_thread().name  # a small body: on the loop, where a thread costs more
    assert threads[1].startswith("body-parse")
    assert json.loads(model.calls[-1]["questions"]["q"]["instructions"]) == {"weights": [0.123456789] * 50_000}


async def test_the_triton_request_is_built_off_the_loop_and_costs_the_loop_little(monkeypatch):
    """A 1 MiB state in 64 calls: 105–185 ms of the loop when the body was built on it; now the loop thread's own CPU
    time for the whole request stays under 5 ms."""
    from shim.errors import ModelFailure
    from shim.port import triton

    built_on = []
    real = triton.request_body
    monkeypatch.setattr(triton, "request_body",
                        lambda *args: (built_on.append(threading.current_thread().name), real(*args))[1])
    state = {"readings": [0.123456789] * 82_000}
    assert len(json.dumps(state)) > 1024 * 1024
    calls = [{"questions": {f"q{n}": {"type": "noul"}}} for n in range(64)]

    async def triton_answer(method, path, timeout, body=None, headers=None):
        return SimpleNamespace(status=500, headers={}, body=b'{"error": "refused in the test"}')

    model = triton.TritonModel(make_settings())
    monkeypatch.setattr(model._inference, "request", triton_answer)
    started = time.thread_time()
    with pytest.raises(ModelFailure):
        await model.predict_calls(state, calls, "r-1")
    loop_seconds = time.thread_time() - started
    assert built_on == ["triton-body_0"]
    assert loop_seconds < 0.005, loop_seconds


def test_mcp_charges_a_float_by_its_digits():
    """8,000 floats passed as 8 KiB when a float counted one byte (28 ms of serializing before the 413)."""
    floats = [0.123456789] * 1000  # 11 digits and ", " each: 13 KB serialized
    assert len(json.dumps(floats)) > mcp_body.SDK_MESSAGE_BYTES
    assert not mcp_body.small(floats)
    assert mcp_body.small([0.5] * 1000) and len(json.dumps([0.5] * 1000)) <= mcp_body.SDK_MESSAGE_BYTES
    message = {"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"a": [1.5, None, True, "é" * 10]}}
    assert mcp_body.small(message)


@pytest.mark.parametrize("value", [
    [0.123456789] * 700, {f"k{n}": None for n in range(900)}, [[]] * 2100, ["x" * 60] * 130, [10 ** 18] * 500,
])
def test_mcp_never_passes_a_value_that_serializes_past_the_bound(value):
    assert len(json.dumps(value, ensure_ascii=False).encode()) > mcp_body.SDK_MESSAGE_BYTES
    assert not mcp_body.small(value)


@pytest.mark.parametrize("count", [1, 64])
def test_the_state_travels_once_beside_its_calls(count):
    from shim.port import triton
    from wire import strict_json

    state = {"s": [1.5] * 1000}
    calls = [{"questions": {f"q{n}": {"type": "noul"}}} for n in range(count)]
    body, _ = triton.request_body(state, calls, "r")
    assert body.count(strict_json.dumps(state)) == 1 and b'"STATE"' in body
    assert all(strict_json.dumps(call) in body for call in calls)
    assert len(body) < len(strict_json.dumps(state)) + 64 * count + 512  # one state, the questions, the header


async def test_the_body_worker_takes_callers_in_turn():
    """One caller's four large bodies queued, then another's: the other's is parsed second, not fifth."""
    worker, parsed = _Worker(), []

    def parse(name: str) -> str:
        time.sleep(0.01)
        parsed.append(name)
        return name

    async def job(caller: str, name: str) -> str:
        cycle.enter(Cycle(name, caller=caller))  # each job runs in a task of its own, as each request does
        return await worker.run(parse, name)

    jobs = [asyncio.create_task(job("heavy", f"heavy{n}")) for n in range(4)]
    await asyncio.sleep(0)
    jobs.append(asyncio.create_task(job("light", "light")))
    await asyncio.gather(*jobs)
    assert parsed == ["heavy0", "light", "heavy1", "heavy2", "heavy3"]
