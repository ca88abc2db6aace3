"""What the shim's metrics and its per-request log line cost: the shim's CPU per one-question /decide, measured on
the shim as `python -m shim` runs it (uvicorn, the process's logging, the metrics server), with an instant fake
model in place of Triton, so that only the shim's own work is counted.

    .venv/bin/python bench/observability_cost.py [--requests 2000] [--rounds 3] [--tree OTHER_CHECKOUT ...]

Each tree (this checkout by default, plus any --tree, e.g. an export of an older commit) is timed as is and with its
access line off: this checkout's own line (its logger raised to WARNING), or uvicorn's access log in a tree from
before the shim wrote its own.
The CPU is the server process's user+system time from /proc over the requests, sent one after another on one
kept-alive connection by the standard library's client.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from http.client import HTTPConnection
from pathlib import Path
from typing import Iterator

HERE = Path(__file__).resolve().parent.parent
TOKEN = "benchmark-token-0123456789-abcdefghijklmnop"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
BODY = json.dumps({"id": "b", "state": "The parcel arrived broken.", "question": "Refund it?",
                   "options": [{"id": "yes", "description": "Refund."}, {"id": "no", "description": "Decline."}]})

# Runs in the server process: the tree's own `python -m shim` entry point, the model replaced by the unit tests'
# instant fake, optionally with the access line off.
SERVER = """
import logging, sys
import shim.__main__ as entry
from tests.unit.fake_model import FakeModel
if hasattr(entry, "build_service"):
    real_build_service = entry.build_service
    entry.build_service = lambda settings, **kwargs: real_build_service(settings, FakeModel(), **kwargs)
else:  # a tree from before the service record
    real_create_app = entry.create_app
    entry.create_app = lambda settings, **kwargs: real_create_app(settings, FakeModel(), **kwargs)
if sys.argv[1] == "no-access-line" and hasattr(entry, "logs"):
    real_config = entry.logs.log_config
    def quiet_config(*args):
        config = real_config(*args)
        config["loggers"]["intern_decision.shim.access"] = {"level": "WARNING"}
        return config
    entry.logs.log_config = quiet_config
elif sys.argv[1] == "no-access-line":  # a tree from before the shim's own line: uvicorn's access log off
    real_run = entry.uvicorn.run
    entry.uvicorn.run = lambda *args, **kwargs: real_run(*args, **{**kwargs, "access_log": False})
sys.exit(entry.main(["--port", sys.argv[2]]))
"""


def free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@contextlib.contextmanager
def shim_serving(tree: Path, variant: str, env: dict,
                 log_path: Path) -> Iterator[tuple[subprocess.Popen, HTTPConnection]]:
    """The fake-model shim of `tree` started as `variant`, and a connection once it answers /health."""
    port = free_port()
    with open(log_path, "wb") as log:
        server = subprocess.Popen([sys.executable, "-c", SERVER, variant, str(port)], env=env, cwd=tree,
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        connection = HTTPConnection("127.0.0.1", port, timeout=10)
        deadline = time.monotonic() + 30
        while True:
            try:
                connection.request("GET", "/health")
                connection.getresponse().read()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, log_path.read_text()[-2000:]
                connection = HTTPConnection("127.0.0.1", port, timeout=10)
                time.sleep(0.1)
        yield server, connection
    finally:
        server.terminate()
        server.wait(10)


def shim_env(tree: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(tree), "INTERN_DECISION_API_TOKEN": TOKEN,
            "INTERN_DECISION_TRITON_API_KEY": "triton-key-" + TOKEN, "INTERN_DECISION_METRICS_PORT": str(free_port())}


def timed_posts(server, connection, headers: dict, requests: int) -> tuple[float, list[float]]:
    """POST /decide 200 times to warm up, then `requests` times: (the shim's CPU ms per request, each one's ms)."""
    for _ in range(200):
        connection.request("POST", "/decide", BODY, headers)
        connection.getresponse().read()
    latencies = []
    before = cpu_seconds(server.pid)
    for _ in range(requests):
        started = time.perf_counter()
        connection.request("POST", "/decide", BODY, headers)
        response = connection.getresponse()
        response.read()
        latencies.append((time.perf_counter() - started) * 1000)
        assert response.status == 200, response.status
    return (cpu_seconds(server.pid) - before) * 1000 / requests, latencies


def bench_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", action="append", type=Path, default=[], help="another checkout to compare")
    return parser.parse_args()


def shim_cpu_ms(tree: Path, variant: str, requests: int, log_path: Path) -> float:
    with shim_serving(tree, variant, shim_env(tree), log_path) as (server, connection):
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        return timed_posts(server, connection, headers, requests)[0]


def main() -> int:
    args = bench_arguments()
    variants = [(f"{tree.name}{suffix}", tree.resolve(), variant) for tree in [HERE, *args.tree]
                for suffix, variant in (("", "as-is"), (", access line off", "no-access-line"))]
    measured: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    log_path = Path(tempfile.gettempdir()) / f"observability-cost-{os.getpid()}.log"
    for _ in range(args.rounds):  # interleaved, so that drift on a shared machine hits every variant alike
        for name, tree, variant in variants:
            measured[name].append(shim_cpu_ms(tree, variant, args.requests, log_path))
    for name, values in measured.items():
        print(f"{name}: shim CPU per request median {statistics.median(values):.3f} ms "
              f"(rounds: {', '.join(f'{value:.3f}' for value in values)})")
    log_path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
