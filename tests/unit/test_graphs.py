"""The graph runner beneath predict(), on the fixture checkpoint's real forward, with a capture that records in Python.

FakeCapture keeps the contract of a CUDA graph that matters here: the recorded function reads the static buffers
and replay() writes into the same output tensors. What only a card can show (bit-identity of real replays, the
time saved) is the GPU check's.
"""
import contextlib
import importlib.util
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from intern_decision_model import graphs
from intern_decision_model.checkpoint import StartupRefused
from intern_decision_model.engine import WARMUP_REQUEST, scored_part
from intern_decision_model.graph_start import GATE_QUESTIONS, WarmUp, compare, start_graphs
from intern_decision_model.graphs import (
    BUCKETED,
    BUDGET,
    DIFFERS,
    EXACT,
    MAX_POSITIONS,
    OUT_OF_MEMORY,
    GraphRunner,
    Shape,
)
from intern_decision_model.settings import DEFAULT_GRAPH_BUCKETS, Settings

from ..tools import REPO_ROOT

MIB = 1 << 20


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    builder = _load(REPO_ROOT / "fixture_checkpoint" / "build.py", "fixture_build_for_graphs")
    snapshot = Path(builder.build(tmp_path_factory.mktemp("hf"))["checkpoint"])
    inference = _load(snapshot / "inference.py", "fixture_inference_for_graphs")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield inference.DecisionEngine(checkpoint=str(snapshot), device="cpu", dtype="float32")
    torch.set_num_threads(before)


class FakeRecorded:
    def __init__(self, run):
        self._run = run
        self.output = run()

    def replay(self):
        self.output.logits.copy_(self._run().logits)


class FakeCapture:
    """Records by running once; each record holds `grows` bytes more; `fails` raises instead (at every record, or at
    the records numbered in `fails_at`, from 1)."""

    def __init__(self, grows=0, fails=None, fails_at=None):
        self.grows, self.fails, self.fails_at = grows, fails, fails_at
        self.reserved, self.recorded, self.tried = 0, 0, 0

    def record(self, run):
        self.tried += 1
        if self.fails is not None and (self.fails_at is None or self.tried in self.fails_at):
            raise self.fails
        self.reserved += self.grows
        self.recorded += 1
        return FakeRecorded(run)

    def reserved_bytes(self):
        return self.reserved


@pytest.fixture
def runner_for(engine):
    made = []

    def make(mode=EXACT, capture=None, budget=1 << 30, buckets=(64, 128, 256, 512, 1024), **kwargs):
        runner = GraphRunner(torch, engine.backend.model, capture or FakeCapture(), mode, budget, buckets, **kwargs)
        made.append(runner.install())
        return runner

    yield make
    for runner in made:
        runner.uninstall()


def request_with(questions: int, words: int = 1) -> dict:
    names = list(GATE_QUESTIONS)
    return {"state": {"note": " ".join(["refund"] * words)},
            "questions": {f"{names[i % 3]}{i}": GATE_QUESTIONS[names[i % 3]] for i in range(questions)}}


def shapes_of(engine, runner, requests):
    """The shapes these requests' forwards have, read by running them eager under a runner with no graph yet."""
    runner.uncovered.clear()
    for request in requests:
        engine.predict(request)
    return list(runner.uncovered)


def test_exact_graphs_answer_bit_for_bit_as_eager(engine, runner_for):
    requests = [request_with(n) for n in (1, 3, 16)]
    eager = [engine.predict(request) for request in requests]
    runner = runner_for(EXACT)
    runner.prepare(shapes_of(engine, runner, requests))
    for _ in range(3):
        graphed = [engine.predict(request) for request in requests]
        assert [scored_part(answer) for answer in graphed] == [scored_part(answer) for answer in eager]
    assert runner.calls == Counter(eager=3, captured=3, replayed=9)


