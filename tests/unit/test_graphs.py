"""The graph runner beneath predict(), on the fixture checkpoint's real forward, with a capture that records in Python.

FakeCapture keeps the contract of a CUDA graph that matters here: the recorded function reads the static buffers
and replay() writes into the same output tensors. What only a card can show (bit-identity of real replays, the
time saved) is the GPU check's.
"""
import importlib.util
from pathlib import Path

import pytest
import torch

from intern_decision_model import graphs
from intern_decision_model.checkpoint import StartupRefused
from intern_decision_model.engine import WARMUP_REQUEST, scored_part
from intern_decision_model.graph_start import GATE_QUESTIONS, WarmUp, compare, start_graphs
from intern_decision_model.settings import DEFAULT_GRAPH_BUCKETS, Settings
from intern_decision_model.graphs import BUCKETED, EXACT, MAX_POSITIONS, GraphRunner, Shape

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
    """Records by running once; each record holds `grows` bytes more; `fails` raises instead."""

    def __init__(self, grows=0, fails=None):
        self.grows, self.fails, self.reserved, self.recorded = grows, fails, 0, 0

    def record(self, run):
        if self.fails is not None:
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


def test_exact_graphs_answer_bit_for_bit_as_eager(engine, runner_for):
    eager = [engine.predict(request_with(n)) for n in (1, 3, 16)]
    runner = runner_for(EXACT)
    for _ in range(3):
        graphed = [engine.predict(request_with(n)) for n in (1, 3, 16)]
        assert [scored_part(answer) for answer in graphed] == [scored_part(answer) for answer in eager]
    assert runner.calls == {"eager": 3, "captured": 3, "replayed": 6}  # seen once, captured when seen again


def test_the_runner_is_keyed_by_length_and_positions_and_captures_on_the_second_sighting(engine, runner_for):
    runner = runner_for(EXACT)
    engine.predict(request_with(2))
    engine.predict(request_with(2, words=5))
    assert runner.graphs == {} and len(runner.sightings) == 2
    engine.predict(request_with(2, words=5))
    (shape,) = runner.graphs
    assert shape.positions == 2 and shape == max(runner.sightings)
    engine.predict(request_with(3, words=5))  # another count of positions is another shape
    assert len(runner.graphs) == 1 and len(runner.sightings) == 3


def test_start_up_shapes_are_captured_at_once_and_replay_from_the_first_call(engine, runner_for):
    eager = engine.predict(WARMUP_REQUEST)
    runner = runner_for(EXACT)
    runner.calls.clear()
    engine.predict(WARMUP_REQUEST)
    shape = next(iter(runner.sightings))
    runner.uninstall()
    runner = runner_for(EXACT)
    runner.prepare([shape, Shape(40, 2)])
    assert scored_part(engine.predict(WARMUP_REQUEST)) == scored_part(eager)
    assert runner.calls == {"captured": 2, "replayed": 1}


def test_captures_stop_at_the_budget(engine, runner_for):
    runner = runner_for(EXACT, capture=FakeCapture(grows=300 * MIB), budget=512 * MIB)
    for questions in (1, 2, 3):
        for _ in range(2):
            engine.predict(request_with(questions))
    assert len(runner.graphs) == 2 and runner.memory_bytes == 600 * MIB  # the budget is reached by the second
    assert runner.calls["eager"] == 4


def test_runtime_captures_grow_the_guards_baseline(engine, runner_for):
    grown = []
    runner_for(EXACT, capture=FakeCapture(grows=7 * MIB), on_growth=grown.append)
    engine.predict(request_with(1))
    engine.predict(request_with(1))
    assert grown == [7 * MIB]


def test_a_failed_capture_turns_every_graph_off_and_the_call_runs_eager(engine, runner_for):
    eager = engine.predict(request_with(2))
    runner = runner_for(EXACT, capture=FakeCapture(fails=RuntimeError("operation not permitted when capturing")))
    for _ in range(3):
        assert scored_part(engine.predict(request_with(2))) == scored_part(eager)
    assert not runner.on and "capturing" in runner.off_reason and "not permitted" in runner.off_reason
    assert "forward" not in engine.backend.model.__dict__  # uninstalled: predict() calls the model's own forward


def test_a_capture_out_of_memory_leaves_that_shape_eager_and_the_others_graphed(engine, runner_for):
    capture = FakeCapture()
    runner = runner_for(EXACT, capture=capture)
    for _ in range(2):
        engine.predict(request_with(1))
    capture.fails = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    eager = engine.predict(request_with(2))
    for _ in range(3):
        assert scored_part(engine.predict(request_with(2))) == scored_part(eager)
    assert runner.on and len(runner.refused) == 1 and len(runner.graphs) == 1
    assert runner.calls["eager"] == 1 + 4 and runner.sightings[next(iter(runner.refused))] == 2  # tried once
    engine.predict(request_with(1))
    assert runner.calls["replayed"] == 2


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
    assert runner.graphs == {} and runner.sightings == {} and runner.calls == {"eager": 12}
    model(input_ids=ids, use_cache=False, logits_to_keep=positions)  # with autograd on: eager too
    assert runner.calls == {"eager": 13}


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
    assert runner.calls == {"captured": 1, "replayed": 2}
    assert torch.equal(first, eager) and torch.equal(second, eager)


