"""predict() in one process at each timed shape: eager, then replayed from exact graphs, then from bucketed ones.

Each mode's answers are compared with eager's (max |Δp|, labels, bit for bit), so one run says what the graphs buy
and what they change. Run by gpucheck.inprocess --graphs; the capture is injectable for the tests.
"""
from __future__ import annotations

from typing import Any, Callable

from intern_decision_model.engine import scored_part
from intern_decision_model.graph_start import compare
from intern_decision_model.graphs import BUCKETED, EXACT, GraphRunner, unsupported
from intern_decision_model.settings import DEFAULT_GRAPH_BUCKETS

BUDGET_BYTES = 4 << 30  # the check measures every shape; the service's own budget is a setting


def answers_of(engine: Any, calls: list) -> list[dict]:
    return [engine.predict(request) for request in calls]


def compared(eager: list[dict], graphed: list[dict]) -> dict:
    worst, differing = 0.0, []
    for before, after in zip(eager, graphed):
        dp, labels = compare(before, after)
        worst, differing = max(worst, dp), differing + labels
    return {"max_abs_dp": worst, "labels_differing": differing,
            "bit_identical": [scored_part(a) for a in eager] == [scored_part(b) for b in graphed]}


def measure_graphs(torch: Any, engine: Any, shapes: dict[str, list], measure: Callable[[list, float], dict],
                   seconds: float, capture_for: Callable[[], Any], save: Callable[[dict], None]) -> dict:
    """{"shapes": {name: {eager | exact | bucketed: rounds and comparison}}, exact | bucketed: what each captured}.
    measure(calls, seconds) times one shape's rounds; `seconds` is shared out across the shapes and modes."""
    model = engine.backend.model
    reason = unsupported(model)
    if reason:
        return {"skipped": reason}
    result: dict = {"shapes": {name: {} for name in shapes}}
    slice_seconds = seconds / (3 * max(1, len(shapes)))
    eager = {}
    for name, calls in shapes.items():
        eager[name] = answers_of(engine, calls)
        result["shapes"][name]["eager"] = measure(calls, slice_seconds)
        save(result)
    for mode in (EXACT, BUCKETED):
        runner = GraphRunner(torch, model, capture_for(), mode, BUDGET_BYTES, DEFAULT_GRAPH_BUCKETS).install()
        try:
            for name, calls in shapes.items():
                answers_of(engine, calls)  # first sighting: eager; the next captures
                entry = compared(eager[name], answers_of(engine, calls))
                entry.update(measure(calls, slice_seconds))
                result["shapes"][name][mode] = entry
                save(result)
        finally:
            runner.uninstall()
        result[mode] = {"graphs": [str(shape) for shape in sorted(runner.graphs)], "calls": dict(runner.calls),
                        "memory_mib": runner.memory_bytes >> 20, "off_reason": runner.off_reason}
        save(result)
        del runner
    return result