def test_a_shape_without_a_graph_runs_eager_and_is_never_captured_on_the_serving_path(engine, runner_for):
    capture = FakeCapture()
    runner = runner_for(EXACT, capture=capture)
    for _ in range(3):
        engine.predict(request_with(2))
        engine.predict(request_with(2, words=5))
        engine.predict(request_with(3, words=5))  # another count of positions is another shape
    assert runner.graphs == {} and capture.tried == 0
    assert sorted(runner.uncovered.values()) == [3, 3, 3] and len({shape.positions for shape in runner.uncovered}) == 2
    assert runner.calls == Counter(eager=9)


def test_start_up_shapes_are_captured_at_once_and_replay_from_the_first_call(engine, runner_for):
    eager = engine.predict(WARMUP_REQUEST)
    runner = runner_for(EXACT)
    (shape,) = shapes_of(engine, runner, [WARMUP_REQUEST])
    runner.uninstall()
    runner = runner_for(EXACT)
    runner.prepare([shape, Shape(40, 2)])
    assert scored_part(engine.predict(WARMUP_REQUEST)) == scored_part(eager)
    assert runner.calls == Counter(captured=2, replayed=1)


def test_shapes_are_captured_largest_first(engine, runner_for, monkeypatch):
    order = []
    proving = GraphRunner._replay_against_eager
    monkeypatch.setattr(GraphRunner, "_replay_against_eager", lambda self, graph: order.append(graph.shape)
                        or proving(self, graph))
    runner_for(EXACT).prepare([Shape(12, 1), Shape(40, 2), Shape(40, 1), Shape(9, 3)])
    assert order == [Shape(40, 2), Shape(40, 1), Shape(12, 1), Shape(9, 3)]


def test_captures_stop_at_the_budget_and_each_shape_over_it_is_refused(engine, runner_for):
    runner = runner_for(EXACT, capture=FakeCapture(grows=300 * MIB), budget=512 * MIB)
    runner.prepare([Shape(30, 1), Shape(20, 1), Shape(10, 1)])
    assert sorted(runner.graphs) == [Shape(20, 1), Shape(30, 1)] and runner.memory_bytes == 600 * MIB
    assert runner.refused == {Shape(10, 1): BUDGET}


def test_a_failed_capture_turns_every_graph_off_and_the_call_runs_eager(engine, runner_for):
    eager = engine.predict(request_with(2))
    runner = runner_for(EXACT, capture=FakeCapture(fails=RuntimeError("operation not permitted when capturing")))
    runner.prepare([Shape(40, 2), Shape(12, 1)])
    for _ in range(3):
        assert scored_part(engine.predict(request_with(2))) == scored_part(eager)
    assert not runner.on and "capturing 40x2" in runner.off_reason and "not permitted" in runner.off_reason
    assert "forward" not in engine.backend.model.__dict__  # uninstalled: predict() calls the model's own forward


def test_a_capture_out_of_memory_refuses_that_shape_alone(engine, runner_for):
    requests = [request_with(1), request_with(2, words=9)]
    eager = [engine.predict(request) for request in requests]
    capture = FakeCapture(fails=torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                          fails_at={1})  # the first capture: the largest shape
    runner = runner_for(EXACT, capture=capture)
    small, large = sorted(shapes_of(engine, runner, requests))
    runner.prepare([small, large])
    assert runner.on and runner.refused == {large: OUT_OF_MEMORY} and list(runner.graphs) == [small]
    runner.calls.clear()
    assert [scored_part(engine.predict(request)) for request in requests] == [scored_part(e) for e in eager]
    assert runner.calls == Counter(replayed=1, eager=1)


class SkewedCapture(FakeCapture):
    """Replays logits off: what a graph that does not replay eager's kernels could give."""

    def record(self, run):
        recorded = super().record(run)
        replay = recorded.replay

        def skewed():
            replay()
            recorded.output.logits[..., ::2] += 3.0

        recorded.replay = skewed
        return recorded


class StaleCapture(FakeCapture):
    """Replays nothing: the output keeps what the recording computed, whatever the inputs."""

    def record(self, run):
        recorded = super().record(run)
        recorded.replay = lambda: None
        return recorded


