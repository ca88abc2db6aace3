"""What tracing costs the shim: `python -m shim` with an instant fake model (bench/observability_cost.py's server),
tracing off (no INTERN_DECISION_OTLP_ENDPOINT) and on (spans exported in batches to a real OTLP/HTTP receiver in
this process, tests/otlp_receiver.py), and any --tree as is (e.g. an export of the commit before tracing).

    .venv/bin/python bench/tracing_cost.py [--requests 2000] [--rounds 3] [--tree OTHER_CHECKOUT ...]

Per variant: the shim process's CPU per one-question /decide (user+system from /proc, the exporter's thread
included) and the client's latency p50 / p99, requests sent one after another on one kept-alive connection.
Rounds are interleaved, each led by another variant, so that drift on a shared machine hits every variant alike.
The fake model stands in for Triton, so the traceparent header's few bytes on the hop to Triton are not counted.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

from observability_cost import HERE, TOKEN, bench_arguments, shim_env, shim_serving, timed_posts

from acceptance.stats import percentile
from tests.otlp_receiver import OtlpReceiver


def measure(tree: Path, endpoint: str | None, requests: int, log_path: Path) -> tuple[float, list[float]]:
    """(shim CPU ms per request, each request's latency in ms)."""
    env = {**shim_env(tree), "INTERN_DECISION_DRAIN_SECONDS": "0.1"}
    env.pop("INTERN_DECISION_OTLP_ENDPOINT", None)
    if endpoint is not None:
        env["INTERN_DECISION_OTLP_ENDPOINT"] = endpoint
    with shim_serving(tree, "as-is", env, log_path) as (server, connection):
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
                   "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
        return timed_posts(server, connection, headers, requests)


def main() -> int:
    args = bench_arguments()
    log_path = Path(tempfile.gettempdir()) / f"tracing-cost-{os.getpid()}.log"
    with OtlpReceiver() as receiver:
        variants = [("tracing off", HERE, None), ("tracing on", HERE, receiver.endpoint),
                    *[(f"{tree.name} as is", tree.resolve(), None) for tree in args.tree]]
        cpu: dict[str, list[float]] = {name: [] for name, _, _ in variants}
        latency: dict[str, list[float]] = {name: [] for name, _, _ in variants}
        for round_number in range(args.rounds):
            turn = round_number % len(variants)  # each variant first in turn: no one always follows the same one
            for name, tree, endpoint in variants[turn:] + variants[:turn]:
                cpu_ms, latencies = measure(tree, endpoint, args.requests, log_path)
                cpu[name].append(cpu_ms)
                latency[name] += latencies
        spans = len(receiver.spans())
    for name in cpu:
        print(f"{name}: shim CPU per request median {statistics.median(cpu[name]):.3f} ms "
              f"(rounds: {', '.join(f'{value:.3f}' for value in cpu[name])}); latency p50 "
              f"{percentile(latency[name], 50):.3f} ms, p99 {percentile(latency[name], 99):.3f} ms")
    print(f"spans received while tracing was on: {spans}")
    log_path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
