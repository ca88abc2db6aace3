"""Throughput through HAProxy for 1 and 2 replicas on this machine's CPU: each replica its own tritonserver and shim
(the fixture checkpoint), HAProxy rendered from the production template in front, bench/load.py's checked load
(every 200 equal to the request's reference answer) for a fixed time.

    .venv/bin/python bench/replicas.py [--replicas 1 2] [--seconds 20] [--clients 8]

It prints one JSON object, {replicas: {n: load report}}; docs/benchmarks.md has a run's figures. Each replica's
torch gets --threads threads (default 1: a core stands for a replica's GPU); the replicas still share the machine
with whatever else runs there.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TOKEN = "replicas-token-0123456789-abcdefghijklmnop"


def run(replicas: int, seconds: float, clients: int, folder: Path, threads_per_replica: int = 1) -> dict:
    from bench.load import run_load
    from devstack.fixture import build_fixture
    from devstack.haproxy import HAProxyServer
    from devstack.shim import ShimServer
    from devstack.triton import TritonServer

    env = build_fixture().env()
    # One core's worth of torch threads per replica, as each GPU replica has a card of its own; more threads than
    # free cores make torch's OpenMP threads spin against each other (measured on a shared 2-core machine: 1
    # replica at 2 threads 0.3 to 12 answers/s from run to run, at 1 thread 18.6; docs/benchmarks.md).
    threads = str(threads_per_replica)
    env.update({"INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32", "OMP_NUM_THREADS": threads,
                "MKL_NUM_THREADS": threads})
    started = []
    try:
        tritons = [TritonServer(env, folder / f"tritonserver-{n}.log").start() for n in range(replicas)]
        started += tritons
        shims = []
        for n, triton in enumerate(tritons):
            triton.wait_ready(300)
            shim = ShimServer(triton, {"INTERN_DECISION_API_TOKEN": TOKEN}, folder / f"shim-{n}.log").start()
            started.append(shim)
            shims.append(shim.wait_ready(60))
        # Every client here is 127.0.0.1: its POSTs in flight are all the clients', not one caller's share.
        haproxy = HAProxyServer([(f"r{n}", f"127.0.0.1:{shim.port}") for n, shim in enumerate(shims)],
                                folder / "haproxy", check_inter="500ms", per_source_posts=max(clients, 1)).start()
        started.append(haproxy)
        haproxy.wait_ready(30)
        time.sleep(1.5)  # every replica past `rise 2`
        return run_load(haproxy.url, TOKEN, clients, seconds)
    finally:
        for server in reversed(started):
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/replicas.py")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per replica (OMP_NUM_THREADS)")
    args = parser.parse_args()
    folder = REPO_ROOT / ".cache" / "replicas"
    report = {"cpus": os.cpu_count(), "clients": args.clients, "threads_per_replica": args.threads,
              "replicas": {n: run(n, args.seconds, args.clients, folder / str(n), args.threads)
                           for n in args.replicas}}
    print(json.dumps(report, indent=2))
    return 0 if all(r["errors"] == 0 and r["mismatches"] == 0 for r in report["replicas"].values()) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    sys.exit(main())
