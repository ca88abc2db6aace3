"""What the shim and Triton add per call over calling the fixture's predict() in-process.

Starts tritonserver (CPU, fixture checkpoint) and the shim, loads the same fixture in this process, and for each
shape measures per round:

* predict() in-process for each of the request's calls, and the model side's own extra work per call (decoding the
  request string, rendering the prompt for prompt_sha256, encoding the answer), also in-process;
* the same calls straight to Triton with tritonclient, and the request through the shim (/decide/shared), each
  timed at the client and, inside the model, by the intern_decision_inference_seconds histogram (read from the
  metrics port between requests, outside the timed region).

Client time minus the model's own time is what the transport adds (HTTP, Triton's core, the stub's IPC, the shim),
measured on the same request, so the model's run-to-run noise cancels. Writes docs/benchmarks.md.

    .venv/bin/python bench/overhead.py [--rounds 40]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
import urllib.request
from http.client import HTTPConnection
from pathlib import Path

import numpy as np
import torch
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from devstack.fixture import build_fixture
from devstack.shim import ShimServer
from devstack.triton import REPO_ROOT, TritonServer
from shim.planning import plan
from shim.validation import shared_body

sys.path.insert(0, str(REPO_ROOT / "model_repository" / "intern_decision" / "1"))
from intern_decision_model.engine import render_prompt  # noqa: E402
from intern_decision_model.protocol import decode_request, encode_answer  # noqa: E402

TOKEN = "benchmark-token-0123456789-abcdefghijklmnop"
OUT = REPO_ROOT / "docs" / "benchmarks.md"
NOTES = REPO_ROOT / "bench" / "notes.md"


def criteria(count: int) -> list[dict]:
    return [{"id": f"c{n}", "question": f"Does criterion {n} hold for this state?",
             "options": [{"id": "yes", "description": "It holds."}, {"id": "no", "description": "It does not."}]}
            for n in range(count)]


def calls_of(body: dict) -> list[dict]:
    state, decisions = shared_body(body)
    return [call.predict_request(state, decisions) for call in plan(decisions, 64)]


def long_state(module, engine, target_tokens: int) -> str:
    """A state text that makes the 16-criteria call about target_tokens long in the fixture's tokenizer."""
    sentence = "The shipment left the depot on Monday, was delayed by weather, and the customer asked twice. "
    repeats = 1
    while True:
        request = calls_of({"state": sentence * repeats, "decisions": criteria(16)})[0]
        text = render_prompt(module, engine.tokenizer, request)
        if len(engine.tokenizer(text, add_special_tokens=False)["input_ids"]) >= target_tokens:
            return sentence * repeats
        repeats += 1


