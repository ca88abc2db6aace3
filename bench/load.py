"""A bounded load on the service: many clients past MAX_QUEUE for a fixed time, every answer checked.

Each client asks, again and again, a /decide/shared of its own: a state that names it and has a length of its own
(so its prompts have a token count of their own), its own decision ids, 1, 2, 3 or 17 decisions (17 is two calls),
and every fifth client one decision with rotations. Before the load each client's request is asked once alone;
under load every 200 must equal that reference answer exactly (ids, calls and fields, input tokens, prompt hashes,
probabilities; only the timing's seconds may differ): an answer crossed with another request's, or a chunk of
another, would not. A 429 busy is expected past MAX_QUEUE and must carry Retry-After and the envelope; the client
then waits 20-100 ms (not the advertised second, to keep the pressure on) and asks again. Any other status, a
transport error or a request left unanswered is an error. /health is sampled every 50 ms during the load, and the
shim's resident memory read before and after.

    .venv/bin/python bench/load.py [--seconds 60] [--clients 64]     # starts the CPU stack (fixture checkpoint)
    .venv/bin/python bench/load.py --url http://127.0.0.1:8080 --token-file .cache/dev-token [--shim-pid PID]

It prints one JSON object. The test suite runs it for a few seconds against the integration stack
(tests/integration/test_reliability.py); docs/benchmarks.md has the figures of a run by hand.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from http.client import HTTPConnection, HTTPException
from pathlib import Path
from urllib.parse import urlsplit

from acceptance.stats import percentile

REPO_ROOT = Path(__file__).resolve().parent.parent
HEALTH_INTERVAL_SECONDS = 0.05
VARYING_TIMING = ("total_seconds", "queue_seconds", "inference_seconds")


def client_request(client: int) -> dict:
    count = (1, 2, 3, 17)[client % 4]
    decisions = [{"id": f"client{client}-d{n}", "question": f"Does step {n} apply to client {client}?",
                  "options": [{"id": "yes", "description": "It applies."}, {"id": "no", "description": "It does not."}]}
                 for n in range(count)]
    if client % 5 == 0:
        decisions[0]["options"].append({"id": "unsure", "description": "It cannot be told."})
        decisions[0]["orderings"] = "rotations"
    return {"state": {"client": client, "note": "detail " * (client + 1)}, "decisions": decisions}


def comparable(answer: dict) -> dict:
    """The answer without the seconds, which differ from run to run."""
    timing = {key: value for key, value in answer["timing"].items() if key not in VARYING_TIMING}
    return {"results": answer["results"], "timing": timing}


def rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": round(percentile(values, 50), 2), "p99": round(percentile(values, 99), 2),
            "max": round(max(values), 2)}


@dataclass
class Outcome:
    ok: int = 0
    busy: int = 0
    mismatches: int = 0
    errors: list[str] = field(default_factory=list)
    ok_ms: list[float] = field(default_factory=list)
    health_ms: list[float] = field(default_factory=list)
    health_failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)


class Endpoint:
    """One kept-alive connection to the service; reconnects after the server closed it."""

    def __init__(self, url: str, token: str | None = None):
        parts = urlsplit(url)
        self._host, self._port = parts.hostname, parts.port or 80
        self._headers = {"Content-Type": "application/json"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._connection: HTTPConnection | None = None

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, dict, bytes, float]:
        if self._connection is None:
            self._connection = HTTPConnection(self._host, self._port, timeout=300)
        started = time.perf_counter()
        try:
            self._connection.request(method, path, body=body, headers=self._headers)
            response = self._connection.getresponse()
            payload = response.read()
        except (OSError, HTTPException):
            self.close()
            raise
        elapsed = (time.perf_counter() - started) * 1000
        if response.will_close:
            self.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, payload, elapsed

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def reference_answers(url: str, token: str, clients: int) -> list[dict]:
    endpoint = Endpoint(url, token)
    answers = []
    for client in range(clients):
        status, _, payload, _ = endpoint.call("POST", "/decide/shared", json.dumps(client_request(client)).encode())
        if status != 200:
            raise RuntimeError(f"the reference request of client {client} was answered {status}: {payload[:300]!r}")
        answers.append(comparable(json.loads(payload)))
    endpoint.close()
    return answers


def run_client(url: str, token: str, client: int, reference: dict, deadline: float, outcome: Outcome) -> None:
    endpoint, body, jitter = Endpoint(url, token), json.dumps(client_request(client)).encode(), random.Random(client)
    while time.monotonic() < deadline:
        try:
            status, headers, payload, elapsed = endpoint.call("POST", "/decide/shared", body)
        except (OSError, HTTPException) as exc:
            outcome.error(f"client {client}: {type(exc).__name__}: {exc}")
            continue
        if status == 200:
            same = comparable(json.loads(payload)) == reference
            with outcome.lock:
                outcome.ok += 1
                outcome.ok_ms.append(elapsed)
                outcome.mismatches += not same
        elif status == 429 and headers.get("retry-after") == "1" and json.loads(payload)["error"]["code"] == "busy":
            with outcome.lock:
                outcome.busy += 1
            time.sleep(jitter.uniform(0.02, 0.1))
        else:
            outcome.error(f"client {client}: {status} {headers} {payload[:300]!r}")
    endpoint.close()


def sample_health(url: str, deadline: float, outcome: Outcome) -> None:
    endpoint = Endpoint(url)
    while time.monotonic() < deadline:
        try:
            status, _, payload, elapsed = endpoint.call("GET", "/health")
        except (OSError, HTTPException) as exc:
            outcome.health_failures.append(f"{type(exc).__name__}: {exc}")
        else:
            outcome.health_ms.append(elapsed)
            if status != 200:
                outcome.health_failures.append(f"{status} {payload[:200]!r}")
        time.sleep(HEALTH_INTERVAL_SECONDS)
    endpoint.close()


def run_load(url: str, token: str, clients: int, seconds: float, shim_pid: int | None = None) -> dict:
    references = reference_answers(url, token, clients)
    rss_before = rss_mib(shim_pid)
    outcome = Outcome()
    deadline = time.monotonic() + seconds
    threads = [threading.Thread(target=run_client, args=(url, token, client, references[client], deadline, outcome))
               for client in range(clients)]
    threads.append(threading.Thread(target=sample_health, args=(url, deadline, outcome)))
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    return {
        "clients": clients, "seconds": round(elapsed, 1),
        "ok": outcome.ok, "busy": outcome.busy, "mismatches": outcome.mismatches,
        "errors": len(outcome.errors), "error_samples": outcome.errors[:5],
        "ok_per_second": round(outcome.ok / elapsed, 1), "ok_ms": percentiles(outcome.ok_ms),
        "health_samples": len(outcome.health_ms), "health_failures": outcome.health_failures[:5],
        "health_ms": percentiles(outcome.health_ms),
        "shim_rss_mib": {"before": rss_before, "after": rss_mib(shim_pid)},
    }


def with_own_stack(args: argparse.Namespace) -> dict:
    from devstack.fixture import build_fixture
    from devstack.shim import ShimServer
    from devstack.triton import TritonServer

    token = "load-token-0123456789-abcdefghijklmnopqrstuv"
    env = build_fixture().env()
    env.update({"INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32"})
    logs = REPO_ROOT / ".cache" / "load"
    triton = TritonServer(env, logs / "tritonserver.log")
    triton.start().wait_ready(300)
    shim = ShimServer(triton, {"INTERN_DECISION_API_TOKEN": token, "INTERN_DECISION_MAX_QUEUE": str(args.max_queue)},
                      logs / "shim.log")
    try:
        shim.start().wait_ready(60)
        return {"max_queue": args.max_queue, **run_load(shim.url, token, args.clients, args.seconds, shim.pid)}
    finally:
        shim.stop()
        triton.stop()


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/load.py")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--max-queue", type=int, default=32, help="MAX_QUEUE of the stack this script starts")
    parser.add_argument("--url", help="a running service instead of a stack of our own")
    parser.add_argument("--token-file", type=Path, help="the service's API token (with --url)")
    parser.add_argument("--shim-pid", type=int, help="the shim's process id, for its memory (with --url)")
    args = parser.parse_args()
    if args.url:
        report = run_load(args.url, args.token_file.read_text().strip(), args.clients, args.seconds, args.shim_pid)
    else:
        report = with_own_stack(args)
    print(json.dumps(report, indent=2))
    return 0 if report["errors"] == 0 and report["mismatches"] == 0 and not report["health_failures"] else 1


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    sys.exit(main())
