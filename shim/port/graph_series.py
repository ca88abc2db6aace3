"""The CUDA graphs' live facts for /health, read from the model's series on Triton's metrics port: what serves now,
where the model facts say what start-up chose."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from wire.graph_series import CALLS_METRIC, CAPTURED, MEMORY_METRIC, MODE_METRIC, REFUSED_PREFIX, SHAPES_METRIC


@dataclass(frozen=True)
class LiveGraphs:
    mode: str
    reason: str
    shapes_captured: int
    shapes_refused: dict[str, int]  # why -> shapes
    memory_bytes: int
    calls_replayed: int
    calls_eager: int

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def graphs_from_metrics(text: str, model_name: str) -> LiveGraphs | None:
    """None while the model publishes no graph mode."""
    mode = reason = None
    shapes: dict[str, int] = {}
    calls: dict[str, int] = {}
    memory = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("model") != model_name:
                continue
            if sample.name == MODE_METRIC and sample.value == 1:
                mode, reason = labels.get("mode", ""), labels.get("reason", "")
            elif sample.name == SHAPES_METRIC:
                shapes[labels.get("state", "")] = int(sample.value)
            elif sample.name == MEMORY_METRIC:
                memory = int(sample.value)
            elif sample.name == CALLS_METRIC:
                calls[labels.get("path", "")] = int(sample.value)
    if mode is None:
        return None
    refused = {state.removeprefix(REFUSED_PREFIX): count for state, count in shapes.items()
               if state.startswith(REFUSED_PREFIX)}
    return LiveGraphs(mode, reason, shapes.get(CAPTURED, 0), refused, memory, calls.get("replayed", 0),
                      calls.get("eager", 0))