def model_seconds(metrics_url: str) -> float:
    """The model's running total of seconds spent per call inside the stub."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "intern_decision_inference_seconds_sum":
                return sample.value
    raise RuntimeError("intern_decision_inference_seconds is not on the metrics port")


def p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()

    pins = build_fixture()
    env = pins.env()
    # One torch thread on each side, so that the model in Triton's stub and in this process do the same work.
    env.update({"INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32", "OMP_NUM_THREADS": "1"})
    torch.set_num_threads(1)
    logs = REPO_ROOT / ".cache" / "bench"
    triton = TritonServer(env, logs / "tritonserver.log").start().wait_ready(300)
    shim = ShimServer(triton, {"INTERN_DECISION_API_TOKEN": TOKEN}, logs / "shim.log").start().wait_ready(60)
    rows = []
    try:
        spec = importlib.util.spec_from_file_location("fixture_inference_bench", pins.checkpoint / "inference.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        engine = module.DecisionEngine(checkpoint=str(pins.checkpoint), device="cpu", dtype="float32")
        shapes = {
            "one question": {"state": "The parcel arrived broken and the customer wants a refund.",
                             "decisions": criteria(1)},
            "21 binary criteria, one state": {"state": "The parcel arrived broken and the customer wants a refund.",
                                              "decisions": criteria(21)},
            "16 criteria, ~3,900-token state": {"state": long_state(module, engine, 3900),
                                                "decisions": criteria(16)},
        }
        triton_client = httpclient.InferenceServerClient(triton.http_url)
        # The lean stdlib client with a kept-alive connection, so the caller's own HTTP library is not measured.
        http = HTTPConnection("127.0.0.1", shim.port, timeout=120)
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        for name, body in shapes.items():
            requests = calls_of(body)
            calls = len(requests)
            local, extra, triton_added, shim_total, tokens = [], [], [], [], 0
            for round_ in range(args.rounds + 3):
                keep = round_ >= 3  # three warm-up rounds
                for request in requests:
                    raw = json.dumps(request).encode()
                    started = time.perf_counter()
                    answer = engine.predict(request)
                    predicted = time.perf_counter()
                    decode_request(raw)
                    answer["prompt_sha256"] = render_prompt(module, engine.tokenizer, request)
                    encode_answer(answer)
                    finished = time.perf_counter()
                    tokens = max(tokens, answer["usage"]["input_tokens"])
                    if keep:
                        local.append(predicted - started)
                        extra.append(finished - predicted)

                    before = model_seconds(triton.metrics_url)
                    started = time.perf_counter()
                    tensor = httpclient.InferInput("REQUEST", [1], "BYTES")
                    tensor.set_data_from_numpy(np.array([raw], dtype=np.object_))
                    json.loads(triton_client.infer("intern_decision", [tensor]).as_numpy("RESPONSE")[0])
                    elapsed = time.perf_counter() - started
                    if keep:
                        triton_added.append(elapsed - (model_seconds(triton.metrics_url) - before))

                payload = json.dumps(body).encode()
                before = model_seconds(triton.metrics_url)
                started = time.perf_counter()
                http.request("POST", "/decide/shared", body=payload, headers=headers)
                response = http.getresponse()
                text = response.read()
                elapsed = time.perf_counter() - started
                assert response.status == 200, text
                if keep:
                    shim_total.append((elapsed - (model_seconds(triton.metrics_url) - before)) / calls)
            shim_added = [total - statistics.median(triton_added) for total in shim_total]
            together = [total + statistics.median(extra) for total in shim_total]
            rows.append((name, calls, tokens, p(local, 50), p(extra, 50), p(extra, 99),
                         p(triton_added, 50), p(triton_added, 99), p(shim_added, 50), p(shim_added, 99),
                         p(together, 50), p(together, 99)))
        triton_client.close()
        http.close()
    finally:
        shim.stop()
        triton.stop()

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    lines = [
        "# Benchmarks",
        "",
        "## Time the shim and Triton add per call",
        "",
        f"`bench/overhead.py`, {args.rounds} rounds after 3 warm-up rounds, on {cpu} ({os.cpu_count()} cores), "
        f"Python {platform.python_version()}, torch {torch.__version__} with one thread on each side, the fixture "
        "checkpoint in float32 on the CPU; client, shim, tritonserver and the model share the two cores.",
        "",
        "- *model side adds*: decoding the request string, rendering the prompt for `prompt_sha256` and encoding the "
        "answer, timed in-process next to `predict()`;",
        "- *Triton adds*: a tritonclient call's time minus the model's own time for that call (its "
        "`intern_decision_inference_seconds`), i.e. HTTP, Triton's core and the python backend's IPC;",
        "- *shim adds*: a `/decide/shared` request's time minus the model's own time, per call, minus Triton's p50;",
        "- *together*: the shim request's time minus the model's own time, per call, plus the model side's p50: "
        "everything between a caller and `predict()`.",
        "",
        "| shape | calls | input tokens | predict() p50 | model side adds p50 / p99 | Triton adds p50 / p99 | "
        "shim adds p50 / p99 | together p50 / p99 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, calls, tokens, local50, *pairs in rows:
        cells = " | ".join(f"{pairs[i]:.2f} / {pairs[i + 1]:.2f} ms" for i in range(0, len(pairs), 2))
        lines.append(f"| {name} | {calls} | {tokens} | {local50:.1f} ms | {cells} |")
    lines.append("")
    OUT.write_text("\n".join(lines) + ("\n" + NOTES.read_text() if NOTES.exists() else ""))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
