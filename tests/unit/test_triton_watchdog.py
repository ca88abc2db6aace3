"""The Triton container's watchdog (docker/triton/watchdog.py): tritonserver is ended, with a non-zero status and
nothing left behind, once the model has not answered a ping for a while or a ping hung while no call ended; a busy
model (calls ending behind a long request) is left alone; signals are passed on."""
from __future__ import annotations

import os
import secrets
import signal
import sys
import threading
from pathlib import Path

import pytest

from wire.liveness import BUSY, DOWN, UP, Verdict

from .deploy_files import load_script

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture(scope="module")
def watchdog():
    return load_script("docker/triton/watchdog.py")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_failures_count_only_after_the_model_answered_once_and_for_the_whole_window(watchdog):
    clock = Clock()
    watch = watchdog.Watch(30.0, clock)
    clock.now = 500.0
    assert watch.observe("loading") is False  # the startup is not judged here
    assert watch.observe(None) is False
    assert watch.observe("Stub process is not healthy") is False
    clock.now += 29.9
    assert watch.observe("Stub process is not healthy") is False
    assert watch.observe(None) is False  # an answer starts the window over
    clock.now += 10
    assert watch.observe("Stub process is not healthy") is False
    clock.now += 30
    assert watch.observe("Stub process is not healthy") is True


def verdict(problem: str | None) -> Verdict:
    return Verdict(UP) if problem is None else Verdict(DOWN, problem)


def answers(*problems):
    queue = [verdict(problem) for problem in problems]
    return lambda: queue.pop(0) if len(queue) > 1 else queue[0]


def test_a_model_down_for_the_window_ends_the_server_and_its_group_with_exit_3(watchdog, tmp_path):
    prefix = f"watchdog_test_{secrets.token_hex(4)}_"
    region = Path("/dev/shm") / (prefix + "region")
    region.write_bytes(b"x")
    child_pid = tmp_path / "child.pid"
    # a server with a child of its own, as tritonserver has its stub: the whole group must go
    command = [sys.executable, "-c", f"import subprocess, time, pathlib; p = subprocess.Popen({SLEEPER!r}); "
               f"pathlib.Path({str(child_pid)!r}).write_text(str(p.pid)); time.sleep(60)"]
    logged = []
    code = watchdog.supervise(command, answers(None, "dead", "dead", "dead"), ping_seconds=0.05,
                              down_seconds=0.1, exit_timeout=5, shm_prefix=prefix, log=logged.append)
    assert code == watchdog.EXIT_MODEL_DOWN
    assert not region.exists()
    assert any("has not answered a ping for 0.1 s (dead)" in line for line in logged)
    grandchild = int(child_pid.read_text())
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(grandchild, 0)
            threading.Event().wait(0.1)


def test_a_ping_that_hung_for_its_whole_timeout_while_no_call_ended_ends_the_server_at_once(watchdog):
    # The timeout is one call's time: a ping that waits that long while no call ends is a hung model, and waiting
    # the down window would only add another whole timeout.
    clock = Clock()
    watch = watchdog.Watch(1000.0, clock)
    assert watch.observe("timed out", hung=True) is False  # before the model's first answer, nothing is judged
    assert watch.observe(None) is False
    assert watch.observe("Triton answered 500") is False
    assert watch.observe("timed out", hung=True) is True
    replies = iter([Verdict(UP)])
    hung = Verdict(DOWN, "timed out; no call ended meanwhile", hung=True)
    logged = []
    code = watchdog.supervise(SLEEPER, lambda: next(replies, hung), ping_seconds=0.05, down_seconds=1000,
                              exit_timeout=5, shm_prefix=f"watchdog_test_{secrets.token_hex(4)}_", log=logged.append)
    assert code == watchdog.EXIT_MODEL_DOWN
    assert any("waited its whole timeout and no call ended (timed out; no call ended meanwhile)" in line
               for line in logged)


def test_a_busy_model_is_alive_and_logged_however_long_its_request(watchdog):
    # Pings that time out behind a long request while its calls end: never down, whatever the window.
    replies = iter([Verdict(UP)])
    busy = Verdict(BUSY, "timed out; 1 call(s) ended meanwhile")
    logged = []
    server = [sys.executable, "-c", "import time; time.sleep(1.5)"]  # ends by itself, status 0
    code = watchdog.supervise(server, lambda: next(replies, busy), ping_seconds=0.05, down_seconds=0.1,
                              exit_timeout=5, shm_prefix="watchdog_none_", log=logged.append)
    assert code == 0
    assert any("the model is busy, alive: timed out; 1 call(s) ended meanwhile" in line for line in logged)
    assert not any("stopping tritonserver" in line for line in logged)


def test_a_server_that_exits_by_itself_passes_its_status_on(watchdog):
    code = watchdog.supervise([sys.executable, "-c", "raise SystemExit(7)"], answers("starting"), ping_seconds=0.05,
                              down_seconds=0.1, exit_timeout=5, shm_prefix="watchdog_none_", log=print)
    assert code == 7


def test_sigterm_is_passed_on_and_the_servers_status_returned(watchdog):
    command = [sys.executable, "-c", "import signal, sys, time; "
               "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); time.sleep(60)"]
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    code = watchdog.supervise(command, answers(None), ping_seconds=0.05, down_seconds=10, exit_timeout=5,
                              shm_prefix="watchdog_none_", log=print)
    timer.join()
    assert code == 0
    assert signal.getsignal(signal.SIGTERM) is before  # the previous handler is back


def test_the_command_follows_the_double_dash_and_the_key_file_is_required(watchdog):
    args, command = watchdog.parse(["--key-file", "/k", "--down-seconds", "5", "--", "tritonserver", "--x=1"])
    assert (args.key_file, args.down_seconds, args.ping_timeout) == ("/k", 5.0, 125.0)
    assert args.metrics_url == "http://127.0.0.1:8002/metrics"
    assert command == ["tritonserver", "--x=1"]
    with pytest.raises(SystemExit):
        watchdog.parse(["tritonserver"])
