"""The model's own series on Triton's metrics port (docs/operations.md, "The model's series"). Every update is a
round trip from the stub to the server, so one thread applies them off the response path (as NVIDIA's vLLM backend)."""
from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable

from wire.facts import INFO_METRIC, ModelFacts
from wire.protocol import OUTCOMES

log = logging.getLogger("intern_decision.metrics")

TOKEN_BUCKETS = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
SECONDS_BUCKETS = [0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0]
MEMORY_KINDS = ("reserved", "allocated", "peak_reserved")


@dataclass(frozen=True)
class CallRecord:
    outcome: str
    seconds: float
    input_tokens: int | None


class ModelMetrics:
    def __init__(self, pb_utils: Any, model: str, facts: ModelFacts, read_memory: Callable[[], tuple[int, ...]],
                 read_baseline: Callable[[], int] = lambda: 0):
        family = pb_utils.MetricFamily
        base = {"model": model}
        # The families must stay referenced: deleting one unregisters its series.
        self._families = [
            family(name="intern_decision_calls_total", description="Calls by outcome", kind=family.COUNTER),
            family(name="intern_decision_input_tokens", description="Prompt tokens per scored call",
                   kind=family.HISTOGRAM),
            family(name="intern_decision_inference_seconds", description="Seconds the model spent on a call",
                   kind=family.HISTOGRAM),
            family(name="intern_decision_gpu_memory_bytes",
                   description="Device memory after the last call, the peak reserved since startup, and the "
                               "reserved after the warm-up (baseline)",
                   kind=family.GAUGE),
            family(name=INFO_METRIC, description="The pins and limits in force", kind=family.GAUGE),
        ]
        calls, tokens, seconds, memory, info = self._families
        self._calls = {outcome: calls.Metric(labels={**base, "outcome": outcome}) for outcome in OUTCOMES}
        self._tokens = tokens.Metric(labels=base, buckets=TOKEN_BUCKETS)
        self._seconds = seconds.Metric(labels=base, buckets=SECONDS_BUCKETS)
        self._memory = [memory.Metric(labels={**base, "kind": kind}) for kind in MEMORY_KINDS]
        self._memory_shown: tuple[int, ...] | None = None
        self._read_memory = read_memory
        self._baseline = memory.Metric(labels={**base, "kind": "baseline"})  # kept referenced, like the families
        self._read_baseline = read_baseline
        self._baseline_shown = read_baseline()
        self._baseline.set(self._baseline_shown)
        info.Metric(labels={**base, **facts.to_labels()}).set(1)
        self._queue: queue.SimpleQueue[list[CallRecord] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._apply_queued, name="intern-decision-metrics", daemon=True)
        self._thread.start()

    def record(self, calls: list[CallRecord]) -> None:
        """Queue one request's calls; returns at once."""
        self._queue.put(calls)

    def close(self, timeout: float = 5.0) -> None:
        """Apply what is queued, then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _apply_queued(self) -> None:
        while (calls := self._queue.get()) is not None:
            try:
                self._apply(calls)
            except Exception:  # a metric must never stop the metrics
                log.exception("metrics update failed")

    def _apply(self, calls: list[CallRecord]) -> None:
        for call in calls:
            self._calls[call.outcome].increment(1)
            self._seconds.observe(call.seconds)
            if call.input_tokens is not None:
                self._tokens.observe(call.input_tokens)
        memory = tuple(self._read_memory())
        if memory != self._memory_shown:  # unchanged gauges (always, on the CPU) skip their round trips
            for gauge, value in zip(self._memory, memory):
                gauge.set(value)
            self._memory_shown = memory
        baseline = self._read_baseline()
        if baseline != self._baseline_shown:
            self._baseline.set(baseline)
            self._baseline_shown = baseline