@pytest.mark.parametrize("capture", [SkewedCapture, StaleCapture])
def test_a_graph_whose_replay_differs_from_eager_is_never_served(engine, runner_for, capture):
    eager = engine.predict(request_with(2))
    runner = runner_for(EXACT, capture=capture())
    (shape,) = shapes_of(engine, runner, [request_with(2)])
    runner.prepare([shape, Shape(12, 1)])
    assert runner.on and runner.refused == {shape: DIFFERS, Shape(12, 1): DIFFERS} and runner.graphs == {}
    runner.calls.clear()
    for _ in range(3):
        assert scored_part(engine.predict(request_with(2))) == scored_part(eager)
    assert runner.calls == Counter(eager=3)


def test_a_replay_that_fails_while_serving_turns_the_graphs_off_and_the_call_is_answered_eager(engine, runner_for):
    eager = engine.predict(request_with(2))
    runner = runner_for(EXACT)
    runner.prepare(shapes_of(engine, runner, [request_with(2)]))
    (graph,) = runner.graphs.values()

    def broken():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    graph._recorded.replay = broken
    assert scored_part(engine.predict(request_with(2))) == scored_part(eager)
    assert not runner.on and runner.off_reason.startswith("replaying ") and "illegal memory" in runner.off_reason
    assert "forward" not in engine.backend.model.__dict__


def test_the_facts_say_live_what_the_graphs_do(engine, runner_for):
    capture = FakeCapture(grows=5 * MIB, fails=torch.cuda.OutOfMemoryError("CUDA out of memory"), fails_at={1})
    runner = runner_for(EXACT, capture=capture)
    (shape,) = shapes_of(engine, runner, [request_with(1)])
    runner.prepare([Shape(shape.length + 50, 1), shape])
    engine.predict(request_with(1))
    engine.predict(request_with(3))
    facts = runner.facts()
    assert (facts.mode, facts.reason, facts.captured) == ("exact", "", (shape,))
    assert facts.refused == {Shape(shape.length + 50, 1): OUT_OF_MEMORY} and facts.memory_bytes == 5 * MIB
    assert (facts.replayed, facts.eager) == (1, 2)  # the shapes' first look, then one replayed and one uncaptured
    assert facts.refused_by_kind() == {OUT_OF_MEMORY: 1, BUDGET: 0, DIFFERS: 0}
    runner.turn_off("the engine closed")
    assert (runner.facts().mode, runner.facts().reason, runner.facts().captured) == ("off", "the engine closed", ())


def test_calls_the_graphs_do_not_cover_run_eager(engine, runner_for):
    runner = runner_for(EXACT)
    model = engine.backend.model
    ids = engine.tokenizer("a state of twelve or so tokens for the model to read", return_tensors="pt")["input_ids"]
    positions = torch.tensor([ids.shape[1] - 1])
    padded = torch.ones_like(ids)
    padded[0, 0] = 0
    uncovered = [
        dict(input_ids=ids, use_cache=False, logits_to_keep=positions, attention_mask=padded),  # padding
        dict(input_ids=ids, use_cache=True, logits_to_keep=positions),  # a cache
        dict(input_ids=ids, use_cache=False, logits_to_keep=1),  # not positions
        dict(input_ids=ids.repeat(2, 1), use_cache=False, logits_to_keep=positions),  # two rows
        dict(input_ids=ids, use_cache=False, logits_to_keep=torch.arange(MAX_POSITIONS + 1)),  # too many
        dict(input_ids=ids, use_cache=False, logits_to_keep=positions, output_hidden_states=True),  # another keyword
    ]
    with torch.inference_mode():
        for _ in range(2):
            for kwargs in uncovered:
                model(**kwargs)
    assert runner.graphs == {} and runner.uncovered == {} and runner.calls == Counter(eager=12)
    model(input_ids=ids, use_cache=False, logits_to_keep=positions)  # with autograd on: eager too
    assert runner.calls == Counter(eager=13)


