"""Triton's liveness verdict (wire/liveness.py) against a real tritonserver of this module's own (its stub is
killed at the end): a ping allowed one call's time says "busy" behind a long many-call request, because the model
counts each call on Triton's metrics port as it ends, while execute still runs; a call that outlasts the ping
and a dead stub are down.
"""
from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from devstack.triton import TritonServer
from wire.liveness import BUSY, DOWN, UP, liveness, read_finished_calls

from .helpers import MODEL, children, infer_calls, model_env

pytestmark = pytest.mark.triton
CALL_SECONDS = 0.5  # each call of the long request sleeps this long in the fixture, then scores
CALLS = 12
PING_TIMEOUT = 2.0  # one call's time and a margin, as the deployments size it
HANG_SECONDS = 3 * PING_TIMEOUT  # a call far longer than the ping allows: the model hangs
QUESTION = {"q": {"type": "choice", "instructions": "Which team handles this?",
                  "criteria": {"billing": "Payments and refunds", "delivery": "Shipping"}}}
SLOW_CALL = {"state": {"__fixture_fault__": {"sleep_seconds": CALL_SECONDS}}, "questions": QUESTION}


@pytest.fixture(scope="module")
def server(fixture_pins, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("liveness") / "tritonserver.log"
    with TritonServer(model_env(fixture_pins), log_path).serving(240) as triton:
        yield triton


def verdict(server: TritonServer, timeout: float = PING_TIMEOUT):
    return liveness(server.http_url, server.metrics_url, MODEL, server.api_key, timeout)


def finished(server: TritonServer, seconds: float = 10) -> float:
    """A scrape of a loaded machine may time out once: the count must be read within `seconds`."""
    deadline = time.monotonic() + seconds
    while (count := read_finished_calls(server.metrics_url, MODEL)) is None:
        assert time.monotonic() < deadline, "Triton's metrics carry no intern_decision_calls_total"
        time.sleep(0.2)
    return count


def settled(server: TritonServer, expected: float, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while finished(server) != expected:
        assert time.monotonic() < deadline, f"the count stayed at {finished(server)}, not {expected}"
        time.sleep(0.05)
    return True


def stub_pid(server: TritonServer) -> int:
    (pid,) = [pid for pid, name in children(server.pid).items() if name.startswith("triton_python")]
    return pid


def test_a_ping_behind_a_long_many_call_request_says_busy_while_the_request_runs(server):
    assert verdict(server).state == UP
    start = finished(server)
    with ThreadPoolExecutor(1) as pool:
        answers = pool.submit(infer_calls, server, [SLOW_CALL] * CALLS)
        deadline = time.monotonic() + 60
        while finished(server) < start + 1:  # the first call's count, seen while the request still runs
            assert not answers.done(), "the request ended before any of its calls was counted on /metrics"
            assert time.monotonic() < deadline, "no call of the request was counted"
            time.sleep(0.05)
        seen_mid_request = finished(server) - start
        judged = verdict(server)
        running = not answers.done()
        assert len(answers.result()) == CALLS
    assert seen_mid_request < CALLS and running, "the count must move while execute runs, not at its end"
    assert judged.state == BUSY and judged.alive, judged
    assert "call(s) ended meanwhile" in judged.detail
    assert settled(server, start + CALLS)  # the model applies its metric updates off the response path
    assert verdict(server).state == UP


def test_a_call_that_hangs_past_one_calls_time_is_down_and_a_dead_stub_is_down(server):
    start = finished(server)
    hanging = {**SLOW_CALL, "state": {"__fixture_fault__": {"sleep_seconds": HANG_SECONDS}}}
    with ThreadPoolExecutor(1) as pool:
        answers = pool.submit(infer_calls, server, [SLOW_CALL, hanging])
        deadline = time.monotonic() + 60
        while finished(server) < start + 1:  # the first call ended: the second, hanging one is under way
            assert time.monotonic() < deadline, "no call of the request was counted"
            time.sleep(0.05)
        hung = verdict(server)
        assert not answers.done()
        answers.result()
    assert hung.state == DOWN and hung.hung and "no call ended meanwhile" in hung.detail, hung
    os.kill(stub_pid(server), signal.SIGKILL)
    dead = verdict(server)
    assert dead.state == DOWN and not dead.alive and not dead.hung, dead
    assert "is not healthy" in dead.detail
