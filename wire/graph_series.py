"""The CUDA graphs' live series on Triton's metrics port: the model publishes them (intern_decision_model/metrics.py)
and the shim's /health reads them (shim/port/graph_series.py)."""
from __future__ import annotations

MODE_METRIC = "intern_decision_cuda_graphs"  # {mode, reason}: 1 for how the forward runs now
SHAPES_METRIC = "intern_decision_graph_shapes"  # {state}: CAPTURED, or REFUSED_PREFIX + why
MEMORY_METRIC = "intern_decision_graph_memory_bytes"
CALLS_METRIC = "intern_decision_graph_calls_total"  # {path}: replayed, eager
CAPTURED = "captured"
REFUSED_PREFIX = "refused_"