def test_a_forward_under_no_grad_replays_as_under_inference_mode(engine, runner_for):
    model = engine.backend.model
    ids = engine.tokenizer("a state of a dozen tokens or so, to be read", return_tensors="pt")["input_ids"]
    kwargs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False,
                  logits_to_keep=torch.tensor([2, ids.shape[1] - 1]))
    with torch.inference_mode():
        eager = model(**kwargs).logits
    runner = runner_for(EXACT)
    runner.prepare([Shape(ids.shape[1], 2)])
    with torch.no_grad():
        first = model(**kwargs).logits
    with torch.inference_mode():
        second = model(**kwargs).logits
    assert runner.calls == Counter(captured=1, replayed=2)
    assert torch.equal(first, eager) and torch.equal(second, eager)


def test_paused_runs_eager(engine, runner_for):
    runner = runner_for(EXACT)
    runner.prepare([Shape(10, 1)])
    with runner.paused():
        engine.predict(request_with(1))
    assert runner.calls == Counter(captured=1, eager=1)


def spy_on_attention(monkeypatch):
    seen = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append((kwargs.get("attn_mask") is None, kwargs.get("is_causal")))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return seen


def while_capturing(monkeypatch):
    """What transformers sees while a CUDA stream captures: is_tracing() is true."""
    from transformers.utils import import_utils
    monkeypatch.setattr(import_utils, "is_cuda_stream_capturing", lambda: True)


def test_capture_records_eagers_causal_attention_not_an_explicit_mask(engine, runner_for, monkeypatch):
    model = engine.backend.model
    ids = engine.tokenizer("a state to read", return_tensors="pt")["input_ids"]
    positions = torch.tensor([ids.shape[1] - 1])
    seen = spy_on_attention(monkeypatch)
    with torch.inference_mode():
        eager = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False, logits_to_keep=positions)
    assert seen and set(seen) == {(True, True)}  # eager: no mask, SDPA's causal path
    seen.clear()
    while_capturing(monkeypatch)
    with torch.inference_mode():
        naive = model(input_ids=ids, attention_mask=None, use_cache=False, logits_to_keep=positions)
    assert seen and all(given is False for given, _ in seen)  # a naive capture records an explicit mask
    recorded = []

    class WatchedCapture(FakeCapture):
        def record(self, run):
            seen.clear()
            made = super().record(run)
            recorded.extend(seen)
            return made

    runner = runner_for(EXACT, capture=WatchedCapture())
    runner.prepare([Shape(ids.shape[1], 1)])
    assert recorded and set(recorded) == {(True, True)}
    assert naive.logits.shape == eager.logits.shape
    with torch.inference_mode():
        replayed = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False, logits_to_keep=positions)
    assert runner.calls["replayed"] == 1 and torch.equal(replayed.logits, eager.logits)


def test_masks_are_restored_after_capture(engine, runner_for):
    (module,) = graphs.masking_modules(engine.backend.model)
    builders = [getattr(module, name) for name in graphs.MASK_BUILDERS]
    runner_for(EXACT).prepare([Shape(12, 1)])
    assert [getattr(module, name) for name in graphs.MASK_BUILDERS] == builders


