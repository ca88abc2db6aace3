"""The GPU check's reading of the graphs from /health: it waits until /health counts the calls it sent, says when
it could not, and the report shows the graphs beside each latency row."""
from gpucheck import graph_health, summary
from gpucheck.check import _graphs_after
from gpucheck.report import REFERENCE
from gpucheck.steps.served import graphs_of_shape
from shim.health import MODEL_CHECK_SECONDS


def graphs(replayed, eager, mode="exact", reason=""):
    return {"mode": mode, "reason": reason, "shapes_captured": 3,
            "shapes_refused": {"out_of_memory": 1, "budget": 0, "differs": 0}, "memory_bytes": 300 << 20,
            "calls_replayed": replayed, "calls_eager": eager}


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def reads(*readings):
    left = list(readings)
    return lambda: left.pop(0) if len(left) > 1 else left[0]


def test_it_waits_for_health_to_count_what_was_sent():
    clock = Clock()
    found = graph_health.after_calls(reads(graphs(10, 2), graphs(10, 2), graphs(40, 2)), 42, 60, clock.sleep, clock)
    assert found == {"graphs": graphs(40, 2), "caught_up": True} and clock.now == 2 * graph_health.POLL_SECONDS


def test_graphs_off_end_the_wait_at_once():
    clock = Clock()
    off = graphs(10, 2, "off", "replaying 289x3 failed: RuntimeError: x")
    assert graph_health.after_calls(reads(off), 100, 60, clock.sleep, clock) == {"graphs": off, "caught_up": True}
    assert clock.now == 0


def test_a_reading_that_never_counts_them_is_marked_within_a_refresh():
    clock = Clock()
    found = graph_health.after_calls(reads(graphs(10, 2)), 100, 60, clock.sleep, clock)
    assert found["caught_up"] is False and graph_health.SETTLE_SECONDS <= clock.now < graph_health.SETTLE_SECONDS + 1


def test_settling_waits_a_refresh_or_says_it_could_not():
    clock = Clock()
    assert graph_health.settled(reads(graphs(1, 0)), 60, clock.sleep)["caught_up"] is True
    assert clock.now == graph_health.SETTLE_SECONDS > MODEL_CHECK_SECONDS == graph_health.HEALTH_REFRESH_SECONDS
    assert graph_health.settled(reads(graphs(1, 0)), 2, clock.sleep)["caught_up"] is False


def test_graphs_off_are_read_at_once():
    clock = Clock()
    off = graphs(0, 0, "off", "the attention runs 'eager', not sdpa")
    assert graph_health.current(reads(off), 60, clock.sleep) == {"graphs": off, "caught_up": True} and clock.now == 0
    assert graph_health.current(reads(graphs(5, 0)), 60, clock.sleep)["caught_up"] and clock.now > 0


def test_a_shapes_calls_are_those_between_its_readings():
    shape, after = graphs_of_shape(reads(graphs(142, 7)), graphs(100, 4), 45, 60)
    assert shape == {"replayed": 42, "eager": 3, "mode": "exact", "caught_up": True} and after == graphs(142, 7)


def test_the_report_shows_the_graphs_beside_each_latency_row_and_after_each_step():
    steps = {
        "shapes": {"data": {"shapes": {"anchor": {"title": "anchor", "tokens": [289], "timed": True}}}},
        "service": {"data": {"shapes": {"anchor": {
            "client": {"p50": 30.0}, "graphs": {"replayed": 45, "eager": 0, "mode": "exact", "caught_up": True}}},
            "graphs_after": {"graphs": graphs(45, 0), "caught_up": True}}},
        "acceptance": {"data": {"graphs_after": {"graphs": graphs(90, 6, "off", "replaying 364x5 failed: x"),
                                                 "caught_up": False}}},
    }
    facts = {f"cuda_graphs_after_{name}": _graphs_after(steps[name]["data"]) for name in ("service", "acceptance")}
    assert facts["cuda_graphs_after_service"] == ("exact; 3 shapes captured, refused: 1 out_of_memory; 300 MiB; "
                                                  "45 calls replayed, 0 eager")
    assert facts["cuda_graphs_after_acceptance"].startswith("off (replaying 364x5 failed: x); ")
    assert facts["cuda_graphs_after_acceptance"].endswith("(not every call counted yet)")
    assert _graphs_after({}) is None
    markdown = summary.render_markdown({"mode": "gpu", "result": "pass", "started": "t", "wall_seconds": 1,
                                        "deadline_seconds": 525,
                                        "steps": [{"name": name, "status": "pass", "seconds": 1.0, "detail": "",
                                                   "data": step["data"]} for name, step in steps.items()],
                                        "reference": REFERENCE, "facts": facts})
    assert "| 45 / 0 (exact) |" in markdown
    assert f"after the service, {facts['cuda_graphs_after_service']}; after the acceptance, " in markdown
    assert summary.served_cell({"replayed": 3, "eager": 1, "mode": "exact", "caught_up": False}) == "3 / 1 (exact) ?"