def test_paused_runs_eager(engine, runner_for):
    runner = runner_for(EXACT)
    runner.prepare([Shape(10, 1)])
    with runner.paused():
        engine.predict(request_with(1))
    assert runner.calls == {"captured": 1, "eager": 1}


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
    seen.clear()
    runner = runner_for(EXACT)
    runner.prepare([Shape(ids.shape[1], 1)])
    assert seen and set(seen) == {(True, True)}
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
    assert runner.calls == {"captured": 3, "replayed": 3}
    for before, after in zip(eager, graphed):
        worst, differing = compare(before, after)
        assert worst < 1e-5 and differing == []
        assert after["usage"] == before["usage"]


def test_bucketed_inputs_longer_than_every_bucket_run_eager(engine, runner_for):
    runner = runner_for(BUCKETED, buckets=(32,))
    engine.predict(request_with(3, words=50))
    engine.predict(request_with(3, words=50))
    assert runner.calls == {"eager": 2} and runner.graphs == {}


@pytest.mark.parametrize("text", ["", "12", "x3", "12x0", f"12x{MAX_POSITIONS + 1}", "0x1", "12x3x4"])
def test_a_shape_is_length_x_positions(text):
    with pytest.raises(ValueError, match="LENGTHxPOSITIONS"):
        Shape.parse(text)


def test_shapes_read_and_print_alike():
    assert str(Shape.parse(" 289x3")) == "289x3" and Shape.parse("1162x16") == Shape(1162, 16)


def test_buckets_needed_stop_at_the_first_that_holds_max_tokens():
    assert graphs.buckets_needed((4096, 256, 1024, 8192), 3000) == [256, 1024, 4096]
    assert graphs.buckets_needed((256, 512), 8192) == [256, 512]


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


def start(engine, mode, capture, **env):
    values = {"INTERN_DECISION_CUDA_GRAPHS": mode, **{f"INTERN_DECISION_{k.upper()}": v for k, v in env.items()}}
    settings = Settings.from_env(values)
    warm_up = WarmUp(WARMUP_REQUEST, engine.predict(WARMUP_REQUEST))
    state = start_graphs(torch, engine, settings, "cuda:0", warm_up, scored_part, lambda grown: None,
                         capture_for=lambda torch_, device: capture)
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


def test_graphs_on_the_cpu_are_off_unless_asked_for(engine):
    settings = Settings.from_env({})
    warm_up = WarmUp(WARMUP_REQUEST, engine.predict(WARMUP_REQUEST))
    state = start_graphs(torch, engine, settings, "cpu", warm_up, scored_part, lambda grown: None)
    assert (state.mode, state.reason, state.runner) == ("off", "", None)
    with pytest.raises(StartupRefused, match="CUDA_GRAPHS=exact needs a CUDA device"):
        start_graphs(torch, engine, Settings.from_env({"INTERN_DECISION_CUDA_GRAPHS": "exact"}), "cpu", warm_up,
                     scored_part, lambda grown: None)


def test_the_gpu_checks_graph_rounds_measure_each_mode_against_eager(engine):
    from gpucheck.graph_rounds import measure_graphs

    saved = []
    shapes = {"one": [request_with(1)], "two calls": [request_with(3), request_with(16, words=4)]}
    measured = measure_graphs(torch, engine, shapes, lambda calls, seconds: {"predict": {"p50": 1.0}, "calls": calls},
                              3.0, FakeCapture, saved.append)
    assert saved and set(measured["shapes"]) == set(shapes)
    for name, modes in measured["shapes"].items():
        assert set(modes) == {"eager", "exact", "bucketed"}
        assert modes["exact"]["bit_identical"] and modes["exact"]["max_abs_dp"] == 0.0
        assert modes["bucketed"]["max_abs_dp"] < 1e-5 and modes["bucketed"]["labels_differing"] == []
    assert len(measured["exact"]["graphs"]) == 3 and measured["exact"]["off_reason"] == ""
    lengths = [engine.predict(request)["usage"]["input_tokens"] for calls in shapes.values() for request in calls]
    buckets = sorted({graphs.bucket_for(length, DEFAULT_GRAPH_BUCKETS) for length in lengths})
    assert measured["bucketed"]["graphs"] == [f"{bucket}x{MAX_POSITIONS}" for bucket in buckets]
    assert "forward" not in engine.backend.model.__dict__


def test_the_gpu_checks_graph_rounds_report_a_replay_that_differs(engine):
    from gpucheck.graph_rounds import measure_graphs

    measured = measure_graphs(torch, engine, {"one": [request_with(2)]}, lambda calls, seconds: {}, 1.0,
                              SkewedCapture, lambda result: None)
    exact = measured["shapes"]["one"]["exact"]
    assert not exact["bit_identical"] and exact["max_abs_dp"] > 0.01
