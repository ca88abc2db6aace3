"""The overall deadline, per-step budgets, and subprocesses that cannot outlive either."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


class DeadlineReached(Exception):
    """The overall deadline passed: stop, tear down, write the report."""


class StepTimeout(TimeoutError):
    """A step's subprocess ran past its budget and was killed."""


class Deadline:
    """Seconds left before the hard stop, less a reserve for tearing down and writing the report."""

    def __init__(self, seconds: float, reserve: float):
        self.seconds = seconds
        self.reserve = reserve
        self._start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def remaining(self) -> float:
        return self.seconds - self.reserve - self.elapsed()

    def budget(self, limit: float) -> float:
        """A step's budget: its own limit, cut to what the deadline leaves."""
        left = self.remaining()
        if left <= 1:
            raise DeadlineReached(f"the overall deadline of {self.seconds:.0f} s is reached")
        return min(limit, left)

    def arm(self) -> None:
        """The hard stop: SIGALRM raises DeadlineReached wherever the check is, when only the reserve is left; so
        does SIGTERM, so that a check stopped from outside still tears down and writes its report."""

        def fire(signum, frame):
            raise DeadlineReached(f"the overall deadline of {self.seconds:.0f} s is reached")

        def terminated(signum, frame):
            raise DeadlineReached("the check was terminated (SIGTERM)")

        _previous.update({signal.SIGALRM: signal.signal(signal.SIGALRM, fire),
                          signal.SIGTERM: signal.signal(signal.SIGTERM, terminated)})
        signal.setitimer(signal.ITIMER_REAL, max(1.0, self.seconds - self.reserve - self.elapsed()))

    @staticmethod
    def disarm() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in _previous.items():
            signal.signal(signum, handler)
        _previous.clear()


_previous: dict = {}


_live: set = set()


def run_logged(command: list, log_path: Path, timeout: float, env: dict | None = None,
               cwd: Path | None = None) -> str:
    """Run a command in its own process group, stderr appended to log_path; return its stdout.

    Past the timeout (or on any exception, the deadline included) the whole group is killed. A non-zero exit raises
    RuntimeError with the log's last lines.
    """
    return finish_logged(start_logged(command, log_path, env, cwd), timeout)


def start_logged(command: list, log_path: Path, env: dict | None = None, cwd: Path | None = None,
                 stdout_to_log: bool = False, stdin: int | None = None) -> subprocess.Popen:
    """Start a command in its own process group, stderr (and stdout with stdout_to_log) appended to log_path; the
    teardown kills it if it is still running. finish_logged() waits for it; stdin=subprocess.PIPE talks to it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(str(part) for part in command)}\n".encode())
        log.flush()
        process = subprocess.Popen([str(part) for part in command], stdout=log if stdout_to_log else subprocess.PIPE,
                                   stderr=log, env=env, cwd=cwd, start_new_session=True, stdin=stdin)
    process.log_path = log_path
    _live.add(process)
    return process


def finish_logged(process: subprocess.Popen, timeout: float) -> str:
    """Wait for a started command: its stdout, or StepTimeout (the group killed) past timeout, or RuntimeError with
    the log's last lines on a non-zero exit."""
    try:
        stdout, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(process)
        raise StepTimeout(f"{Path(str(process.args[0])).name} ran past its {timeout:.0f} s budget and was killed "
                          f"(log: {process.log_path.name})") from None
    except BaseException:
        kill_group(process)
        raise
    finally:
        _live.discard(process)
    if process.returncode != 0:
        raise RuntimeError(f"exited with {process.returncode}: {tail(process.log_path)}")
    return (stdout or b"").decode(errors="replace")


def kill_group(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def kill_all() -> None:
    """Every subprocess still running from run_logged (used when the deadline fires)."""
    for process in list(_live):
        kill_group(process)
        _live.discard(process)


def tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())
