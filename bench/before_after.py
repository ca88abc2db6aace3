"""What a change to the shim costs per request: the shim of an earlier commit and this tree's, side by side in one
run, in front of the same tritonserver (CPU, fixture checkpoint).

The earlier commit is exported (git archive) and its shim started from there; both shims get the same settings.
Each round sends every shape to both, alternating which goes first, so the machine's drift falls on both alike.
A request's time less the forward time its answer reports is what the shim and Triton add; the model's side is the
same process for both, so the difference between the two columns is the shim's. Then a burst of one-question
requests to each gives the shim's CPU time per request (from /proc; one request is below the clock's tick).

    .venv/bin/python bench/before_after.py --before <commit> [--rounds 40] [--write-doc]

Results go to bench/results/before_after.json; --write-doc renders docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from http.client import HTTPConnection
from pathlib import Path

from overhead import (
    ANCHOR_QUESTIONS,
    ANCHOR_STATE,
    STATE,
    SYSTEMONE_MODEL,
    TOKEN,
    cpu_seconds,
    criteria,
    forward_seconds,
    machine,
    post,
    route_of,
    summary,
)

from devstack.fixture import build_fixture
from devstack.shim import ShimServer
from devstack.triton import REPO_ROOT, TritonServer

SIDES = ("before", "after")


def shapes() -> dict[str, dict]:
    forty = {f"c{n}": {"type": "choice", "instructions": f"Does criterion {n} hold for this state?",
                       "criteria": {"yes": "It holds.", "no": "It does not."}} for n in range(40)}
    return {
        "/decide/shared: one question": {"state": STATE, "decisions": criteria(1)},
        "/decide/shared: 21 binary criteria": {"state": STATE, "decisions": criteria(21)},
        "/decide/shared: orderings all, 4 options": {"state": STATE,
                                                     "decisions": criteria(1, options=4, orderings="all")},
        "/v1/systemone: 3 mixed questions": {"model": SYSTEMONE_MODEL, "state": ANCHOR_STATE,
                                             "questions": ANCHOR_QUESTIONS},
        "/v1/systemone: 40 questions": {"model": SYSTEMONE_MODEL, "state": STATE, "questions": forty},
    }


def export(commit: str, into: Path) -> str:
    """The commit's tree under `into`; its full hash."""
    full = subprocess.run(["git", "rev-parse", "--verify", f"{commit}^{{commit}}"], cwd=REPO_ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "archive", full], cwd=REPO_ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return full


def added_ms(http: HTTPConnection, path: str, payload: bytes, headers: dict) -> float:
    elapsed, text = post(http, path, payload, headers)
    return elapsed - forward_seconds(path, json.loads(text)) * 1000


def measure(before: str, rounds: int, cpu_requests: int) -> dict:
    pins = build_fixture()
    env = {**pins.env(), "INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32", "OMP_NUM_THREADS": "1"}
    logs = REPO_ROOT / ".cache" / "bench"
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    with tempfile.TemporaryDirectory(prefix="before-") as scratch:
        commit = export(before, Path(scratch))
        triton = TritonServer(env, logs / "tritonserver.log").start().wait_ready(300)
        shims = {"before": ShimServer(triton, {"INTERN_DECISION_API_TOKEN": TOKEN}, logs / "shim-before.log",
                                      tree=Path(scratch)),
                 "after": ShimServer(triton, {"INTERN_DECISION_API_TOKEN": TOKEN}, logs / "shim-after.log")}
        try:
            for shim in shims.values():
                shim.start()
            for shim in shims.values():
                shim.wait_ready(120)
            connections = {side: HTTPConnection("127.0.0.1", shims[side].port, timeout=300) for side in SIDES}
            samples = {name: {side: [] for side in SIDES} for name in shapes()}
            for round_ in range(rounds + 2):  # two warm-up rounds
                for name, body in shapes().items():
                    path, payload = route_of(body), json.dumps(body).encode()
                    for side in SIDES if round_ % 2 == 0 else SIDES[::-1]:
                        value = added_ms(connections[side], path, payload, headers)
                        if round_ >= 2:
                            samples[name][side].append(value)
            one = json.dumps(shapes()["/decide/shared: one question"]).encode()
            cpu = {side: 0.0 for side in SIDES}
            for index in range(cpu_requests):
                for side in SIDES if index % 2 == 0 else SIDES[::-1]:
                    started = cpu_seconds(shims[side].pid)
                    post(connections[side], "/decide/shared", one, headers)
                    cpu[side] += cpu_seconds(shims[side].pid) - started
        finally:
            for shim in shims.values():
                shim.stop()
            triton.stop()
    return {
        "before": commit,
        "after": subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO_ROOT, capture_output=True,
                                text=True).stdout.strip(),
        "rounds": rounds,
        "machine": machine(),
        "cpu_requests": cpu_requests,
        "shapes": {name: {side: summary(values) for side, values in sides.items()} for name, sides in samples.items()},
        "shim_cpu_ms_per_request": {side: seconds * 1000 / cpu_requests for side, seconds in cpu.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="the commit whose shim is the baseline")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--cpu-requests", type=int, default=300)
    parser.add_argument("--write-doc", action="store_true", help="render docs/benchmarks.md from bench/results/")
    args = parser.parse_args()
    run = measure(args.before, args.rounds, args.cpu_requests)
    print(json.dumps(run, indent=2))
    from report import save
    save("before_after", run, args.write_doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
