"""A dead model process, end to end: a tritonserver run by the Triton container's watchdog
(docker/triton/watchdog.py) and a shim of this module's own (the session's are never killed).

The python backend's stub is killed while idle and in the middle of a request, then tritonserver itself is killed
in the middle of a request. Each time the service says so on /health, the watchdog ends tritonserver with a
non-zero status leaving no process and no shared memory behind, and a restart (what the container's restart policy
does; played here) serves again behind the same shim, which never reloads anything itself.
Last, stopping Triton must be quick and leave none of its shared memory behind, a dead stub or not.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from devstack.shim import ShimServer
from devstack.triton import EXIT_TIMEOUT_SECONDS, TritonServer
from wire.ping import ping
from wire.protocol import MODEL_NAME

from .helpers import AUTH, SHIM_TOKEN, children, model_env

pytestmark = pytest.mark.triton
PROBE_SECONDS = 0.5
WATCHDOG = Path(__file__).resolve().parents[2] / "docker" / "triton" / "watchdog.py"
DOWN_SECONDS = 2.0  # the watchdog's window; the image's default is 30 s
# One call's time and a margin, as the image sizes it (125 s there): the tests' calls take well under a second each.
# A ping that times out while the model's calls keep ending is "busy", never down (wire/liveness.py).
PING_TIMEOUT_SECONDS = 5.0
RESTART_SECONDS = 240  # a new tritonserver loads the model: a few seconds here, more on a loaded machine
OPTIONS = [{"id": "yes", "description": "Do it."}, {"id": "no", "description": "Do not."}]
SMALL = {"id": "small", "state": "A short state.", "question": "Proceed?", "options": OPTIONS}
# Twenty calls over a long state: seconds of work for the model, so that a kill lands in the middle of it.
LONG = {"state": "word " * 600,
        "decisions": [{"id": f"d{n}", "question": f"Is step {n} needed?", "options": OPTIONS} for n in range(320)]}


class WatchedTriton(TritonServer):
    """tritonserver on CPU under the watchdog, as the image's start script runs it."""

    def __init__(self, env: dict[str, str], log_path: Path, **options):
        super().__init__(env, log_path, **options)
        key_file = log_path.with_name(log_path.stem + ".key")
        key_file.touch(mode=0o600)
        key_file.write_text(self.api_key)
        self._command = [sys.executable, str(WATCHDOG), "--url", self.http_url, "--key-file", str(key_file),
                         "--metrics-url", self.metrics_url,
                         "--ping-seconds", str(PROBE_SECONDS), "--ping-timeout", str(PING_TIMEOUT_SECONDS),
                         "--down-seconds", str(DOWN_SECONDS),
                         "--exit-timeout", str(EXIT_TIMEOUT_SECONDS + 5), "--shm-prefix", self.shm_prefix,
                         "--", *self._command]

    def wait_watched(self, timeout: float = 60) -> "WatchedTriton":
        """Until the watchdog has had the model's first answer: only then does it count a ping that fails."""
        deadline = time.monotonic() + timeout
        while "watchdog: the model answered a ping" not in self.log_text():
            assert time.monotonic() < deadline, "the watchdog never had an answer from the model"
            time.sleep(0.1)
        return self

    @property
    def server_pid(self) -> int:
        (pid,) = [pid for pid, name in children(self.pid).items() if name == "tritonserver"]
        return pid


class Stack:
    def __init__(self, env: dict[str, str], folder: Path):
        self.env = env
        self.folder = folder
        self.starts = 0
        self.triton = self.new_triton()
        self.shim: ShimServer | None = None
        self.http: httpx.Client | None = None

    def new_triton(self, like: WatchedTriton | None = None) -> WatchedTriton:
        log_path = self.folder / f"tritonserver-{self.starts}.log"
        self.starts += 1
        if like is None:
            return WatchedTriton(self.env, log_path)
        return WatchedTriton(self.env, log_path, ports=like.ports, api_key=like.api_key)


@pytest.fixture(scope="module")
def stack(fixture_pins, tmp_path_factory):
    stack = Stack(model_env(fixture_pins), tmp_path_factory.mktemp("healing"))
    try:
        stack.triton.start().wait_ready(timeout=240)
        stack.triton.wait_watched()
        env = {"INTERN_DECISION_API_TOKEN": SHIM_TOKEN, "INTERN_DECISION_MAX_DECISIONS": "1024",
               "INTERN_DECISION_PROBE_SECONDS": str(PROBE_SECONDS)}
        stack.shim = ShimServer(stack.triton, env, stack.folder / "shim.log").start()
        stack.shim.wait_ready(timeout=60)
        with httpx.Client(base_url=stack.shim.url, timeout=300) as http:
            stack.http = http
            yield stack
    finally:
        if stack.shim is not None:
            stack.shim.stop()
        stack.triton.stop()


def stub_pid(triton: TritonServer) -> int:
    server = triton.server_pid if isinstance(triton, WatchedTriton) else triton.pid
    (pid,) = [pid for pid, name in children(server).items() if name.startswith("triton_python")]
    return pid


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until_busy(pid: int, answer: Future, seconds: float = 0.3, timeout: float = 60) -> None:
    """Until the process has spent `seconds` more CPU time: the model is in the middle of the request."""
    start, deadline = cpu_seconds(pid), time.monotonic() + timeout
    while cpu_seconds(pid) - start < seconds:
        assert not answer.done(), f"answered before the model got busy: {answer.result().text[:500]}"
        assert time.monotonic() < deadline, "the model never started the request"
        time.sleep(0.02)


def health_within(http: httpx.Client, status: int, seconds: float) -> tuple[httpx.Response, float]:
    """The first /health answer with this status, and how long it took to come."""
    started = time.monotonic()
    while True:
        health = http.get("/health")
        waited = time.monotonic() - started
        if health.status_code == status:
            return health, waited
        assert waited < seconds, f"/health still {health.status_code} after {waited:.1f} s: {health.text}"
        time.sleep(0.05)