def test_right_padding_and_slicing_leave_the_logits_of_the_unpadded_forward(engine):
    model = engine.backend.model
    text = "a state of some length, " * 6
    ids = engine.tokenizer(text, return_tensors="pt")["input_ids"]
    positions = torch.tensor([3, ids.shape[1] // 2, ids.shape[1] - 1])
    padded = torch.cat([ids, torch.zeros((1, 128 - ids.shape[1]), dtype=ids.dtype)], dim=1)
    repeated = torch.cat([positions, positions[-1:].expand(MAX_POSITIONS - 3)])
    with torch.inference_mode():
        unpadded = model(input_ids=ids, use_cache=False, logits_to_keep=positions).logits
        sliced = model(input_ids=padded, use_cache=False, logits_to_keep=repeated).logits[:, :3]
    assert sliced.shape == unpadded.shape
    torch.testing.assert_close(sliced, unpadded, rtol=1e-5, atol=1e-5)
    assert torch.equal(sliced.argmax(-1), unpadded.argmax(-1))


def test_bucketed_graphs_answer_within_the_gate_with_the_same_labels(engine, runner_for):
    requests = [request_with(n, words=w) for n, w in ((1, 1), (3, 20), (16, 3))]
    eager = [engine.predict(request) for request in requests]
    runner = runner_for(BUCKETED, buckets=(256, 1024, 4096))
    runner.prepare([Shape(bucket, MAX_POSITIONS) for bucket in runner.buckets])
    graphed = [engine.predict(request) for request in requests]
    assert runner.calls == Counter(captured=3, replayed=3)
    for before, after in zip(eager, graphed):
        worst, differing = compare(before, after)
        assert worst < 1e-5 and differing == []
        assert after["usage"] == before["usage"]


def test_bucketed_inputs_longer_than_every_bucket_run_eager(engine, runner_for):
    runner = runner_for(BUCKETED, buckets=(32,))
    engine.predict(request_with(3, words=50))
    engine.predict(request_with(3, words=50))
    assert runner.calls == Counter(eager=2) and runner.graphs == {}


@pytest.mark.parametrize("text", ["", "12", "x3", "12x0", f"12x{MAX_POSITIONS + 1}", "0x1", "12x3x4"])
def test_a_shape_is_length_x_positions(text):
    with pytest.raises(ValueError, match="LENGTHxPOSITIONS"):
        Shape.parse(text)


def test_shapes_read_and_print_alike():
    assert str(Shape.parse(" 289x3")) == "289x3" and Shape.parse("1162x16") == Shape(1162, 16)


def test_buckets_needed_stop_at_the_first_that_holds_max_tokens():
    assert graphs.buckets_needed((4096, 256, 1024, 8192), 3000) == [256, 1024, 4096]
    assert graphs.buckets_needed((256, 512), 8192) == [256, 512]


def start(engine, mode, capture, scored=scored_part, **env):
    values = {"INTERN_DECISION_CUDA_GRAPHS": mode, **{f"INTERN_DECISION_{k.upper()}": v for k, v in env.items()}}
    settings = Settings.from_env(values)
    warm_up = WarmUp(WARMUP_REQUEST, engine.predict(WARMUP_REQUEST))
    state = start_graphs(torch, engine, settings, "cuda:0", warm_up, scored, capture_for=lambda torch_, device: capture)
    return state


@pytest.fixture
def started(engine):
    states = []
    yield states
    for state in states:
        if state.runner is not None:
            state.runner.uninstall()


@pytest.mark.parametrize("mode", ["auto", "exact"])
def test_exact_start_up_captures_the_warm_up_and_checks_it_bit_for_bit(engine, started, mode):
    state = start(engine, mode, FakeCapture(), graph_shapes="30x2")
    started.append(state)
    assert (state.mode, state.reason) == ("exact", "")
    assert Shape(30, 2) in state.runner.graphs and len(state.runner.graphs) == 2


def test_auto_serves_eager_with_the_reason_when_the_replay_differs(engine, started):
    state = start(engine, "auto", SkewedCapture())
    started.append(state)
    assert (state.mode, state.runner) == ("off", None)
    assert state.reason == "the warm-up replayed from its graph differs from eager"
    assert "forward" not in engine.backend.model.__dict__


@pytest.mark.parametrize("mode", ["exact", "bucketed"])
def test_an_explicit_mode_that_fails_its_check_refuses_to_start(engine, mode):
    with pytest.raises(StartupRefused, match=f"graph check failed: .*differ.*CUDA_GRAPHS={mode}"):
        start(engine, mode, SkewedCapture(), graph_buckets="512,2048")
    assert "forward" not in engine.backend.model.__dict__


def test_bucketed_start_up_captures_the_buckets_and_passes_its_gate(engine, started):
    state = start(engine, "bucketed", FakeCapture(), graph_buckets="512,2048,4096", max_tokens="1000")
    started.append(state)
    assert (state.mode, state.reason) == ("bucketed", "")
    assert sorted(state.runner.graphs) == [Shape(512, MAX_POSITIONS), Shape(2048, MAX_POSITIONS)]


def test_a_failed_capture_at_start_up_is_the_reason_auto_serves_eager(engine, started):
    state = start(engine, "auto", FakeCapture(fails=RuntimeError("operation not permitted when stream is capturing")))
    assert state.mode == "off" and state.reason.startswith("capturing ") and "not permitted" in state.reason


def test_exact_start_up_captures_every_shape_largest_first_before_serving(engine, started, monkeypatch):
    order = []
    proving = GraphRunner._replay_against_eager
    monkeypatch.setattr(GraphRunner, "_replay_against_eager", lambda self, graph: order.append(graph.shape)
                        or proving(self, graph))
    capture = FakeCapture()
    state = start(engine, "auto", capture, graph_shapes="30x2,500x3,12x1")
    started.append(state)
    warm_up_shape = next(shape for shape in state.runner.graphs if shape not in (Shape(30, 2), Shape(500, 3),
                                                                                 Shape(12, 1)))
    assert order == sorted([Shape(30, 2), Shape(500, 3), Shape(12, 1), warm_up_shape], reverse=True)
    assert capture.recorded == 4 and state.runner.refused == {}
    tried = capture.tried
    engine.predict(request_with(7, words=3))  # a shape never configured: eager, and no capture on the serving path
    engine.predict(request_with(7, words=3))
    assert capture.tried == tried and state.runner.facts().eager == 1 + 2


def test_a_replay_that_fails_in_the_start_up_check_serves_eager_under_auto(engine, started):
    class FailsAfterTheProof(FakeCapture):
        def record(self, run):
            recorded = super().record(run)
            replay, replays = recorded.replay, []

            def once():
                replays.append(1)
                if len(replays) > 1:
                    raise RuntimeError("CUDA error: unspecified launch failure")
                replay()

            recorded.replay = once
            return recorded

    state = start(engine, "auto", FailsAfterTheProof())
    started.append(state)
    assert (state.mode, state.runner) == ("off", None) and state.reason.startswith("replaying ")
    assert "launch failure" in state.reason and "forward" not in engine.backend.model.__dict__


def test_an_error_in_the_start_up_check_is_a_reason_to_serve_eager_never_a_failed_load(engine, started):
    def scored(result):
        raise KeyError("answers")

    state = start(engine, "auto", FakeCapture(), scored=scored)
    started.append(state)
    assert (state.mode, state.runner) == ("off", None)
    assert state.reason == "the start-up check of the graphs failed: KeyError: 'answers'"
    assert state.facts().mode == "off" and state.facts().reason == state.reason
    assert "forward" not in engine.backend.model.__dict__
    with pytest.raises(StartupRefused, match="start-up check of the graphs failed.*CUDA_GRAPHS=exact"):
        start(engine, "exact", FakeCapture(), scored=scored)


def test_graphs_on_the_cpu_are_off_unless_asked_for(engine):
    settings = Settings.from_env({})
    warm_up = WarmUp(WARMUP_REQUEST, engine.predict(WARMUP_REQUEST))
    state = start_graphs(torch, engine, settings, "cpu", warm_up, scored_part)
    assert (state.mode, state.reason, state.runner) == ("off", "", None)
    with pytest.raises(StartupRefused, match="CUDA_GRAPHS=exact needs a CUDA device"):
        start_graphs(torch, engine, Settings.from_env({"INTERN_DECISION_CUDA_GRAPHS": "exact"}), "cpu", warm_up,
                     scored_part)


def test_the_gpu_checks_graph_rounds_measure_each_mode_against_eager_alternated(engine):
    from gpucheck.graph_rounds import measure_graphs

    saved, timed = [], []

    def time_round(calls):
        runner = engine.backend.model.__dict__.get("forward")
        timed.append("eager" if runner is None or runner._paused else runner.mode)
        for request in calls:
            engine.predict(request)
        return 1.0

    shapes = {"one": [request_with(1)], "two calls": [request_with(3), request_with(16, words=4)]}
    measured = measure_graphs(torch, engine, shapes, time_round, 3, 60.0, FakeCapture, saved.append)
    assert saved and set(measured["shapes"]) == set(shapes)
    for name, modes in measured["shapes"].items():
        assert set(modes) == {"exact", "bucketed"}
        assert modes["exact"]["bit_identical"] and modes["exact"]["max_abs_dp"] == 0.0
        assert modes["bucketed"]["max_abs_dp"] < 1e-5 and modes["bucketed"]["labels_differing"] == []
        for mode in ("exact", "bucketed"):
            assert modes[mode]["predict"]["count"] == modes[mode]["eager"]["count"] == 3
    # round by round, the order flipping each round: the graphs' rounds and eager's in the same conditions
    assert timed[:6] == ["exact", "eager", "eager", "exact", "exact", "eager"]
    assert len(measured["exact"]["graphs"]) == 3 and measured["exact"]["off_reason"] == ""
    assert measured["exact"]["refused"] == {} and measured["exact"]["calls"]["replayed"] > 0
    lengths = [engine.predict(request)["usage"]["input_tokens"] for calls in shapes.values() for request in calls]
    buckets = sorted({graphs.bucket_for(length, DEFAULT_GRAPH_BUCKETS) for length in lengths})
    assert measured["bucketed"]["graphs"] == [f"{bucket}x{MAX_POSITIONS}" for bucket in buckets]
    assert "forward" not in engine.backend.model.__dict__


def test_the_gpu_checks_graph_rounds_report_a_graph_that_differs_as_refused_and_served_eager(engine):
    from gpucheck.graph_rounds import measure_graphs

    measured = measure_graphs(torch, engine, {"one": [request_with(2)]}, lambda calls: 1.0, 1, 1.0,
                              SkewedCapture, lambda result: None)
    exact = measured["shapes"]["one"]["exact"]
    assert exact["bit_identical"] and exact["max_abs_dp"] == 0.0  # never served from the graph that differs
    assert measured["exact"]["graphs"] == [] and set(measured["exact"]["refused"].values()) == {DIFFERS}


class RecordingCuda:
    """torch.cuda's capture surface, recording what the capture asks of it."""

    def __init__(self):
        self.events, self.streams, self.reserved, self.cached = [], [], 0, 0
        cuda = self

        class Stream:
            def __init__(self, device):
                cuda.streams.append(self)

            def wait_stream(self, other):
                pass

        class CUDAGraph:
            pass

        self.Stream, self.CUDAGraph = Stream, CUDAGraph
        self.default = Stream("cuda:0")
        self.streams.clear()

    def graph_pool_handle(self):
        return "pool"

    def current_stream(self, device):
        return self.default

    @contextlib.contextmanager
    def stream(self, stream):
        self.events.append(("warm-up stream", stream))
        yield

    @contextlib.contextmanager
    def graph(self, graph, pool, stream, capture_error_mode):
        self.events.append(("capture", pool, stream, capture_error_mode))
        self.cached = 0  # capture empties the allocator's cache, as torch.cuda.graph does
        yield
        self.reserved += 64 * MIB

    def synchronize(self, device):
        self.events.append("synchronize")

    def empty_cache(self):
        self.cached = 0

    def memory_reserved(self, device):
        return self.reserved + self.cached


def test_the_cuda_capture_reuses_one_stream_captures_thread_local_and_measures_without_the_cache():
    cuda = RecordingCuda()
    capture = graphs.CudaCapture(SimpleNamespace(cuda=cuda), "cuda:0")
    runs = []
    for _ in range(3):
        cuda.cached = 500 * MIB  # blocks a warm-up left cached: not the graph's
        before = capture.reserved_bytes()
        capture.record(lambda: runs.append(1))
        assert capture.reserved_bytes() - before == 64 * MIB
    (stream,) = cuda.streams
    assert [event for event in cuda.events if isinstance(event, tuple)] == \
        [("warm-up stream", stream), ("capture", "pool", stream, "thread_local")] * 3
    assert len(runs) == 3 * (graphs.CudaCapture.WARMUPS + 1)
