"""Two replicas on this machine, each its own CPU tritonserver and shim, behind a real HAProxy rendered from the
production template (docker/haproxy/haproxy.cfg.template): the scale-out design through the real parts.

Load spreads; one request's calls stay on one replica; 429 only when every replica is full (401 first); a replica
whose model refuses its pin never gets traffic; a token rotation by two rolling restarts of every shim under a
steady load loses no request; killing one Triton takes its replica out while the other answers.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from devstack.haproxy import HAProxyServer
from devstack.process import ServerExited
from devstack.shim import ShimServer
from devstack.triton import TritonServer

from .conftest import SHIM_TOKEN, model_env
from .test_reliability import decide, slow
from .test_triton_model import calls, read_metrics

pytestmark = pytest.mark.triton
NEXT_TOKEN = "scale-out-next-token-0123456789-abcdefgh"
MAX_QUEUE = 2
CHECK_INTER = "500ms"  # fall 2: a replica is out about a second after its /health turns 503
DRAIN_SECONDS = 2.5  # above what HAProxy needs to notice


def auth(token: str = SHIM_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Replica:
    name: str
    triton: TritonServer
    shim: ShimServer | None = None
    folder: Path | None = None

    def start_shim(self, **extra: str) -> ShimServer:
        old = self.shim
        env = {"INTERN_DECISION_API_TOKEN": SHIM_TOKEN, "INTERN_DECISION_MAX_QUEUE": str(MAX_QUEUE),
               "INTERN_DECISION_DRAIN_SECONDS": str(DRAIN_SECONDS), "INTERN_DECISION_PROBE_SECONDS": "0.5",
               **{f"INTERN_DECISION_{name}": value for name, value in extra.items()}}
        self.shim = ShimServer(self.triton, env, self.folder / f"shim-{time.monotonic_ns()}.log",
                               port=old.port if old else None, metrics_port=old.metrics_port if old else None)
        return self.shim.start()


class Fleet:
    def __init__(self, replicas: list[Replica], wrong: Replica, haproxy: HAProxyServer):
        self.replicas, self.wrong, self.haproxy = replicas, wrong, haproxy

    def calls_ok(self) -> list[float]:
        return [calls(read_metrics(replica.triton), "ok") for replica in self.replicas]


@pytest.fixture(scope="module")
def fleet(fixture_pins, tmp_path_factory):
    folder = tmp_path_factory.mktemp("scale-out")
    started: list = []
    replicas: list[Replica] = []
    try:
        for index in range(2):
            triton = TritonServer(model_env(fixture_pins), folder / f"tritonserver-{index}.log").start()
            started.append(triton)
            replicas.append(Replica(f"r{index}", triton, folder=folder))
        wrong_triton = TritonServer(model_env(fixture_pins, INTERN_DECISION_INFERENCE_SHA256="0" * 64),
                                    folder / "tritonserver-wrong-pin.log").start()
        started.append(wrong_triton)
        wrong = Replica("wrong-pin", wrong_triton, folder=folder)
        for replica in replicas:
            replica.triton.wait_ready(timeout=300)
        with pytest.raises(ServerExited):  # the model refuses a pin its checkpoint does not match
            wrong_triton.wait_ready(timeout=300)
        for replica in [*replicas, wrong]:
            started.append(replica.start_shim())
        for replica in replicas:
            replica.shim.wait_ready(timeout=60)
        haproxy = HAProxyServer([(replica.name, f"127.0.0.1:{replica.shim.port}") for replica in [*replicas, wrong]],
                                folder / "haproxy", check_inter=CHECK_INTER).start()
        started.append(haproxy)
        haproxy.wait_ready(timeout=30)
        time.sleep(1.5)  # both good replicas past `rise 2`
        yield Fleet(replicas, wrong, haproxy)
    finally:
        for server in reversed(started):
            server.stop()
        for replica in replicas:  # the shims the rolling restarts started
            if replica.shim is not None:
                replica.shim.stop()


class SteadyLoad:
    """Clients sending small /decide requests back to back through HAProxy until stopped; every answer's status."""

    def __init__(self, url: str, clients: int = 2, token: str = SHIM_TOKEN):
        self.url, self.token = url, token
        self.statuses: list[int] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(clients)]

    def _run(self, client: int) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as http:
            count = 0
            while not self._stop.is_set():
                count += 1
                try:
                    answer = http.post("/decide", json=decide(id=f"c{client}-{count}"), headers=auth(self.token))
                    self.statuses.append(answer.status_code)
                    if answer.status_code != 200:
                        self.failures.append(f"{answer.status_code} {answer.text[:200]}")
                except httpx.HTTPError as exc:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.02)

    def __enter__(self) -> "SteadyLoad":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


def shim_requests(shim: ShimServer) -> float:
    text = httpx.get(shim.metrics_url, timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("intern_decision_shim_requests_total{") and 'route="/decide' in line)


