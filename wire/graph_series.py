"""The CUDA graphs' live series on Triton's metrics port: the model publishes them and the shim's /health reads
them."""
from __future__ import annotations

MODE_METRIC = "intern_decision_cuda_graphs"
SHAPES_METRIC = "intern_decision_graph_shapes"
MEMORY_METRIC = "intern_decision_graph_memory_bytes"
CALLS_METRIC = "intern_decision_graph_calls_total"
CAPTURED = "captured"
REFUSED_PREFIX = "refused_"
