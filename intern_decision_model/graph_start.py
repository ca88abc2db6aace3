"""Which graph mode serves, decided at start-up: an explicit mode that cannot run refuses the start; `auto` falls
back to eager, with the reason in the log and /health."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from .checkpoint import StartupRefused
from .graphs import (
    DIFFERS,
    EXACT,
    MAX_POSITIONS,
    OFF,
    CudaCapture,
    GraphFacts,
    GraphRunner,
    Shape,
    buckets_needed,
    unsupported,
)
from .settings import AUTO, Settings

log = logging.getLogger("intern_decision.graphs")

GATE_QUESTIONS = {
    "approve": {"type": "choice", "instructions": "Approve the refund?",
                "criteria": {"approve": "Approve it.", "reject": "Reject it.", "escalate": "Ask a person."}},
    "urgency": {"type": "score", "instructions": "How urgent is it?", "criteria": ["low", "medium", "high"]},
    "fraud": {"type": "noul", "instructions": "Does this look like fraud?"},
}


def gate_requests(warm_up: dict) -> list[dict]:
    long_state = {"history": [{"day": day, "note": f"customer wrote again about order {day}"} for day in range(40)]}
    return [warm_up,
            {"state": {"order": "lost", "value_eur": 412}, "questions": GATE_QUESTIONS},
            {"state": long_state, "questions": GATE_QUESTIONS}]


@dataclass(frozen=True)
class GraphState:
    mode: str
    reason: str
    runner: GraphRunner | None

    def facts(self) -> GraphFacts:
        """A runner may turn off, or refuse shapes, after start-up."""
        if self.runner is not None:
            return self.runner.facts()
        return GraphFacts(OFF, self.reason, (), {}, 0, 0, 0)


def compare(eager: dict, graphed: dict) -> tuple[float, list[str]]:
    """(max |Δp|, the questions whose label differs)."""
    worst, differing = 0.0, []
    for name, answer in eager["answers"].items():
        other = graphed["answers"][name]
        worst = max([worst] + [abs(p - other["probabilities"][value]) for value, p in answer["probabilities"].items()])
        if answer["decision"] != other["decision"]:
            differing.append(name)
    return worst, differing


@dataclass(frozen=True)
class WarmUp:
    request: dict
    result: dict  # eager


def start_graphs(torch: Any, engine: Any, settings: Settings, device: str, warm_up: WarmUp,
                 scored: Callable[[dict], Any], capture_for: Callable[[Any, str], Any] = CudaCapture) -> GraphState:
    """Any failure here ends in graphs off, never in a model that does not load, unless a mode was asked for."""
    asked = settings.cuda_graphs
    if asked == OFF or (asked == AUTO and device == "cpu"):
        return GraphState(OFF, "", None)
    if device == "cpu":
        raise StartupRefused(f"graph check failed: INTERN_DECISION_CUDA_GRAPHS={asked} needs a CUDA device")
    mode = EXACT if asked == AUTO else asked
    model = engine.backend.model
    try:
        reason = unsupported(model)
        runner = None if reason else GraphRunner(
            torch, model, capture_for(torch, device), mode, settings.graph_budget_mib << 20,
            settings.graph_buckets, settings.graph_gate).install()
    except Exception as exc:
        reason, runner = f"the graph runner could not start: {type(exc).__name__}: {exc}", None
    if runner is not None:
        try:
            reason = _check(runner, engine, settings, warm_up, scored)
        except Exception as exc:
            reason = f"the start-up check of the graphs failed: {type(exc).__name__}: {exc}"
    if reason:
        if runner is not None:
            runner.turn_off(reason)
        if asked != AUTO:
            raise StartupRefused(f"graph check failed: {reason} (INTERN_DECISION_CUDA_GRAPHS={asked})")
        log.warning("serving eager: %s", reason)
        return GraphState(OFF, reason, None)
    log.info("CUDA graphs %s: %s captured and proven, %s refused, %d MiB", mode,
             ", ".join(map(str, sorted(runner.graphs))) or "none",
             ", ".join(f"{shape} ({why})" for shape, why in sorted(runner.refused.items())) or "none",
             runner.memory_bytes >> 20)
    return GraphState(mode, "", runner)


def _check(runner: GraphRunner, engine: Any, settings: Settings, warm_up: WarmUp,
           scored: Callable[[dict], Any]) -> str:
    """Why the graphs do not answer as the mode promises, "" when they do."""
    if runner.mode == EXACT:
        engine.predict(warm_up.request)  # says which shapes the warm-up's forward has
        warm_up_shapes = set(runner.uncovered)
        runner.prepare(list(settings.graph_shapes) + list(warm_up_shapes))
        if not runner.on:
            return runner.off_reason
        if any(runner.refused.get(shape) == DIFFERS for shape in warm_up_shapes):
            return "the warm-up replayed from its graph differs from eager"
        missing = [f"{shape} ({runner.refused.get(shape, 'not captured')})" for shape in sorted(warm_up_shapes)
                   if shape not in runner.graphs]
        if missing:
            return f"the warm-up's shapes have no graph: {', '.join(missing)}"
        replayed_before = runner.calls["replayed"]
        replayed = engine.predict(warm_up.request)
        if not runner.on:
            return runner.off_reason
        if runner.calls["replayed"] == replayed_before:
            return "the warm-up's forward was not replayed from a graph"
        if scored(replayed) != scored(warm_up.result):
            return "the warm-up replayed from its graph differs from eager"
        return ""
    runner.prepare([Shape(bucket, MAX_POSITIONS) for bucket in buckets_needed(settings.graph_buckets,
                                                                              settings.max_tokens)])
    if not runner.on:
        return runner.off_reason
    if not runner.graphs:
        return "no bucket's graph was captured and proven: " + ", ".join(
            f"{shape} ({why})" for shape, why in sorted(runner.refused.items()))
    for request in gate_requests(warm_up.request):
        with runner.paused():
            eager = engine.predict(request)
        graphed = engine.predict(request)
        if not runner.on:
            return runner.off_reason
        worst, differing = compare(eager, graphed)
        if worst > settings.graph_gate or differing:
            return (f"the bucketed graphs differ from eager by |Δp| {worst:.3g} (gate {settings.graph_gate}), "
                    f"labels differing: {differing or 'none'}")
    return ""
