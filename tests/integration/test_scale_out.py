"""Two replicas on this machine, each its own CPU tritonserver and shim, behind a real HAProxy rendered from the
production template (docker/haproxy/haproxy.cfg.template): the scale-out design through the real parts.

Load spreads; one request's calls stay on one replica; 429 only when every replica is full (401 first); a replica
whose model refuses its pin never gets traffic; a flood of unauthenticated half-open POSTs as large as the
balancer's maxconn leaves /health and a caller answered within a second; a 503 out_of_memory or a 500
scoring_failed takes no replica out; a client that leaves while its request waits for a replica's lock is never
scored; a token rotation by two rolling restarts of every shim under a steady load loses no request; killing one
Triton takes its replica out, once its /health says so, while the other answers.
"""
from __future__ import annotations

import os
import signal
import socket
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

from .helpers import SHIM_TOKEN, calls, decide, model_env, read_metrics, read_until_closed, slow

pytestmark = pytest.mark.triton
NEXT_TOKEN = "scale-out-next-token-0123456789-abcdefgh"
MAX_QUEUE = 2
CHECK_INTER = "500ms"  # fall 3, fastinter 250 ms: a replica is out about a second after its /health turns 503
DRAIN_SECONDS = 2.5  # above what HAProxy needs to notice
FLOOD = 20  # half-open requests, as many as the flooded balancer's maxconn
# Every caller here is 127.0.0.1: the fleet's balancers get a request rate and a share of POSTs in flight per source
# no test reaches (the per-source bounds themselves are tests/unit/test_balancer_bounds.py's).
UNBOUNDED_RATE = 1_000_000
UNBOUNDED_POSTS = 1_000_000


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
               "INTERN_DECISION_MAX_QUEUE_PER_PEER": "0",
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
                                folder / "haproxy", check_inter=CHECK_INTER,
                                per_source_requests=UNBOUNDED_RATE, per_source_posts=UNBOUNDED_POSTS).start()
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
        self.failed_at: list[float] = []  # time.monotonic() of each failure
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
                        self.failed_at.append(time.monotonic())
                except httpx.HTTPError as exc:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                    self.failed_at.append(time.monotonic())
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
    return shim_counter(shim, "intern_decision_shim_requests_total{", 'route="/decide')


def shim_counter(shim: ShimServer, prefix: str, label: str = "") -> float:
    text = httpx.get(shim.metrics_url, timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(prefix) and label in line)


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


def half_open_post(port: int) -> socket.socket:
    """A POST with a wrong token that declares a body of 1,000,000 bytes (under MAX_BODY_BYTES, 1 MiB) and sends
    none of it. (Without an Authorization header HAProxy answers it 401 at once.)"""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /decide HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Authorization: Bearer not-the-token\r\nContent-Length: 1000000\r\n\r\n")
    return sock


def timed_request(url: str, method: str, path: str, results: dict, name: str, **kwargs) -> None:
    started = time.monotonic()
    try:
        with httpx.Client(base_url=url, timeout=10) as http:
            outcome: int | str = http.request(method, path, **kwargs).status_code
    except httpx.HTTPError as exc:
        outcome = type(exc).__name__
    results[name] = (outcome, time.monotonic() - started)


def test_a_flood_of_unauthenticated_half_open_posts_leaves_health_and_a_caller_answered_within_a_second(
        fleet, tmp_path):
    # A balancer of its own, from the same template, whose maxconn the flood fills.
    haproxy = HAProxyServer([(replica.name, f"127.0.0.1:{replica.shim.port}") for replica in fleet.replicas],
                            tmp_path / "haproxy", check_inter=CHECK_INTER, maxconn=FLOOD,
                            per_source_requests=UNBOUNDED_RATE, per_source_posts=UNBOUNDED_POSTS).start()
    flood: list[socket.socket] = []
    try:
        haproxy.wait_ready(timeout=30)
        time.sleep(1.5)  # both replicas past `rise 2`
        before = sum(shim_requests(replica.shim) for replica in fleet.replicas)
        baseline: dict = {}
        timed_request(haproxy.url, "POST", "/decide", baseline, "decide", json=decide(), headers=auth())
        assert baseline["decide"][0] == 200
        flood = [half_open_post(haproxy.port) for _ in range(FLOOD)]
        time.sleep(0.3)  # every connection HAProxy takes is now held by the flood
        results: dict = {}
        askers = [threading.Thread(target=timed_request, args=(haproxy.url, "GET", "/health", results, "health")),
                  threading.Thread(target=timed_request, args=(haproxy.url, "POST", "/decide", results, "decide"),
                                   kwargs={"json": decide(), "headers": auth()})]
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join()
        # Before: `timeout client` was the longest request (7,740 s) and both waited out their own 10 s timeout.
        assert results["health"][0] == 200 and results["health"][1] < 1.0, results
        assert results["decide"][0] == 200 and results["decide"][1] < baseline["decide"][1] + 1.0, (results, baseline)
        # Each half-open POST was answered 408 by HAProxy once the body wait was over, and closed; no shim saw one.
        answers = []
        for sock in flood:
            sock.settimeout(5)
            answers.append(read_until_closed(sock))
        assert all(answer.startswith(b"HTTP/1.1 408") and b'"code":"request_timeout"' in answer
                   for answer in answers), answers[:2]
        assert sum(shim_requests(replica.shim) for replica in fleet.replicas) == before + 2  # the two decides
    finally:
        for sock in flood:
            sock.close()
        haproxy.stop()


