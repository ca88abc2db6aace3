"""predict() in one process at each timed shape, eager against exact CUDA graphs, then against bucketed ones.

Each mode captures the shapes' graphs first, as the service does at start-up, then its rounds alternate with eager
rounds (gpucheck.alternate), so that the two are timed in the same conditions; each mode's answers are compared with
eager's (max |Δp|, labels, bit for bit). Run by gpucheck.inprocess --graphs; the capture is injectable for the tests.
"""
from __future__ import annotations

from typing import Any, Callable

from gpucheck.alternate import alternate
from gpucheck.stats import summary
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


def alternated(runner: GraphRunner, calls: list, time_round: Callable[[list], float], rounds: int,
               seconds: float) -> dict:
    def eager() -> float:
        with runner.paused():
            return time_round(calls)

    graphed, eager_ms = alternate(lambda: time_round(calls), eager, rounds, seconds)
    return {"predict": summary(graphed), "eager": summary(eager_ms), "rounds": len(graphed), "order": "alternated"}


def measure_graphs(torch: Any, engine: Any, shapes: dict[str, list], time_round: Callable[[list], float],
                   rounds: int, seconds: float, capture_for: Callable[[], Any], save: Callable[[dict], None]) -> dict:
    """{"shapes": {name: {exact | bucketed: its rounds, eager's beside them, the comparison}}, exact | bucketed: what
    each captured, refused and replayed}. time_round(calls) times one round of a shape; `seconds` is shared out
    across the shapes and modes."""
    model = engine.backend.model
    reason = unsupported(model)
    if reason:
        return {"skipped": reason}
    result: dict = {"shapes": {name: {} for name in shapes}}
    slice_seconds = seconds / (2 * max(1, len(shapes)))
    eager = {name: answers_of(engine, calls) for name, calls in shapes.items()}
    for mode in (EXACT, BUCKETED):
        runner = GraphRunner(torch, model, capture_for(), mode, BUDGET_BYTES, DEFAULT_GRAPH_BUCKETS).install()
        try:
            for calls in shapes.values():  # eager, without graphs: the shapes the service would be configured with
                answers_of(engine, calls)
            runner.prepare(list(runner.uncovered))
            for name, calls in shapes.items():
                entry = compared(eager[name], answers_of(engine, calls))
                entry.update(alternated(runner, calls, time_round, rounds, slice_seconds))
                result["shapes"][name][mode] = entry
                save(result)
        finally:
            runner.uninstall()
        facts = runner.facts()
        result[mode] = {"graphs": [str(shape) for shape in facts.captured],
                        "refused": {str(shape): why for shape, why in sorted(facts.refused.items())},
                        "calls": dict(runner.calls), "memory_mib": facts.memory_bytes >> 20,
                        "off_reason": facts.reason}
        save(result)
        del runner
    return result
