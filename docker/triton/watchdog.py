"""Run tritonserver and end it, with a non-zero status, when the model stays unreachable: the heal by restart.

    python watchdog.py [options] -- tritonserver [arguments ...]

Triton's python backend does not restart a dead stub process, and Triton 25.01's readiness does not see one die
(docs/operations.md, "When the model process dies"); an in-place reload leaves the dead stub's shared memory behind.
So the process that holds the GPU is restarted by what runs it: this watchdog is the Triton container's main
process. Once the model has answered a ping through it (wire/ping.py) it pings every --ping-seconds, each ping
allowed --ping-timeout seconds, one call's time (start_triton.py passes INTERN_DECISION_PING_TIMEOUT_SECONDS;
docker/multi_gpu.py, ping_timeout_seconds: 120 + 5 s at the defaults), and judges it as the Kubernetes liveness probe
does (wire/liveness.py): a ping waits behind the inference in progress, so one that times out while the model's
count of ended calls (Triton's metrics, --metrics-url) moved is "busy", alive, and logged. A ping that waited its
whole timeout while no call ended means a hung model: tritonserver is stopped at once. When no ping has been
answered for --down-seconds (error answers: a dead stub), it is stopped too: SIGTERM, then SIGKILL to its process
group after the exit timeout; the python backend's shared-memory regions of --shm-prefix are removed and the
watchdog exits EXIT_MODEL_DOWN, so the container's restart policy starts a new one. Compose does not restart an
unhealthy container; it does restart one that exits with a failure.

SIGTERM and SIGINT are passed on to tritonserver, and the watchdog exits with its status. Pings before the model's
first answer do not count: the startup (minutes on a GPU) is --exit-on-error's to judge.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

EXIT_MODEL_DOWN = 3
SHARED_MEMORY = Path("/dev/shm")


class Watch:
    """Pure logic: fed each ping's outcome, says when the model has been unreachable for too long."""

    def __init__(self, down_seconds: float, clock: Callable[[], float] = time.monotonic):
        self._down_seconds = down_seconds
        self._clock = clock
        self.answered_once = False
        self.down_since: float | None = None

    def observe(self, problem: str | None, hung: bool = False) -> bool:
        """True when the model has not answered for down_seconds (after having answered once), or at once when a
        ping hung for its whole timeout while no call ended: one call's time with nothing done is a hung model, and
        waiting down_seconds more would only add another whole timeout."""
        if problem is None:
            self.answered_once, self.down_since = True, None
            return False
        if not self.answered_once:
            return False
        if self.down_since is None:
            self.down_since = self._clock()
        return hung or self._clock() - self.down_since >= self._down_seconds


def remove_regions(prefix: str, shared_memory: Path = SHARED_MEMORY) -> list[Path]:
    regions = sorted(shared_memory.glob(prefix + "*"))
    for region in regions:
        region.unlink(missing_ok=True)
    return regions


def stop(process: subprocess.Popen, exit_timeout: float) -> int:
    """SIGTERM, then SIGKILL to the whole process group (a stub orphaned mid-request hangs on to the sockets)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(exit_timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return process.wait()


def supervise(command: list[str], check: Callable[[], Any], *, ping_seconds: float, down_seconds: float,
              exit_timeout: float, shm_prefix: str, log: Callable[[str], None]) -> int:
    """check: one ping's verdict (wire.liveness.Verdict: state, detail, alive, hung)."""
    process = subprocess.Popen(command, start_new_session=True)
    stopping = False

    def pass_on(signum, frame):
        nonlocal stopping
        stopping = True
        if process.poll() is None:
            process.send_signal(signum)

    previous = {signum: signal.signal(signum, pass_on) for signum in (signal.SIGTERM, signal.SIGINT)}
    watch = Watch(down_seconds)
    try:
        while process.poll() is None and not stopping:
            verdict = check()
            if stopping or process.poll() is not None:
                break
            problem = None if verdict.alive else verdict.detail
            first_answer = problem is None and not watch.answered_once
            if watch.observe(problem, verdict.hung):
                why = ("a ping through the model waited its whole timeout and no call ended" if verdict.hung
                       else f"the model has not answered a ping for {down_seconds:g} s")
                log(f"{why} ({problem}); stopping tritonserver so that it is restarted")
                stop(process, exit_timeout)
                for region in remove_regions(shm_prefix):
                    log(f"removed a shared-memory region: {region}")
                return EXIT_MODEL_DOWN
            if first_answer:
                log(f"the model answered a ping; watching it every {ping_seconds:g} s")
            if problem is None and verdict.detail:
                log(f"the model is busy, alive: {verdict.detail}")
            if problem is not None and watch.answered_once:
                log(f"a ping through the model failed: {problem}")
            deadline = time.monotonic() + ping_seconds
            while time.monotonic() < deadline and process.poll() is None and not stopping:
                time.sleep(min(0.2, ping_seconds))
        code = process.wait()
    finally:
        if process.poll() is None:
            stop(process, exit_timeout)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    remove_regions(shm_prefix)
    return code if code >= 0 else 128 - code


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise SystemExit("usage: watchdog.py [options] -- tritonserver [arguments ...]")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="watchdog.py")
    parser.add_argument("--url", default="127.0.0.1:8000", help="Triton's HTTP address")
    parser.add_argument("--model", default="intern_decision")
    parser.add_argument("--key-file", required=True, help="Triton's API key (the ping is an inference)")
    parser.add_argument("--ping-seconds", type=float, default=10.0)
    parser.add_argument("--metrics-url", default="http://127.0.0.1:8002/metrics",
                        help="Triton's metrics endpoint: the model's count of ended calls")
    parser.add_argument("--ping-timeout", type=float, default=125.0, help="one call's time and a margin")
    parser.add_argument("--down-seconds", type=float, default=30.0)
    parser.add_argument("--exit-timeout", type=float, default=15.0)
    parser.add_argument("--shm-prefix", default="intern_decision_")
    return parser.parse_args(argv[:split]), argv[split + 1:]


def main(argv: list[str]) -> int:
    from wire.liveness import liveness  # the Triton image's venv holds wire, as does the dev environment

    args, command = parse(argv)
    key = Path(args.key_file).read_text(encoding="ascii").removesuffix("\n").removesuffix("\r")

    def log(message: str) -> None:
        print(f"watchdog: {message}", file=sys.stderr, flush=True)

    return supervise(command, lambda: liveness(args.url, args.metrics_url, args.model, key, args.ping_timeout),
                     ping_seconds=args.ping_seconds, down_seconds=args.down_seconds,
                     exit_timeout=args.exit_timeout, shm_prefix=args.shm_prefix, log=log)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