def test_an_out_of_memory_or_a_scoring_failure_takes_no_replica_out(fleet):
    with httpx.Client(base_url=fleet.haproxy.url, timeout=60) as http:
        # One of each, back to back: with a replica taken out by its answer, the second would take out the other.
        oom = http.post("/decide", json=decide(state={"__fixture_fault__": "oom"}), headers=auth())
        failed = http.post("/decide", json=decide(state={"__fixture_fault__": "runtime"}), headers=auth())
        time.sleep(0.1)  # the shim counts a request once it has answered
        before = [shim_requests(replica.shim) for replica in fleet.replicas]
        statuses = [http.post("/decide", json=decide(id=f"after-{n}"), headers=auth()).status_code for n in range(6)]
        time.sleep(0.1)
        after = [shim_requests(replica.shim) for replica in fleet.replicas]
    assert oom.status_code == 503 and oom.json()["error"]["code"] == "out_of_memory"
    assert failed.status_code == 500 and failed.json()["error"]["code"] == "scoring_failed"
    assert statuses == [200] * 6  # never HAProxy's "503 No server is available"
    assert all(later > earlier for earlier, later in zip(before, after)), (before, after)  # both still in rotation


def test_a_client_that_leaves_while_queued_behind_the_balancer_is_never_scored(fleet):
    gone_before = sum(shim_counter(replica.shim, "intern_decision_shim_client_gone_total")
                      for replica in fleet.replicas)

    def hold(name: str) -> None:  # one per replica: least connections puts the second on the other
        with httpx.Client(base_url=fleet.haproxy.url, timeout=60) as http:
            answer = http.post("/decide", json=slow(2.0), headers={**auth(), "X-Request-Id": name})
            assert answer.status_code == 200

    holders = [threading.Thread(target=hold, args=(f"held-{n}",)) for n in range(len(fleet.replicas))]
    for holder in holders:
        holder.start()
        time.sleep(0.2)
    time.sleep(0.3)  # both scoring: whichever replica gets the next request queues it behind its lock
    with httpx.Client(base_url=fleet.haproxy.url, timeout=0.5) as http:
        with pytest.raises(httpx.ReadTimeout):
            http.post("/decide", json=decide(), headers={**auth(), "X-Request-Id": "left-while-queued"})
    for holder in holders:
        holder.join()
    time.sleep(0.5)  # the model writes its call lines off the response path
    logs = "".join(replica.triton.log_text() for replica in fleet.replicas)
    assert all(f'\\"request_id\\": \\"held-{n}.0\\"' in logs for n in range(len(holders)))  # the log is read
    assert "left-while-queued" not in logs  # never reached a model
    gone = sum(shim_counter(replica.shim, "intern_decision_shim_client_gone_total") for replica in fleet.replicas)
    assert gone == gone_before + 1


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
        killed_at = time.monotonic()
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
    # What was in flight on the killed Triton fails (502, its calls lost), and so does what reaches the replica until
    # its /health has failed three times: its first 502 brings the next check forward (on-error fastinter), the
    # others come FASTINTER apart. An answer alone never takes a replica out.
    assert all(failure.startswith('502 {"error":{"code":"model_unavailable"') for failure in load.failures)
    assert all(at - killed_at < 2.0 for at in load.failed_at), [at - killed_at for at in load.failed_at]
    assert shim_requests(killed.shim) == served_while_out  # no traffic once out
