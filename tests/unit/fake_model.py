"""A fake Triton model for the shim's unit tests: predict()-shaped answers from a fixed rule, calls recorded.

The probabilities are softmax(base[option id] + bias[position]): the base is what the "model" thinks of an option,
the bias a pure position effect, which orderings must cancel.
"""
from __future__ import annotations

import asyncio
import math

from shim.errors import Problem
from shim.port.graph_series import LiveGraphs
from shim.port.model import Probe
from shim.port.triton import read_answer
from wire import strict_json
from wire.answer import CallAnswer
from wire.facts import ModelFacts
from wire.protocol import predict_request

FACTS = {"name": "Fake-Decision", "repo": "internlm/Intern-Decision-4B", "revision": "f" * 40,
         "inference_sha256": "e" * 64, "prompt_version": "inference.py@sha256:eeeeeeeeeeeeeeee",
         "dtype": "bfloat16", "device": "cuda:0", "vram_cap_gib": 35.0, "max_tokens": 8192,
         "vision_tower": "removed", "fla_version": "0.5.2", "causal_conv1d_version": "1.7.0",
         "linear_attention": "fast", "slow_kernels_allowed": False,
         "pinned": True, "boot_id": "b" * 32, "started_at": "2026-05-04T10:11:12.345+00:00",
         "cuda_graphs": "exact", "cuda_graphs_reason": ""}
GRAPHS = {"mode": "exact", "reason": "", "shapes_captured": 2,
          "shapes_refused": {"out_of_memory": 0, "budget": 0, "differs": 1}, "memory_bytes": 201326592,
          "calls_replayed": 40, "calls_eager": 3}
CALIBRATION = {"method": "temperature-scaling", "temperature": 1.99241824}


def softmax(values: list[float]) -> list[float]:
    peak = max(values)
    weights = [math.exp(value - peak) for value in values]
    return [weight / sum(weights) for weight in weights]


class FakeModel:
    def __init__(self, base: dict[str, float] | None = None, position_bias: list[float] | None = None):
        self.base = base or {}
        self.position_bias = position_bias or [0.0] * 16
        self.calls: list[dict] = []
        self.request_ids: list[str] = []
        self.fail_with: Exception | None = None
        self.fail_on_call: int | None = None
        self.drop_option: str | None = None
        self.gate: asyncio.Event | None = None  # when set, predict waits for it
        self.active = 0
        self.max_active = 0
        self.is_ready: Problem | None = None
        self.opened = False
        self.probes: list[Probe] = []  # what the next pings answer, in order; then Probe(True)
        self.pings = 0
        self.live_graphs: LiveGraphs | None = LiveGraphs(**GRAPHS)

    def bias_at(self, position: int) -> float:
        return self.position_bias[position] if position < len(self.position_bias) else 0.0

    def answer_for(self, request: dict) -> dict:
        answers = {}
        for field, question in request["questions"].items():
            kind = question.get("type", "choice")
            criteria = question.get("criteria")
            if kind == "score":
                options = [(str(level), description) for level, description in enumerate(criteria)]
            elif kind == "noul":
                options = [("no", ""), ("yes", "")]
            else:
                options = list(criteria.items())
            values = [value for value, _ in options]
            # System One's questions may hold more options than the 16 positions a bias is given for
            probabilities = softmax([self.base.get(value, 0.0) + self.bias_at(position)
                                     for position, value in enumerate(values)])
            scored = dict(zip(values, probabilities))
            if self.drop_option in scored:
                del scored[self.drop_option]
            best = min(scored, key=lambda value: (-scored[value], value))
            answer = {"type": kind, "probabilities": scored, "confidence": scored[best]}
            if kind == "score":
                answer["score"] = math.fsum(float(value) * p for value, p in scored.items())
                answer["legend"] = dict(options)
            elif kind == "noul":
                answer["noul"] = scored["yes"]
            else:
                answer["choice"] = best
            answers[field] = {**answer, "source": "local", "decision": best}
        return {"answers": answers,
                "usage": {"input_tokens": 100 + 10 * len(answers), "output_tokens": len(answers),
                          "decision_count": len(answers)},
                "timing": {"inference_ms": 12.5}, "calibration": dict(CALIBRATION),
                "model": FACTS["name"], "backend": "hf", "prompt_sha256": f"sha-of-call-{len(self.calls)}",
                "prompt_version": FACTS["prompt_version"],
                "model_facts": {key: FACTS[key] for key in
                                ("name", "repo", "revision", "inference_sha256", "dtype", "device")}}

    async def predict_calls(self, state: object, calls: list[dict], request_id: str) -> list[CallAnswer]:
        """Like Triton with the model: the calls run in order, each over the one state, and the first failure ends
        the request; `calls` records each call's predict() request."""
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.request_ids.append(request_id)
        try:
            answers = []
            for call in calls:
                request = predict_request(state, call)
                self.calls.append(request)
                if self.gate is not None:
                    await self.gate.wait()
                else:
                    await asyncio.sleep(0)
                if self.fail_with is not None and self.fail_on_call in (None, len(self.calls) - 1):
                    raise self.fail_with
                answers.append(read_answer(strict_json.dumps(self.answer_for(request)), len(answers)))
            return answers
        finally:
            self.active -= 1

    async def ready(self) -> Problem | None:
        return self.is_ready

    async def ping(self) -> Probe:
        self.pings += 1
        await asyncio.sleep(0)
        return self.probes.pop(0) if self.probes else Probe(True)

    async def facts(self) -> ModelFacts:
        return ModelFacts(**FACTS)

    async def graphs(self) -> LiveGraphs | None:
        return self.live_graphs

    async def open(self) -> None:
        self.opened = True

    async def close(self) -> None:
        self.opened = False