def long_request_killing(stack: Stack, kill) -> httpx.Response:
    """LONG sent to the shim; kill() runs once the model is in the middle of it; its answer."""
    stub = stub_pid(stack.triton)
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(stack.http.post, "/decide/shared", json=LONG, headers=AUTH)
        wait_until_busy(stub, answer)
        kill(stub)
        return answer.result()


def alive(pid: int, timeout: float = 10) -> bool:
    """Whether pid is still a live process (not gone, not a zombie) after up to timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        except OSError:
            return False
        time.sleep(0.1)
    return True


def assert_ended_leaving_nothing(stack: Stack, expected_status: int, processes: list[int]) -> None:
    """The watchdog exits with expected_status well within its window, and no process or region of it is left."""
    watched = stack.triton
    assert watched.wait(2 * PING_TIMEOUT_SECONDS + DOWN_SECONDS + EXIT_TIMEOUT_SECONDS + 30) == expected_status
    for pid in processes:
        assert not alive(pid), f"process {pid} outlived the watchdog"
    assert watched.shared_memory_regions() == []


def assert_restart_heals(stack: Stack) -> None:
    """A restarted tritonserver loads the model; the same shim answers again, without reloading anything."""
    stack.triton = stack.new_triton(like=stack.triton).start()
    stack.triton.wait_ready(timeout=RESTART_SECONDS)
    stack.triton.wait_watched()
    health_within(stack.http, 200, 30)
    assert stack.http.post("/decide", json=SMALL, headers=AUTH).status_code == 200
    assert "reload" not in stack.shim.log_text()


def test_a_stub_killed_while_idle_turns_health_503_and_the_watchdog_ends_triton_for_a_restart(stack):
    health_within(stack.http, 200, 10)
    server, dead = stack.triton.server_pid, stub_pid(stack.triton)
    os.kill(dead, signal.SIGKILL)
    health, _ = health_within(stack.http, 503, PROBE_SECONDS + 5)
    assert health.json()["error"]["code"] == "model_unavailable"
    assert health.json()["error"]["message"] == "model not answering"  # fixed words; the detail in the log
    assert "Stub process 'intern_decision_0_0' is not healthy." in stack.shim.log_text()
    assert "waiting for tritonserver to be restarted" in stack.shim.log_text()
    assert_ended_leaving_nothing(stack, 3, [server, dead])
    assert "has not answered a ping for 2 s" in stack.triton.log_text()
    assert_restart_heals(stack)


def test_a_stub_killed_mid_request_fails_that_request_health_503_at_once_then_a_restart_heals(stack):
    server, dead = stack.triton.server_pid, None

    def kill_stub(stub: int) -> None:
        nonlocal dead
        dead = stub
        os.kill(stub, signal.SIGKILL)

    answer = long_request_killing(stack, kill_stub)
    assert answer.status_code == 502, answer.text
    assert answer.json()["error"]["code"] == "model_unavailable"
    assert answer.json()["error"]["message"] == "triton answered an error"  # fixed words; the detail in the log
    assert "Stub process 'intern_decision_0_0' is not healthy." in stack.shim.log_text()
    assert stack.http.get("/health").status_code == 503, "/health must turn 503 once an inference met the dead stub"
    refused = stack.http.post("/decide", json=SMALL, headers=AUTH)
    assert refused.status_code == 502 and refused.json()["error"]["code"] == "model_unavailable"
    assert_ended_leaving_nothing(stack, 3, [server, dead])
    assert_restart_heals(stack)


def test_triton_killed_mid_request_fails_that_request_then_a_restarted_triton_serves_again(stack):
    server, orphan = stack.triton.server_pid, stub_pid(stack.triton)
    # Its whole process group, as when the server crashes: a stub orphaned in the middle of a request would hang
    # on to the server's sockets.
    answer = long_request_killing(stack, lambda stub: os.killpg(server, signal.SIGKILL))
    assert answer.status_code == 502 and answer.json()["error"]["code"] == "model_unavailable"
    assert answer.json()["error"]["message"] == "triton unreachable"
    health, _ = health_within(stack.http, 503, 5)
    assert health.json()["error"]["message"] == "triton unreachable"
    assert "Triton did not answer" in stack.shim.log_text()  # the detail is in the log
    assert_ended_leaving_nothing(stack, 128 + signal.SIGKILL, [server, orphan])
    assert_restart_heals(stack)


def test_stopping_triton_is_quick_and_leaves_no_shared_memory_even_with_a_dead_stub(stack, fixture_pins):
    stack.shim.stop()
    healthy = stack.triton
    started = time.monotonic()
    assert healthy.stop() == 0  # SIGTERM to the watchdog reaches tritonserver; its status comes back
    assert time.monotonic() - started < EXIT_TIMEOUT_SECONDS + 3
    assert healthy.shared_memory_regions() == []

    dead = TritonServer(model_env(fixture_pins), stack.folder / "tritonserver-plain.log").start()
    stack.triton = dead
    dead.wait_ready(timeout=240)
    os.kill(stub_pid(dead), signal.SIGKILL)
    assert "is not healthy" in ping(dead.http_url, MODEL_NAME, dead.api_key, timeout=10)
    # Triton's own readiness does not see it: the reason for the ping.
    assert httpx.get(f"http://{dead.http_url}/v2/models/{MODEL_NAME}/ready").status_code == 200
    started = time.monotonic()
    dead.stop()
    assert time.monotonic() - started < EXIT_TIMEOUT_SECONDS + 3  # Triton's default waits 30 s
    assert dead.shared_memory_regions() == []
