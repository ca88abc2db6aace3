"""What the graph runner costs the host per forward, beside the forward itself, on the CPU with the fixture.

A CUDA graph's replay is one launch; what the runner adds around it is Python: the call's check (one row, no cache,
the mask all ones), the copies into the static buffers, and the logits cloned out. Here the replay does nothing, so
what is timed is exactly that, against the fixture's eager forward of the same call.

    .venv/bin/python bench/graph_runner_cost.py [--rounds 2000]

Prints a JSON summary and writes bench/results/graph_runner.json.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from acceptance.stats import percentile  # noqa: E402
from bench.report import save  # noqa: E402
from devstack.fixture import build_fixture  # noqa: E402
from gpucheck.checkpoint_code import load_inference  # noqa: E402
from intern_decision_model.graphs import EXACT, GraphRunner, Shape  # noqa: E402


class RecordedOnce:
    """Records by running once; the first replay (the runner's proof against eager) runs the forward, every later one
    does nothing, so that only the runner's own work is timed."""

    def __init__(self, run):
        self._run = run
        self.output = run()

    def replay(self) -> None:
        if self._run is not None:
            self.output.logits.copy_(self._run().logits)
            self._run = None


class NoLaunch:
    def record(self, run):
        return RecordedOnce(run)

    def reserved_bytes(self) -> int:
        return 0


def timed(call, rounds: int) -> dict:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1e6)
    return {"p50": round(percentile(samples, 50), 1), "p99": round(percentile(samples, 99), 1)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--no-render", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    pins = build_fixture()
    engine = load_inference(pins.checkpoint).DecisionEngine(checkpoint=str(pins.checkpoint), device="cpu",
                                                            dtype="float32")
    model = engine.backend.model
    text = "a state of some length, " * 12
    ids = engine.tokenizer(text, return_tensors="pt")["input_ids"]
    kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "use_cache": False,
              "logits_to_keep": torch.tensor([3, ids.shape[1] // 2, ids.shape[1] - 1])}
    with torch.inference_mode():
        eager = timed(lambda: model(**kwargs), args.rounds // 4)
        runner = GraphRunner(torch, model, NoLaunch(), EXACT, 1 << 30).install()
        runner.prepare([Shape(ids.shape[1], 3)])
        around = timed(lambda: model(**kwargs), args.rounds)
        runner.uninstall()
    run = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__,
           "input_tokens": int(ids.shape[1]), "positions": 3, "rounds": args.rounds,
           "eager_forward_us": eager, "runner_around_a_replay_us": around}
    save("graph_runner", run, render=not args.no_render)
    print(json.dumps(run, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
