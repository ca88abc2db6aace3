"""Drain, a second token and gone clients against the real CPU stack: the session's tritonserver, and shims of this
module's own under uvicorn (the drain test stops its shim).

* SIGTERM: /health 503 at once; a POST sent while the drain is announced is admitted and scored (it gets the lock
  before DRAIN_SECONDS are over: a request still waiting for it then is answered 503 draining, tests/unit/
  test_shim_drain.py); one after it is 503 draining with Retry-After; the request in progress finishes; the shim
  exits 0 and Triton stays ready.
* API_TOKEN and API_TOKEN_NEXT are both accepted, anything else is 401.
* A request whose client gave up while it waited for the lock never reaches the model, and is counted.
"""
from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from devstack.shim import ShimServer

from .helpers import AUTH, SHIM_TOKEN, decide, quiet_metrics, settled_call_counts, slow

pytestmark = pytest.mark.triton
NEXT_TOKEN = "integration-next-token-9876543210-zyxwvu"
DRAIN_SECONDS = 3.0  # above what is left of the request in progress (2.5 s, signalled at 0.5 s), so that the
# request announced behind it holds the lock before the drain stops the queue; that one takes 2 s, so that the
# replica is still finishing it (and answering) when the request after the drain's end comes
NO_CALLS = {"ok": 0, "invalid": 0, "out_of_memory": 0, "failed": 0}


def shim_for(triton, folder, **env: str) -> ShimServer:
    settings = {"INTERN_DECISION_API_TOKEN": SHIM_TOKEN, "INTERN_DECISION_PROBE_SECONDS": "3600",
                "INTERN_DECISION_MAX_QUEUE": "4", "INTERN_DECISION_MAX_QUEUE_PER_PEER": "0",
                **{f"INTERN_DECISION_{name}": value for name, value in env.items()}}
    return ShimServer(triton, settings, folder / "shim.log")


def metric(shim: ShimServer, name: str) -> float:
    for line in httpx.get(shim.metrics_url, timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} is not on the shim's metrics page")


def test_sigterm_drains_the_shim_then_it_exits_and_triton_stays(triton, tmp_path):
    shim = shim_for(triton, tmp_path, DRAIN_SECONDS=str(DRAIN_SECONDS))
    with shim.serving(60), ThreadPoolExecutor(2) as pool:
        in_progress = pool.submit(httpx.post, f"{shim.url}/decide", json=slow(2.5),
                                  headers={**AUTH, "X-Request-Id": "drain-in-progress"}, timeout=60)
        time.sleep(0.5)
        shim._process.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        health = httpx.get(f"{shim.url}/health", timeout=5)
        announced = pool.submit(httpx.post, f"{shim.url}/decide", json=slow(2.0),
                                headers={**AUTH, "X-Request-Id": "drain-announced"}, timeout=60)
        time.sleep(DRAIN_SECONDS + 0.2)
        refused = httpx.post(f"{shim.url}/decide", json=decide(), headers=AUTH, timeout=10)
        unauthenticated = httpx.post(f"{shim.url}/decide", json=decide(), timeout=10)
        assert health.status_code == 503 and health.json()["status"] == "draining"
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
        assert refused.headers["retry-after"] == "1"
        assert unauthenticated.status_code == 401
        assert in_progress.result().status_code == 200, in_progress.result().text
        assert announced.result().status_code == 200, announced.result().text
        assert shim.wait(30) == 0
    assert "drained: no admitted request left; exiting" in shim.log_text()
    assert httpx.get(f"http://{triton.http_url}/v2/health/ready", timeout=5).status_code == 200


def test_both_tokens_are_accepted_during_a_rotation(triton, tmp_path):
    with shim_for(triton, tmp_path, API_TOKEN_NEXT=NEXT_TOKEN).serving(60) as shim:
        with httpx.Client(base_url=shim.url, timeout=60) as http:
            for token in (SHIM_TOKEN, NEXT_TOKEN):
                answer = http.post("/decide", json=decide(), headers={"Authorization": f"Bearer {token}"})
                assert answer.status_code == 200, answer.text
            refused = http.post("/decide", json=decide(), headers={"Authorization": "Bearer " + "w" * 40})
            assert refused.status_code == 401
    assert NEXT_TOKEN not in shim.log_text() and NEXT_TOKEN not in triton.log_text()


def test_a_client_gone_while_queued_is_never_scored_and_is_counted(triton, tmp_path):
    with shim_for(triton, tmp_path).serving(60) as shim:
        before = quiet_metrics(triton)
        holding = threading.Thread(target=httpx.post, args=(f"{shim.url}/decide",),
                                   kwargs={"json": slow(1.5), "headers": AUTH, "timeout": 60})
        holding.start()
        time.sleep(0.3)
        with pytest.raises(httpx.ReadTimeout):  # queued behind the lock when it leaves
            httpx.post(f"{shim.url}/decide", json=decide(), headers={**AUTH, "X-Request-Id": "gone-queued"},
                       timeout=0.3)
        holding.join()
        settled_call_counts(triton, before, {**NO_CALLS, "ok": 1}, timeout=30)
        assert metric(shim, "intern_decision_shim_client_gone_total") == 1
        assert "gone-queued.0" not in triton.log_text()
        assert metric(shim, "intern_decision_shim_requests_queued") == 0
