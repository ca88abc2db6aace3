"""The model's metrics against a fake pb_utils: updates are queued, applied by one thread, flushed on close."""
import pytest

from intern_decision_model.metrics import CallRecord, ModelMetrics

from .fake_pb_utils import FACTS, FakePbUtils


@pytest.fixture
def pb():
    return FakePbUtils()


def test_calls_are_counted_by_a_thread_of_their_own_and_close_flushes_them(pb):
    memory = [(10, 5, 20)]
    metrics = ModelMetrics(pb, "intern_decision", FACTS, lambda: memory[0])
    metrics.record([CallRecord("ok", 0.02, 300), CallRecord("invalid", 0.001, None)])
    metrics.record([CallRecord("ok", 0.03, 400)])
    metrics.close()
    assert pb.find("intern_decision_calls_total", outcome="ok").value == 2
    assert pb.find("intern_decision_calls_total", outcome="invalid").value == 1
    assert pb.find("intern_decision_calls_total", outcome="failed").value == 0
    assert pb.find("intern_decision_inference_seconds").observed == [0.02, 0.001, 0.03]
    assert pb.find("intern_decision_input_tokens").observed == [300, 400]
    assert [pb.find("intern_decision_gpu_memory_bytes", kind=kind).value
            for kind in ("reserved", "allocated", "peak_reserved")] == [10, 5, 20]
    assert pb.find("intern_decision_calls_total", outcome="ok").threads == {"intern-decision-metrics"}


def test_the_info_gauge_carries_the_facts_as_labels(pb):
    ModelMetrics(pb, "intern_decision", FACTS, lambda: (0, 0, 0)).close()
    info = pb.find("intern_decision_model_info")
    assert info.value == 1
    assert info.labels == {"model": "intern_decision", **FACTS.to_labels()}
    assert info.labels["vram_cap_gib"] == ""


def test_the_post_warm_up_baseline_is_a_memory_kind_set_at_startup(pb):
    metrics = ModelMetrics(pb, "intern_decision", FACTS, lambda: (12, 5, 20), lambda: 9)
    assert pb.find("intern_decision_gpu_memory_bytes", kind="baseline").value == 9
    metrics.record([CallRecord("ok", 0.01, 10)])
    metrics.close()
    assert pb.find("intern_decision_gpu_memory_bytes", kind="baseline").value == 9
    assert pb.find("intern_decision_gpu_memory_bytes", kind="reserved").value == 12


def test_a_baseline_grown_by_a_graph_captured_later_is_published_with_the_next_call(pb):
    baseline = [9]
    metrics = ModelMetrics(pb, "intern_decision", FACTS, lambda: (12, 5, 20), lambda: baseline[0])
    baseline[0] = 9 + 64
    metrics.record([CallRecord("ok", 0.01, 10)])
    metrics.close()
    assert pb.find("intern_decision_gpu_memory_bytes", kind="baseline").value == 73


def test_a_failing_update_does_not_stop_the_metrics(pb):
    reads = iter([RuntimeError("device gone"), (1, 1, 1)])

    def read_memory():
        value = next(reads)
        if isinstance(value, Exception):
            raise value
        return value

    metrics = ModelMetrics(pb, "intern_decision", FACTS, read_memory)
    metrics.record([CallRecord("ok", 0.01, 10)])
    metrics.record([CallRecord("ok", 0.01, 10)])
    metrics.close()
    assert pb.find("intern_decision_calls_total", outcome="ok").value == 2
    assert pb.find("intern_decision_gpu_memory_bytes", kind="reserved").value == 1


def test_the_graphs_facts_are_published_live_after_start_up(pb):
    from intern_decision_model.graphs import BUDGET, DIFFERS, OUT_OF_MEMORY, GraphFacts, Shape

    graphs = [GraphFacts("exact", "", (Shape(289, 3), Shape(798, 16)), {Shape(3900, 16): OUT_OF_MEMORY},
                         96 << 20, 0, 1)]
    metrics = ModelMetrics(pb, "intern_decision", FACTS, lambda: (0, 0, 0), read_graphs=lambda: graphs[0])
    assert pb.find("intern_decision_cuda_graphs", mode="exact", reason="").value == 1
    assert pb.find("intern_decision_graph_shapes", state="captured").value == 2
    assert pb.find("intern_decision_graph_shapes", state="refused_out_of_memory").value == 1
    assert pb.find("intern_decision_graph_memory_bytes").value == 96 << 20
    assert pb.find("intern_decision_graph_calls_total", path="eager").value == 1
    graphs[0] = GraphFacts("exact", "", (Shape(289, 3), Shape(798, 16)), {Shape(3900, 16): OUT_OF_MEMORY},
                           96 << 20, 5, 3)
    metrics.record([CallRecord("ok", 0.02, 289)])
    graphs[0] = GraphFacts("off", "replaying 289x3 failed: RuntimeError: x", (),
                           {Shape(3900, 16): OUT_OF_MEMORY, Shape(364, 5): DIFFERS, Shape(8192, 16): BUDGET},
                           96 << 20, 6, 4)
    metrics.record([CallRecord("ok", 0.02, 289)])
    metrics.close()
    assert pb.find("intern_decision_graph_calls_total", path="replayed").value == 6
    assert pb.find("intern_decision_graph_calls_total", path="eager").value == 4
    assert pb.find("intern_decision_cuda_graphs", mode="exact").value == 0  # the series of a mode no longer served
    assert pb.find("intern_decision_cuda_graphs", mode="off",
                   reason="replaying 289x3 failed: RuntimeError: x").value == 1
    assert [pb.find("intern_decision_graph_shapes", state=state).value
            for state in ("captured", "refused_out_of_memory", "refused_budget", "refused_differs")] == [0, 1, 1, 1]


def test_without_graphs_the_series_say_off(pb):
    ModelMetrics(pb, "intern_decision", FACTS, lambda: (0, 0, 0)).close()
    assert pb.find("intern_decision_cuda_graphs", mode="off", reason="").value == 1
    assert pb.find("intern_decision_graph_shapes", state="captured").value == 0
