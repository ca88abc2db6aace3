"""The stack against predict() in process: the full stack (shim and tritonserver) and bench/inprocess_app.py (the
same engine and checkpoint in process behind a minimal Starlette app), started side by side in one run, one torch
thread each, the fixture checkpoint in float32 on the CPU.

Each round sends every shape to both, the same stdlib client on a kept-alive connection, which goes first
alternating, so that the machine's drift falls on both alike; the figures are whole request times (the model's
forward pass included: it is the same work on both sides). Then the overload: 16 clients of bench/load.py against
each in turn (stack, in process, stack, in process), answers/s, p99 and the statuses; and the shim's CPU time per
one-question request over a burst (from /proc).

    PYTHONPATH=. .venv/bin/python bench/inprocess.py [--rounds 100] [--load-seconds 20] [--write-doc]

Results go to bench/results/inprocess.json; --write-doc renders docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from http.client import HTTPConnection

from load import run_load
from overhead import (
    ANCHOR_QUESTIONS,
    ANCHOR_STATE,
    BENCH,
    STATE,
    SYSTEMONE_MODEL,
    TOKEN,
    as_systemone,
    cpu_seconds,
    criteria,
    machine,
    post,
    route_of,
)

from acceptance.stats import percentile
from devstack.fixture import build_fixture
from devstack.process import ManagedProcess, free_port
from devstack.shim import ShimServer
from devstack.triton import REPO_ROOT, TritonServer

SIDES = ("stack", "in process")
CLIENTS = 16


def shapes() -> dict[str, dict]:
    forty = {f"c{n}": {"type": "choice", "instructions": f"Does criterion {n} hold for this state?",
                       "criteria": {"yes": "It holds.", "no": "It does not."}} for n in range(40)}
    return {
        "one question (/decide/shared)": {"state": STATE, "decisions": criteria(1)},
        "one choice (/v1/systemone)": as_systemone({"state": STATE, "decisions": criteria(1)}),
        "3 mixed questions (/v1/systemone)": {"model": SYSTEMONE_MODEL, "state": ANCHOR_STATE,
                                              "questions": ANCHOR_QUESTIONS},
        "40 questions, chunked (/v1/systemone)": {"model": SYSTEMONE_MODEL, "state": STATE, "questions": forty},
        "orderings all, 4 options (/decide/shared)": {"state": STATE,
                                                      "decisions": criteria(1, options=4, orderings="all")},
    }


class InProcessApp(ManagedProcess):
    def __init__(self, env: dict[str, str], log_path):
        self.port = free_port()
        super().__init__("in-process", [sys.executable, str(BENCH / "inprocess_app.py"), str(self.port)],
                         {**os.environ, **env, "PYTHONPATH": str(REPO_ROOT)}, log_path,
                         f"http://127.0.0.1:{self.port}/health")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def figures(values: list[float]) -> dict:
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99)}


def overload(urls: dict[str, str], seconds: float, shim_pid: int) -> dict:
    """Each side under 16 clients twice, in turn; the two turns of a side pooled by adding their counts."""
    turns = {side: [] for side in SIDES}
    for turn in range(2):
        for side in SIDES if turn == 0 else SIDES[::-1]:
            turns[side].append(run_load(urls[side], TOKEN, CLIENTS, seconds, shim_pid if side == "stack" else None))
    return {side: {"answers_per_second": [run["ok_per_second"] for run in runs],
                   "p50_ms": [run["ok_ms"]["p50"] for run in runs], "p99_ms": [run["ok_ms"]["p99"] for run in runs],
                   "ok": sum(run["ok"] for run in runs), "busy_429": sum(run["busy"] for run in runs),
                   "errors": sum(run["errors"] for run in runs), "mismatches": sum(run["mismatches"] for run in runs),
                   "error_samples": [sample for run in runs for sample in run["error_samples"]][:3]}
            for side, runs in turns.items()}


def measure(rounds: int, load_seconds: float, cpu_requests: int) -> dict:
    env = {**build_fixture().env(), "INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32",
           "OMP_NUM_THREADS": "1"}
    logs = REPO_ROOT / ".cache" / "bench"
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    triton = TritonServer(env, logs / "tritonserver.log").start()
    inprocess = InProcessApp(env, logs / "inprocess.log").start()
    shim = None
    try:
        triton.wait_ready(300)
        shim = ShimServer(triton, {"INTERN_DECISION_API_TOKEN": TOKEN}, logs / "shim.log").start()
        shim.wait_ready(120)
        inprocess.wait_ready(300)
        ports = {"stack": shim.port, "in process": inprocess.port}
        connections = {side: HTTPConnection("127.0.0.1", ports[side], timeout=300) for side in SIDES}
        samples = {name: {side: [] for side in SIDES} for name in shapes()}
        for round_ in range(rounds + 2):  # two warm-up rounds
            for name, body in shapes().items():
                path, payload = route_of(body), json.dumps(body).encode()
                for side in SIDES if round_ % 2 == 0 else SIDES[::-1]:
                    elapsed, _ = post(connections[side], path, payload, headers)
                    if round_ >= 2:
                        samples[name][side].append(elapsed)
        one = json.dumps(shapes()["one question (/decide/shared)"]).encode()
        started = cpu_seconds(shim.pid)
        for _ in range(cpu_requests):
            post(connections["stack"], "/decide/shared", one, headers)
        shim_cpu_ms = (cpu_seconds(shim.pid) - started) * 1000 / cpu_requests
        load = overload({"stack": shim.url, "in process": inprocess.url}, load_seconds, shim.pid)
    finally:
        if shim is not None:
            shim.stop()
        inprocess.stop()
        triton.stop()
    return {
        "commit": subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO_ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "rounds": rounds, "machine": machine(), "cpu_requests": cpu_requests, "load_seconds": load_seconds,
        "clients": CLIENTS,
        "shapes": {name: {side: figures(values) for side, values in sides.items()} for name, sides in samples.items()},
        "shim_cpu_ms_per_request": shim_cpu_ms,
        "overload": load,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--load-seconds", type=float, default=20)
    parser.add_argument("--cpu-requests", type=int, default=300)
    parser.add_argument("--write-doc", action="store_true", help="render docs/benchmarks.md from bench/results/")
    args = parser.parse_args()
    run = measure(args.rounds, args.load_seconds, args.cpu_requests)
    print(json.dumps(run, indent=2))
    from report import save
    save("inprocess", run, args.write_doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
