"""The graphs' live facts as /health reads them from Triton's metrics port, and as the model publishes them."""
import pytest

from intern_decision_model.graphs import BUDGET, DIFFERS, OUT_OF_MEMORY, GraphFacts, Shape
from intern_decision_model.metrics import CallRecord, ModelMetrics
from shim.port.graph_series import LiveGraphs, graphs_from_metrics

from .fake_pb_utils import FACTS, FakePbUtils

# As Triton writes them: the mode no longer served stays, at 0; another model's series beside ours.
METRICS = """# HELP intern_decision_cuda_graphs 1 for how the forward runs now (mode) and why graphs are off (reason)
# TYPE intern_decision_cuda_graphs gauge
intern_decision_cuda_graphs{model="intern_decision",mode="exact",reason=""} 0
intern_decision_cuda_graphs{model="intern_decision",mode="off",reason="replaying 289x3 failed: \\"x\\""} 1
intern_decision_cuda_graphs{model="other",mode="bucketed",reason=""} 1
# TYPE intern_decision_graph_shapes gauge
intern_decision_graph_shapes{model="intern_decision",state="captured"} 0
intern_decision_graph_shapes{model="intern_decision",state="refused_out_of_memory"} 1
intern_decision_graph_shapes{model="intern_decision",state="refused_budget"} 0
intern_decision_graph_shapes{model="intern_decision",state="refused_differs"} 2
# TYPE intern_decision_graph_memory_bytes gauge
intern_decision_graph_memory_bytes{model="intern_decision"} 100663296
intern_decision_graph_memory_bytes{model="other"} 7
# TYPE intern_decision_graph_calls_total counter
intern_decision_graph_calls_total{model="intern_decision",path="replayed"} 1260
intern_decision_graph_calls_total{model="intern_decision",path="eager"} 12
"""


def test_the_mode_served_now_and_our_models_counts_are_read():
    assert graphs_from_metrics(METRICS, "intern_decision") == LiveGraphs(
        "off", 'replaying 289x3 failed: "x"', 0, {"out_of_memory": 1, "budget": 0, "differs": 2}, 96 << 20, 1260, 12)


def test_none_while_the_model_publishes_no_mode():
    assert graphs_from_metrics("# TYPE nv_inference_count counter\nnv_inference_count 1\n", "intern_decision") is None


def exposition(pb: FakePbUtils) -> str:
    """The fake pb_utils' series in Prometheus' text format, as Triton's metrics port writes them."""
    lines = []
    for metric in pb.metrics:
        labels = ",".join(f'{key}="{value}"' for key, value in metric.labels.items())
        lines.append(f"{metric.family}{{{labels}}} {metric.value}")
    return "\n".join(lines) + "\n"


def test_what_the_model_publishes_is_what_health_reads():
    pb = FakePbUtils()
    facts = GraphFacts("exact", "", (Shape(289, 3), Shape(798, 16)),
                       {Shape(3900, 16): OUT_OF_MEMORY, Shape(8192, 16): BUDGET, Shape(364, 5): DIFFERS},
                       96 << 20, 0, 0)
    metrics = ModelMetrics(pb, "intern_decision", FACTS, lambda: (0, 0, 0), read_graphs=lambda: facts)
    facts = GraphFacts(facts.mode, "", facts.captured, facts.refused, facts.memory_bytes, 7, 2)
    metrics.record([CallRecord("ok", 0.02, 289)])
    metrics.close()
    assert graphs_from_metrics(exposition(pb), "intern_decision") == LiveGraphs(
        "exact", "", 2, {"out_of_memory": 1, "budget": 1, "differs": 1}, 96 << 20, 7, 2)


@pytest.mark.anyio
async def test_unreadable_metrics_leave_the_graphs_unknown_not_the_model_down():
    from shim.port.triton import TritonModel
    from tests.unit.shim_helpers import make_settings

    model = TritonModel(make_settings())

    async def refused(*args, **kwargs):
        raise ConnectionRefusedError("refused")

    model._metrics.request = refused
    assert await model.graphs() is None
