"""The model's own series on Triton's metrics port (docs/operations.md, "The model's series"); each update is a
round trip to the server, so one thread applies them off the response path."""
from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable

from wire.facts import INFO_METRIC, ModelFacts
from wire.graph_series import CALLS_METRIC, CAPTURED, MEMORY_METRIC, MODE_METRIC, REFUSED_PREFIX, SHAPES_METRIC
from wire.protocol import OUTCOMES

from .graphs import OFF, REFUSALS, GraphFacts

log = logging.getLogger("intern_decision.metrics")

TOKEN_BUCKETS = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
SECONDS_BUCKETS = [0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0]
MEMORY_KINDS = ("reserved", "allocated", "peak_reserved")
GRAPH_PATHS = ("replayed", "eager")
GRAPH_SHAPE_STATES = (CAPTURED,) + tuple(f"{REFUSED_PREFIX}{kind}" for kind in REFUSALS)
NO_GRAPHS = GraphFacts(OFF, "", (), {}, 0, 0, 0)


@dataclass(frozen=True)
class CallRecord:
    outcome: str
    seconds: float
    input_tokens: int | None


class ModelMetrics:
    def __init__(self, pb_utils: Any, model: str, facts: ModelFacts, read_memory: Callable[[], tuple[int, ...]],
                 read_baseline: Callable[[], int] = lambda: 0,
                 read_graphs: Callable[[], GraphFacts] = lambda: NO_GRAPHS):
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
            family(name=MODE_METRIC,
                   description="1 for how the forward runs now (mode) and why graphs are off (reason)",
                   kind=family.GAUGE),
            family(name=SHAPES_METRIC,
                   description="Shapes captured and proven, and refused by why (out of memory, budget, differs)",
                   kind=family.GAUGE),
            family(name=MEMORY_METRIC, description="What the graphs' captures hold",
                   kind=family.GAUGE),
            family(name=CALLS_METRIC,
                   description="Forward calls replayed from a graph or run eager beneath predict()",
                   kind=family.COUNTER),
        ]
        calls, tokens, seconds, memory, info, graph_mode, graph_shapes, graph_memory, graph_calls = self._families
        self._calls = {outcome: calls.Metric(labels={**base, "outcome": outcome}) for outcome in OUTCOMES}
        self._tokens = tokens.Metric(labels=base, buckets=TOKEN_BUCKETS)
        self._seconds = seconds.Metric(labels=base, buckets=SECONDS_BUCKETS)
        self._memory = [memory.Metric(labels={**base, "kind": kind}) for kind in MEMORY_KINDS]
        self._memory_shown: tuple[int, ...] | None = None
        self._read_memory = read_memory
        self._baseline = memory.Metric(labels={**base, "kind": "baseline"})
        self._read_baseline = read_baseline
        self._baseline_shown = read_baseline()
        self._baseline.set(self._baseline_shown)
        info.Metric(labels={**base, **facts.to_labels()}).set(1)
        self._graph_mode_family, self._base = graph_mode, base
        self._graph_mode: Any = None
        self._graph_shapes = {state: graph_shapes.Metric(labels={**base, "state": state})
                              for state in GRAPH_SHAPE_STATES}
        self._graph_memory = graph_memory.Metric(labels=base)
        self._graph_calls = {path: graph_calls.Metric(labels={**base, "path": path}) for path in GRAPH_PATHS}
        self._read_graphs = read_graphs
        self._graphs_shown: GraphFacts | None = None
        self._show_graphs()
        self._queue: queue.SimpleQueue[list[CallRecord] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._apply_queued, name="intern-decision-metrics", daemon=True)
        self._thread.start()

    def record(self, calls: list[CallRecord]) -> None:
        self._queue.put(calls)

    def close(self, timeout: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _apply_queued(self) -> None:
        while (calls := self._queue.get()) is not None:
            try:
                self._apply(calls)
            except Exception:
                log.exception("metrics update failed")

    def _apply(self, calls: list[CallRecord]) -> None:
        for call in calls:
            self._calls[call.outcome].increment(1)
            self._seconds.observe(call.seconds)
            if call.input_tokens is not None:
                self._tokens.observe(call.input_tokens)
        memory = tuple(self._read_memory())
        if memory != self._memory_shown:  # skips the round trips (always, on the CPU)
            for gauge, value in zip(self._memory, memory):
                gauge.set(value)
            self._memory_shown = memory
        baseline = self._read_baseline()
        if baseline != self._baseline_shown:
            self._baseline.set(baseline)
            self._baseline_shown = baseline
        self._show_graphs()

    def _show_graphs(self) -> None:
        now, shown = self._read_graphs(), self._graphs_shown
        if shown is None or (now.mode, now.reason) != (shown.mode, shown.reason):
            if self._graph_mode is not None:
                self._graph_mode.set(0)
            self._graph_mode = self._graph_mode_family.Metric(labels={**self._base, "mode": now.mode,
                                                                      "reason": now.reason})
            self._graph_mode.set(1)
        if shown is None or (now.captured, now.refused, now.memory_bytes) != \
                (shown.captured, shown.refused, shown.memory_bytes):
            counts = {CAPTURED: len(now.captured),
                      **{f"{REFUSED_PREFIX}{kind}": count for kind, count in now.refused_by_kind().items()}}
            for state, gauge in self._graph_shapes.items():
                gauge.set(counts[state])
            self._graph_memory.set(now.memory_bytes)
        for path, total in (("replayed", now.replayed), ("eager", now.eager)):
            grown = total - (getattr(shown, path) if shown is not None else 0)
            if grown > 0:
                self._graph_calls[path].increment(grown)
        self._graphs_shown = now
