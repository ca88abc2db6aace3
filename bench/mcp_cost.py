"""What one MCP tool call adds over the same System One request, on the CPU stack (tritonserver with the fixture
checkpoint, the shim in front).

Each round sends, alternating, on one kept-alive connection each: POST /v1/systemone with one choice question,
and POST /mcp with the JSON-RPC `tools/call` of `system_one` with the same arguments (what an MCP host sends per
call once its session is initialized; the server is stateless, so nothing else is sent). Each time less the
forward time the answer reports itself (`x_calls[].inference_ms`) is what that path spends outside the model; the
difference of the medians is what MCP adds.

    .venv/bin/python bench/mcp_cost.py [--rounds 200]

Prints a JSON summary and writes bench/results/mcp.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from http.client import HTTPConnection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acceptance.shapes import ANCHOR_QUESTIONS, ANCHOR_STATE  # noqa: E402
from acceptance.stats import percentile  # noqa: E402
from devstack.fixture import build_fixture  # noqa: E402
from devstack.shim import ShimServer  # noqa: E402
from devstack.triton import REPO_ROOT, TritonServer  # noqa: E402
from wire.env import host_port  # noqa: E402

TOKEN = "bench-token-0123456789-abcdefghijklmn"
RESULTS = Path(__file__).with_name("results")
# One choice question: the anchor's first, over its state.
ARGUMENTS = {"model": "Intern-Decision-4B", "state": ANCHOR_STATE, "questions": {"team": ANCHOR_QUESTIONS["team"]}}


def post(connection: HTTPConnection, path: str, body: dict, headers: dict) -> tuple[float, dict]:
    raw = json.dumps(body).encode()
    started = time.perf_counter()
    connection.request("POST", path, raw, {**headers, "Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    elapsed = (time.perf_counter() - started) * 1000
    if response.status != 200:
        raise RuntimeError(f"{path} answered {response.status}: {data[:300]!r}")
    return elapsed, json.loads(data)


def outside_model(elapsed_ms: float, answer: dict) -> float:
    return elapsed_ms - sum(call["inference_ms"] for call in answer["x_calls"])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    pins = build_fixture()
    env = pins.env()
    env.update({"INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32", "OMP_NUM_THREADS": "1"})
    logs = REPO_ROOT / ".cache" / "bench"
    triton = TritonServer(env, logs / "tritonserver-mcp.log").start().wait_ready(300)
    shim = ShimServer(triton, {"INTERN_DECISION_API_TOKEN": TOKEN}, logs / "shim-mcp.log").start()
    try:
        shim.wait_ready(60)
        host, port = host_port(shim.url.removeprefix("http://"))
        http, mcp = HTTPConnection(host, port, timeout=60), HTTPConnection(host, port, timeout=60)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        mcp_headers = {**auth, "Accept": "application/json, text/event-stream"}
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "system_one", "arguments": ARGUMENTS}}
        times: dict[str, list[float]] = {"http": [], "mcp": []}
        for round_index in range(args.rounds + 10):  # the first 10 warm both paths up
            elapsed, answer = post(http, "/v1/systemone", ARGUMENTS, auth)
            http_outside = outside_model(elapsed, answer)
            elapsed, reply = post(mcp, "/mcp", {**call, "id": round_index}, mcp_headers)
            result = reply["result"]
            if result.get("isError"):
                raise RuntimeError(f"the tool failed: {result['structuredContent']}")
            mcp_outside = outside_model(elapsed, result["structuredContent"])
            if round_index >= 10:
                times["http"].append(http_outside)
                times["mcp"].append(mcp_outside)
    finally:
        shim.stop()
        triton.stop()
    summary = {
        "rounds": args.rounds, "cores": os.cpu_count(),
        "http_outside_model_ms": {"p50": round(percentile(times["http"], 50), 2),
                                  "p90": round(percentile(times["http"], 90), 2)},
        "mcp_outside_model_ms": {"p50": round(percentile(times["mcp"], 50), 2),
                                 "p90": round(percentile(times["mcp"], 90), 2)},
    }
    summary["mcp_adds_p50_ms"] = round(summary["mcp_outside_model_ms"]["p50"] - summary["http_outside_model_ms"]["p50"],
                                       2)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "mcp.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
