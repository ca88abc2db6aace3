"""Custom Prometheus metrics served on Triton's metrics port (Triton counts an error response as a success).

intern_decision_calls_total{outcome}            calls by outcome: ok, invalid, out_of_memory, failed
intern_decision_input_tokens                    histogram of the prompt length of scored calls
intern_decision_inference_seconds               histogram of the model's time per call: decoding the request,
                                                predict(), the prompt hash and encoding the answer
intern_decision_gpu_memory_bytes{kind}          reserved / allocated after the last call (0 on the CPU)
intern_decision_model_info{...facts}            1, labelled with the pins and limits in force; the shim's /health
                                                reads it from the metrics port and never waits behind an inference
"""
from __future__ import annotations

from typing import Any

from .protocol import OUTCOMES

TOKEN_BUCKETS = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
SECONDS_BUCKETS = [0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0]
INFO_LABELS = ("name", "repo", "revision", "inference_sha256", "prompt_version", "dtype", "device",
               "vram_cap_gib", "max_tokens", "vision_tower")


def info_labels(facts: dict) -> dict[str, str]:
    return {key: "" if facts[key] is None else str(facts[key]) for key in INFO_LABELS}


class ModelMetrics:
    def __init__(self, pb_utils: Any, model: str, facts: dict):
        family = pb_utils.MetricFamily
        base = {"model": model}
        # The families must stay referenced: deleting one unregisters its series.
        self._families = [
            family(name="intern_decision_calls_total", description="Calls by outcome", kind=family.COUNTER),
            family(name="intern_decision_input_tokens", description="Prompt tokens per scored call",
                   kind=family.HISTOGRAM),
            family(name="intern_decision_inference_seconds", description="Seconds the model spent on a call",
                   kind=family.HISTOGRAM),
            family(name="intern_decision_gpu_memory_bytes", description="Device memory after the last call",
                   kind=family.GAUGE),
            family(name="intern_decision_model_info", description="The pins and limits in force",
                   kind=family.GAUGE),
        ]
        calls, tokens, seconds, memory, info = self._families
        self._calls = {outcome: calls.Metric(labels={**base, "outcome": outcome}) for outcome in OUTCOMES}
        self._tokens = tokens.Metric(labels=base, buckets=TOKEN_BUCKETS)
        self._seconds = seconds.Metric(labels=base, buckets=SECONDS_BUCKETS)
        self._memory = {kind: memory.Metric(labels={**base, "kind": kind}) for kind in ("reserved", "allocated")}
        self._memory_shown: tuple[int, int] | None = None
        info.Metric(labels={**base, **info_labels(facts)}).set(1)
        self._info = info

    def record(self, outcome: str, seconds: float, input_tokens: int | None, memory: tuple[int, int]) -> None:
        self._calls[outcome].increment(1)
        self._seconds.observe(seconds)
        if input_tokens is not None:
            self._tokens.observe(input_tokens)
        # Every metric update is a round trip to the server process; unchanged gauges (always, on the CPU) skip it.
        if memory != self._memory_shown:
            self._memory["reserved"].set(memory[0])
            self._memory["allocated"].set(memory[1])
            self._memory_shown = memory
