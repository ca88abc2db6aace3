"""One caller through HAProxy over N replicas, each replica the real shim server over a model that takes a fixed time
per call (it stands in for the card): answers per second with 1 replica and with N, the balancer at its production
bounds (rendered from the template, the per-source bounds scaled with the replicas) and the shims at their defaults.

    .venv/bin/python bench/fleet.py [--replicas 1 4] [--seconds 10] [--call-ms 25]

The caller is one address with MAX_QUEUE × replicas requests in flight, each sent again as soon as it is answered
(a 429 counts as refused and is sent again after its Retry-After). It prints one JSON object,
{replicas: {n: {answers_per_second, refused, errors}}}; docs/benchmarks.md has a run's figures.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
TOKEN = "fleet-bench-token-0123456789-abcdefghij"
BODY = json.dumps({"id": "d", "state": {"order": "shipped"}, "question": "Approve the refund?",
                   "options": [{"id": "approve", "description": "Approve it."},
                               {"id": "reject", "description": "Reject it."}]}).encode()
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


@contextlib.contextmanager
def fleet(replicas: int, call_seconds: float, folder: Path) -> Iterator[str]:
    """HAProxy at its production bounds over `replicas` shims; its URL."""
    sys.path.insert(0, str(REPO_ROOT))
    from devstack.haproxy import HAProxyServer
    from devstack.process import free_ports
    from tests.unit import fake_shim

    ports = free_ports(replicas)
    env = {"INTERN_DECISION_API_TOKEN": TOKEN, "INTERN_DECISION_TRITON_API_KEY": "k" * 32,
           "INTERN_DECISION_PROBE_SECONDS": "3600", "INTERN_DECISION_METRICS_PORT": "0",
           "INTERN_DECISION_BALANCER_ADDRESSES": "127.0.0.1/32", "FAKE_CALL_SECONDS": str(call_seconds)}
    shims = {}
    haproxy = None
    try:
        for port in ports:  # all started before any is waited for: they start side by side
            shims[port] = fake_shim.spawn(port, env, folder / f"shim-{port}.log")
        for port, shim in shims.items():
            fake_shim.wait_serving(shim, port, folder / f"shim-{port}.log")
        haproxy = HAProxyServer([(f"r{n}", f"127.0.0.1:{port}") for n, port in enumerate(ports)],
                                folder / "haproxy", check_inter="500ms").start()
        haproxy.wait_ready(30)
        time.sleep(1.5)  # every replica past `rise 2`
        yield haproxy.url
    finally:
        if haproxy is not None:
            haproxy.stop()
        for shim in shims.values():
            fake_shim.stop(shim)


def one_caller(url: str, in_flight: int, seconds: float) -> dict:
    """`in_flight` requests from one address at once for `seconds`, each sent again once answered."""
    answered, refused, errors = 0, 0, []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def loop(client: httpx.Client) -> None:
        nonlocal answered, refused
        while time.monotonic() < stop:
            try:
                answer = client.post("/decide", content=BODY, headers=HEADERS)
            except httpx.HTTPError as exc:
                with lock:
                    errors.append(repr(exc))
                continue
            with lock:
                if answer.status_code == 200:
                    answered += 1
                elif answer.status_code == 429:
                    refused += 1
                else:
                    errors.append(f"{answer.status_code} {answer.text[:200]}")
            if answer.status_code == 429:
                time.sleep(float(answer.headers.get("Retry-After", "1")))

    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    with httpx.Client(base_url=url, timeout=60, limits=limits) as client:
        began = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(in_flight) as pool:
            list(pool.map(lambda _: loop(client), range(in_flight)))
        elapsed = time.monotonic() - began
    return {"answers_per_second": round(answered / elapsed, 1), "answered": answered, "refused": refused,
            "errors": errors[:5], "in_flight": in_flight}


def run(replicas: int, seconds: float, call_seconds: float, max_queue: int = 32) -> dict:
    with tempfile.TemporaryDirectory(prefix="fleet-") as folder, fleet(replicas, call_seconds, Path(folder)) as url:
        return one_caller(url, max_queue * replicas, seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--call-ms", type=float, default=25.0)
    args = parser.parse_args(argv)
    report = {"call_ms": args.call_ms, "replicas": {}}
    for replicas in args.replicas:
        report["replicas"][replicas] = run(replicas, args.seconds, args.call_ms / 1000)
    if len(args.replicas) > 1:
        first, last = (report["replicas"][n]["answers_per_second"] for n in (args.replicas[0], args.replicas[-1]))
        report["speedup"] = round(last / first, 2) if first else None
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
