"""A server process with its log in a file, ready once a URL answers 200."""
from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """count distinct ports free now: each socket stays bound until all are chosen, so none is handed out twice."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen there now (SO_REUSEADDR, as servers set it: a closing connection is no use)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def rotate_log(path: Path) -> None:
    """Keep the previous run's log as <name>.1 (one generation)."""
    if path.exists():
        path.replace(path.with_name(path.name + ".1"))


KILL_WAIT_SECONDS = 5  # after SIGKILL a process is gone at once, unless the kernel holds it


class ServerExited(RuntimeError):
    """The server stopped before it became ready."""


class ManagedProcess:
    def __init__(self, name: str, command: list[str], env: dict[str, str], log_path: Path, ready_url: str,
                 cwd: Path | None = None):
        self.name = name
        self._cwd = cwd
        self.log_path = log_path
        self._command = command
        self._env = env
        self._ready_url = ready_url
        self._process: subprocess.Popen | None = None

    def start(self):
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        rotate_log(self.log_path)
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(self._command, env=self._env, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True, cwd=self._cwd)
        return self

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait(self, timeout: float) -> int:
        assert self._process is not None
        return self._process.wait(timeout)

    def wait_ready(self, timeout: float = 180.0):
        assert self._process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                raise ServerExited(f"{self.name} exited with {code} before it was ready; log: {self.log_path}")
            try:
                with urllib.request.urlopen(self._ready_url, timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"{self.name} not ready after {timeout:.0f} s; log: {self.log_path}")

    @contextlib.contextmanager
    def serving(self, timeout: float = 180.0):
        """Start, wait until ready, yield the server, and stop it whatever happens."""
        self.start()
        try:
            self.wait_ready(timeout)
            yield self
        finally:
            self.stop()

    def stop(self, timeout: float = 30.0) -> int | None:
        if self._process is None or self._process.poll() is not None:
            return None if self._process is None else self._process.returncode
        self._process.terminate()
        try:
            return self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            return self._process.wait(KILL_WAIT_SECONDS)