def test_load_spreads_and_a_requests_calls_all_stay_on_one_replica(fleet):
    before = fleet.calls_ok()
    with httpx.Client(base_url=fleet.haproxy.url, timeout=120) as http:
        shared = {"state": "One shared state.",
                  "decisions": [{"id": f"q{n}", "question": f"Question {n}?", "options": decide()["options"]}
                                for n in range(40)]}
        answer = http.post("/decide/shared", json=shared, headers={**auth(), "X-Request-Id": "spread-40"})
        assert answer.status_code == 200 and answer.json()["timing"]["calls"] == 3
    with SteadyLoad(fleet.haproxy.url, clients=3) as load:
        deadline = time.monotonic() + 30
        while len(load.statuses) < 20 and time.monotonic() < deadline:
            time.sleep(0.1)
    assert load.failures == [] and len(load.statuses) >= 20
    after = fleet.calls_ok()
    assert all(later > earlier for earlier, later in zip(before, after)), (before, after)
    # The model's call lines in Triton's log: {"request_id": "spread-40.<k>", ...}, quoted by Triton's logger.
    lines = {replica.name: [f'\\"request_id\\": \\"spread-40.{k}\\"' in replica.triton.log_text() for k in range(3)]
             for replica in fleet.replicas}
    assert sorted(lines.values()) == [[False] * 3, [True] * 3], lines


def test_429_only_once_every_replica_is_full_and_401_still_first(fleet):
    statuses: list[int] = []

    def hold() -> None:
        with httpx.Client(base_url=fleet.haproxy.url, timeout=60) as http:
            statuses.append(http.post("/decide", json=slow(3.0), headers=auth()).status_code)

    threads = [threading.Thread(target=hold) for _ in range(2 * MAX_QUEUE)]
    with httpx.Client(base_url=fleet.haproxy.url, timeout=10) as http:
        for thread in threads:  # the last one finds one replica full and the other with room: admitted
            thread.start()
            time.sleep(0.3)
        refused = http.post("/decide", json=decide(), headers=auth())
        unauthenticated = http.post("/decide", json=decide())
    for thread in threads:
        thread.join()
    assert statuses == [200] * (2 * MAX_QUEUE)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "busy"
    assert unauthenticated.status_code == 401


def test_a_replica_whose_model_refused_its_pin_never_gets_traffic(fleet):
    assert httpx.get(f"{fleet.wrong.shim.url}/health", timeout=10).status_code == 503
    with SteadyLoad(fleet.haproxy.url, clients=2) as load:
        deadline = time.monotonic() + 30
        while len(load.statuses) < 12 and time.monotonic() < deadline:  # enough to reach every replica in rotation
            time.sleep(0.1)
    assert load.failures == [] and len(load.statuses) >= 12
    assert shim_requests(fleet.wrong.shim) == 0


def rolling_restart(fleet: Fleet, **shim_env: str) -> None:
    """Each shim in turn: SIGTERM (it drains), a new one on the same ports, back in HAProxy, then the next."""
    for replica in fleet.replicas:
        old = replica.shim
        old._process.send_signal(signal.SIGTERM)
        assert old.wait(60) == 0, old.log_text()[-2000:]
        replica.start_shim(**shim_env).wait_ready(timeout=60)
        time.sleep(1.5)  # `rise 2` at 500 ms: back in HAProxy


def test_a_token_rotation_by_two_rolling_restarts_under_steady_load_loses_no_request(fleet):
    with SteadyLoad(fleet.haproxy.url, clients=2, token=SHIM_TOKEN) as old_callers:
        rolling_restart(fleet, API_TOKEN_NEXT=NEXT_TOKEN)  # both tokens accepted everywhere
        with SteadyLoad(fleet.haproxy.url, clients=1, token=NEXT_TOKEN) as new_callers:
            time.sleep(1)
    with SteadyLoad(fleet.haproxy.url, clients=2, token=NEXT_TOKEN) as switched:
        rolling_restart(fleet, API_TOKEN=NEXT_TOKEN)  # the old token retired
    for load in (old_callers, new_callers, switched):
        assert load.failures == [] and load.statuses, load.failures[:5]
    for replica in fleet.replicas:
        assert "drained: no admitted request left; exiting" in "".join(
            path.read_text() for path in replica.folder.glob("shim-*.log"))
    with httpx.Client(base_url=fleet.haproxy.url, timeout=30) as http:
        assert http.post("/decide", json=decide(), headers=auth(SHIM_TOKEN)).status_code == 401
    for replica in fleet.replicas:  # leave the fleet on the first token for the next test
        replica.shim.stop()
        replica.start_shim().wait_ready(timeout=60)
    time.sleep(1.5)


def test_killing_one_triton_takes_its_replica_out_and_the_other_keeps_answering(fleet):
    killed = fleet.replicas[0]
    with SteadyLoad(fleet.haproxy.url, clients=2) as load:
        time.sleep(1)
        os.killpg(killed.triton.pid, signal.SIGKILL)  # a crash: the server and its model process at once
        time.sleep(2)
        served_while_out = shim_requests(killed.shim)
        settled = len(load.statuses)
        deadline = time.monotonic() + 30
        while len(load.statuses) < settled + 6 and time.monotonic() < deadline:
            time.sleep(0.1)
    assert httpx.get(f"{killed.shim.url}/health", timeout=10).status_code == 503
    after_out = load.statuses[settled:]
    assert after_out and set(after_out) == {200}  # once it is out, nothing fails
    # What was in flight on the killed Triton fails (502, its calls lost), at most one request per client; HAProxy
    # takes the replica out at its first 5xx, so nothing sent after fails (measured: 1 of 34).
    assert len(load.failures) <= 2, load.failures
    assert all(failure.startswith('502 {"error":{"code":"model_unavailable"') for failure in load.failures)
    assert shim_requests(killed.shim) == served_while_out  # no traffic once out
