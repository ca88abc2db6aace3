"""Draining on SIGTERM (shim/drain.py, shim/server/): /health 503 at once, POSTs admitted while the drain is
announced and refused after it (401 still first), admitted requests finished, then the server exits."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from devstack.process import free_port
from shim.app import build_service, create_app
from shim.drain import Drain
from shim.server import DrainingServer, config

from .fake_model import FakeModel
from .shim_helpers import AUTH, TOKEN, decide_body, make_settings

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_drain_refuses_after_its_announcement_and_is_done_when_nothing_admitted_is_left():
    clock = Clock()
    drain = Drain(2.0, clock)
    assert not drain.draining and not drain.refusing and not drain.done
    with drain.admission():
        drain.begin()
        assert drain.draining and not drain.refusing
        clock.now += 2.0
        drain.begin()  # a second call keeps the first moment
        assert drain.refusing and not drain.done  # one admitted request is not finished
    assert drain.admitted == 0 and drain.done


@pytest.fixture
def draining_app():
    model = FakeModel(base={"approve": 1.0})
    return build_service(make_settings(drain_seconds="0.2"), model), model


async def test_health_is_503_draining_at_once(draining_app):
    service, _ = draining_app
    app = service.app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim") as client:
        assert (await client.get("/health")).status_code == 200
        service.drain.begin()
        health = await client.get("/health")
    assert health.status_code == 503
    assert health.json() == {"status": "draining",
                             "error": {"code": "draining", "message": "this replica is shutting down"}}


async def test_posts_are_admitted_during_the_announcement_then_refused_with_retry_after(draining_app):
    service, model = draining_app
    app = service.app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim") as client:
        service.drain.begin()
        admitted = await client.post("/decide", json=decide_body(), headers=AUTH)
        assert admitted.status_code == 200
        await asyncio.sleep(0.25)
        refused = await client.post("/decide", json=decide_body(), headers=AUTH)
        unauthenticated = await client.post("/decide", json=decide_body())
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "draining"
    assert refused.headers["retry-after"] == "1" and refused.headers["connection"] == "close"
    assert unauthenticated.status_code == 401  # auth before the drain, as before admission
    assert len(model.calls) == 1


async def test_a_request_admitted_before_the_drain_finishes_and_then_the_drain_is_done(draining_app):
    service, model = draining_app
    app = service.app
    model.gate = asyncio.Event()
    drain = service.drain
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim") as client:
        scoring = asyncio.create_task(client.post("/decide", json=decide_body(), headers=AUTH))
        while not model.calls:
            await asyncio.sleep(0.005)
        drain.begin()
        await asyncio.sleep(0.25)
        assert drain.refusing and not drain.done
        model.gate.set()
        assert (await scoring).status_code == 200
    assert drain.done


async def test_a_new_post_and_one_waiting_for_the_lock_are_refused_alike(draining_app):
    """The drain's refusal is one answer (shim/errors/codes.py's DRAINING), whether the edge refuses a new POST or
    the port stops one that was waiting for the lock."""
    service, model = draining_app
    model.gate = asyncio.Event()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=service.app), base_url="http://shim") as client:
        scoring = asyncio.create_task(client.post("/decide", json=decide_body(), headers=AUTH))
        while not model.calls:
            await asyncio.sleep(0.005)
        waiting = asyncio.create_task(client.post("/decide", json=decide_body(), headers=AUTH))
        await asyncio.sleep(0.05)
        service.drain.begin()
        await asyncio.sleep(0.25)
        service.drain.tick()  # the server's tick: once refusing, the queue is stopped
        new = await client.post("/decide", json=decide_body(), headers=AUTH)
        stopped = await waiting
        model.gate.set()
        assert (await scoring).status_code == 200
    expected = {"error": {"code": "draining", "message": "this replica is shutting down and had not started this "
                                                         "request; retry (another replica)"}}
    for refused in (new, stopped):
        assert (refused.status_code, refused.json()) == (503, expected)
        assert (refused.headers["retry-after"], refused.headers["connection"]) == ("1", "close")
    assert len(model.calls) == 1


def test_the_first_sigterm_drains_and_a_second_one_is_uvicorns():
    service = build_service(make_settings(), FakeModel())
    server = DrainingServer(config(service.app, "127.0.0.1", 0), service.drain)
    server.handle_exit(signal.SIGTERM, None)
    assert service.drain.draining and not server.should_exit
    server.handle_exit(signal.SIGTERM, None)
    assert server.should_exit


def test_sigint_is_uvicorns_own_at_once():
    service = build_service(make_settings(), FakeModel())
    server = DrainingServer(config(service.app, "127.0.0.1", 0), service.drain)
    server.handle_exit(signal.SIGINT, None)
    assert server.should_exit and not service.drain.draining


async def test_the_server_exits_once_the_drain_is_done():
    clock = Clock()
    drain = Drain(1.0, clock)
    server = DrainingServer(config(create_app(make_settings(), FakeModel()), "127.0.0.1", 0), drain)
    server.handle_exit(signal.SIGTERM, None)
    with drain.admission():
        clock.now += 1.0
        assert await server.on_tick(1) is False
    assert await server.on_tick(2) is True


def test_sigterm_with_a_full_queue_answers_every_admitted_request_before_one_more_call_is_over(tmp_path):
    """A real shim (tests/unit/fake_shim.py) whose calls take CALL seconds, its queue full when SIGTERM comes: the
    request holding the lock finishes (200); every one still waiting for it is answered 503 draining with
    Retry-After once DRAIN_SECONDS are over, before the call in progress ends, so never scored one after another;
    none is reset; the shim exits 0. So a grace period of DRAIN_SECONDS plus one request (and a margin) loses
    nothing admitted."""
    call, drain_seconds, queue = 3.0, 0.5, 6
    port = free_port()
    env = {**os.environ, "INTERN_DECISION_API_TOKEN": TOKEN, "INTERN_DECISION_TRITON_API_KEY": "k" * 32,
           "INTERN_DECISION_MAX_QUEUE": str(queue), "INTERN_DECISION_MAX_QUEUE_PER_PEER": str(queue),
           "INTERN_DECISION_DRAIN_SECONDS": str(drain_seconds),
           "INTERN_DECISION_PROBE_SECONDS": "3600", "FAKE_CALL_SECONDS": str(call)}
    log = (tmp_path / "shim.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "tests.unit.fake_shim", "--port", str(port)],
                               cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None and time.monotonic() < deadline, "the shim did not start"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        answered: list[int] = []  # the requests' numbers, in the order their answers came
        with ThreadPoolExecutor(queue) as pool:
            def post(number: int):
                try:
                    return httpx.post(f"{url}/decide", json=decide_body(id=f"d{number}"), headers=AUTH, timeout=60)
                except httpx.TransportError as exc:
                    return exc
                finally:
                    answered.append(number)

            first = pool.submit(post, 0)
            time.sleep(0.3)  # it holds the lock
            rest = [pool.submit(post, number) for number in range(1, queue)]
            time.sleep(0.3)  # all admitted, waiting for the lock
            process.send_signal(signal.SIGTERM)
            answers = [future.result(timeout=60) for future in [first, *rest]]
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
    assert not [answer for answer in answers if isinstance(answer, Exception)], answers  # none reset
    assert answers[0].status_code == 200, answers[0].text
    for answer in answers[1:]:
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1", answer.text
        assert answer.json()["error"]["code"] == "draining"
    assert answered[-1] == 0  # the waiting ones were answered before the one call in progress ended
