"""Engine startup against a fake torch and a fake checkpoint: INV-3, INV-4 (cap), INV-5, INV-7, INV-8."""
import ast
import hashlib
import json
import re
import sys
from datetime import datetime, timedelta, timezone

import pytest

from intern_decision_model.checkpoint import StartupRefused
from intern_decision_model.engine import WARMUP_REQUEST, ServingEngine
from intern_decision_model.guard import OutOfMemory
from intern_decision_model.settings import Settings

from ..tools import MODEL_VERSION_DIR
from .fake_checkpoint import REVISION, write_checkpoint
from .fake_torch import GIB, make_torch

MODEL_PY = MODEL_VERSION_DIR / "model.py"


@pytest.fixture
def torch(monkeypatch):
    fake = make_torch()
    monkeypatch.setitem(sys.modules, "torch", fake)  # the checkpoint's inference.py imports torch
    return fake


def settings_for(snapshot, sha256, **env):
    values = {"INTERN_DECISION_CHECKPOINT": str(snapshot), "INTERN_DECISION_REVISION": REVISION,
              "INTERN_DECISION_INFERENCE_SHA256": sha256, "INTERN_DECISION_ALLOW_UNPINNED": "1"}
    values.update({f"INTERN_DECISION_{key.upper()}": value for key, value in env.items()})
    return Settings.from_env(values)


def test_a_good_checkpoint_starts_and_reports_its_pins(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path)
    engine = ServingEngine.start(settings_for(snapshot, sha256, dtype="float32"), "cuda:0", torch=torch)
    assert engine.facts.revision == REVISION and engine.facts.inference_sha256 == sha256
    assert engine.facts.name == "Fake-Decision" and engine.facts.vision_tower == "removed"
    assert engine.facts.device == "cuda:0" and engine.facts.dtype == "float32"
    assert engine.facts.pinned is False
    assert ("engine constructed", "cuda:0", "float32", 8192) in torch.events
    graphs = engine.graph_facts()  # the live facts start as the start-up's
    assert (graphs.mode, graphs.reason) == (engine.facts.cuda_graphs, engine.facts.cuda_graphs_reason) == \
        ("off", "the attention runs None, not sdpa, whose causal path the graphs replay")


def test_each_start_is_a_new_model_process_with_a_boot_id_and_start_time(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path)
    before = datetime.now(timezone.utc)
    first = ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch).facts
    second = ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch).facts
    assert re.fullmatch(r"[0-9a-f]{32}", first.boot_id) and first.boot_id != second.boot_id
    started = [datetime.fromisoformat(facts.started_at) for facts in (first, second)]
    assert before - timedelta(seconds=1) <= started[0] <= started[1] <= datetime.now(timezone.utc)
    assert started[0].utcoffset() == timedelta(0)


def test_offline_mode_is_set_before_the_checkpoints_code_runs(tmp_path, torch, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    snapshot, sha256 = write_checkpoint(tmp_path)
    engine = ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)
    assert engine._module.OFFLINE_WHEN_LOADED == ("1", "1")


def test_model_py_sets_offline_mode_before_anything_else_is_imported():
    statements = [node for node in ast.parse(MODEL_PY.read_text()).body if not isinstance(node, ast.Expr)]
    sources = [ast.unparse(node) for node in statements]
    offline = [sources.index(f"os.environ['{name}'] = '1'") for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")]
    imports_before = [source for source, node in zip(sources, statements)
                      if isinstance(node, (ast.Import, ast.ImportFrom)) and statements.index(node) < max(offline)]
    assert imports_before == ["import os"]


def test_a_model_without_a_vision_tower_refuses_unless_kept(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path, has_vision=False)
    with pytest.raises(StartupRefused, match="no model.model.visual to remove"):
        ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)
    engine = ServingEngine.start(settings_for(snapshot, sha256, keep_vision="1"), "cuda:0", torch=torch)
    assert engine.facts.vision_tower == "kept"


def test_wrong_inference_hash_refuses_to_start_before_executing_the_file(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path)
    wrong = hashlib.sha256(b"another file").hexdigest()
    with pytest.raises(StartupRefused, match="inference.py hash check failed"):
        ServingEngine.start(settings_for(snapshot, wrong), "cuda:0", torch=torch)
    assert "inference.py executed" not in torch.events


@pytest.mark.parametrize("layout", ["other-revision", "not-snapshots"])
def test_checkpoint_path_that_is_not_the_pinned_snapshot_refuses_to_start(tmp_path, torch, layout):
    if layout == "other-revision":
        snapshot, sha256 = write_checkpoint(tmp_path, revision="2" * 40)
    else:
        snapshot, sha256 = write_checkpoint(tmp_path)
        moved = tmp_path / "elsewhere" / REVISION
        moved.parent.mkdir()
        snapshot.rename(moved)
        snapshot = moved
    with pytest.raises(StartupRefused, match="checkpoint path check failed"):
        ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)
    assert "inference.py executed" not in torch.events


def test_vram_cap_is_applied_before_the_engine_is_constructed(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path)
    ServingEngine.start(settings_for(snapshot, sha256, vram_cap_gib="35"), "cuda:0", torch=torch)
    names = [event[0] if isinstance(event, tuple) else event for event in torch.events]
    assert names.index("memory_fraction") < names.index("engine constructed")
    fraction_event = torch.events[names.index("memory_fraction")]
    assert fraction_event == ("memory_fraction", 35 / 140, "cuda:0")


def test_vram_cap_above_the_card_refuses(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path)
    with pytest.raises(StartupRefused, match="VRAM cap check failed"):
        ServingEngine.start(settings_for(snapshot, sha256, vram_cap_gib="141"), "cuda:0", torch=torch)


def test_no_cuda_refuses_unless_cpu_is_explicit(tmp_path, monkeypatch):
    torch = make_torch(cpu_only=True)
    monkeypatch.setitem(sys.modules, "torch", torch)
    snapshot, sha256 = write_checkpoint(tmp_path, placed_on="cpu")
    with pytest.raises(StartupRefused, match="CUDA check failed: cuda:0 was asked for"):
        ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)
    engine = ServingEngine.start(settings_for(snapshot, sha256, device="cpu"), "cpu", torch=torch)
    assert engine.memory == (0, 0, 0)


def test_card_missing_from_the_arch_list_refuses(tmp_path, monkeypatch):
    torch = make_torch(capability=(12, 0), arch_list=["sm_80", "sm_90"])
    monkeypatch.setitem(sys.modules, "torch", torch)
    snapshot, sha256 = write_checkpoint(tmp_path)
    with pytest.raises(StartupRefused, match=r"the card is sm_120 and torch was built for \['sm_80', 'sm_90'\]"):
        ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)


def test_model_not_on_cuda_refuses(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path, placed_on="cpu")
    with pytest.raises(StartupRefused, match="weights are on"):
        ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)


def test_warm_up_that_does_not_score_refuses(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path, warmup_fails=True)
    with pytest.raises(StartupRefused, match="warm-up check failed"):
        ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)


def test_vision_swap_refuses_when_the_warm_up_changes(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path, scores_depend_on_vision=True)
    with pytest.raises(StartupRefused, match="vision-tower check failed"):
        ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)


def test_keep_vision_keeps_the_tower_and_skips_the_swap(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path, scores_depend_on_vision=True)
    engine = ServingEngine.start(settings_for(snapshot, sha256, keep_vision="1"), "cuda:0", torch=torch)
    assert engine.facts.vision_tower == "kept"
    assert engine._engine.backend.model.model.visual == "original tower"


def test_removed_tower_is_a_stub_module(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path)
    engine = ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)
    stub = engine._engine.backend.model.model.visual
    assert isinstance(stub, torch.nn.Module)
    with pytest.raises(RuntimeError, match="vision tower was removed"):
        stub.forward()


def test_prompt_hash_check_refuses_on_a_token_count_mismatch(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path, token_offset=1)
    with pytest.raises(StartupRefused, match="prompt-hash check failed"):
        ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)


def test_answer_adds_the_honest_prompt_hash_and_the_facts(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path)
    engine = ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)
    request = {"state": "s", "questions": {"q": {"type": "choice", "criteria": {"a": "A", "b": "B"}}}}
    (answer,) = engine.answer_calls([request])
    rendered = "<prompt> " + json.dumps({"state": "s", "questions": request["questions"]}, sort_keys=True)
    assert answer["prompt_sha256"] == hashlib.sha256(rendered.encode()).hexdigest()
    assert answer["prompt_version"] == f"inference.py@sha256:{sha256[:16]}"
    assert answer["model_facts"]["revision"] == REVISION
    assert answer["answers"]["q"]["probabilities"] == {"a": 0.75, "b": 0.25}
    template_calls = [event for event in torch.events if isinstance(event, tuple) and event[0] == "template"]
    expected_arguments = (("add_generation_prompt", False), ("add_vision_id", True), ("enable_thinking", False),
                          ("tokenize", False))
    # the startup check's rendering uses HFBackend.encode's arguments
    assert ("template", expected_arguments) in template_calls


def test_each_call_renders_its_prompt_once_and_hashes_what_predict_rendered(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path)
    engine = ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)
    requests = [{"state": state, "questions": {"q": {"type": "choice", "criteria": {"a": "A", "b": "B"}}}}
                for state in ("s", "t", "u")]
    torch.events.clear()
    answers = list(engine.answer_calls(requests))
    # the fake predict() renders with no arguments: only its own rendering ran, one per call
    assert [event for event in torch.events if isinstance(event, tuple) and event[0] == "template"] == [
        ("template", ())] * 3
    for request, answer in zip(requests, answers):
        rendered = "<prompt> " + json.dumps(request, sort_keys=True)
        assert answer["prompt_sha256"] == hashlib.sha256(rendered.encode()).hexdigest()


def test_baseline_is_taken_after_the_warm_up_and_an_oom_is_reported(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path)
    torch.cuda.reserved = 9 * GIB
    engine = ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)
    assert engine._guard.baseline == engine.memory_baseline == 9 * GIB
    torch.events.clear()

    def out_of_memory(request):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    scorer = engine._engine.predict
    engine._engine.predict = out_of_memory
    with pytest.raises(OutOfMemory):
        list(engine.answer_calls([WARMUP_REQUEST]))
    assert [event for event in torch.events if event[0] != "template"] == ["empty_cache"]
    engine._engine.predict = scorer
    assert list(engine.answer_calls([WARMUP_REQUEST]))[0]["answers"]["q"]["decision"] == "approve"


def test_calls_answer_in_order_and_stop_at_the_first_failure(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path)
    engine = ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)
    good = {"state": "s", "questions": {"q": {"type": "choice", "criteria": {"a": "A", "b": "B"}}}}
    other = {"state": "t", "questions": {"q": {"type": "choice", "criteria": {"a": "A", "b": "B"}}}}
    hashes = [list(engine.answer_calls([request]))[0]["prompt_sha256"] for request in (good, other)]
    assert [answer["prompt_sha256"] for answer in engine.answer_calls([good, other, good])] == hashes + hashes[:1]

    scored = []
    predict = engine._engine.predict

    def second_call_fails(request):
        scored.append(request["state"])
        if len(scored) == 2:
            raise ValueError("Supply 1–16 questions.")
        return predict(request)

    engine._engine.predict = second_call_fails
    answers = engine.answer_calls([good, other, good])
    assert next(answers)["prompt_sha256"] == hashes[0]
    with pytest.raises(ValueError, match="Supply"):
        next(answers)
    assert scored == ["s", "t"]  # the third call never ran


def test_the_kernels_in_use_are_in_the_facts(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path)
    engine = ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)
    assert engine.facts.linear_attention == "fast" and engine.facts.slow_kernels_allowed is False


def test_a_cuda_model_on_the_reference_kernels_refuses_to_start(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path, fast_kernels=False)
    with pytest.raises(StartupRefused, match="kernel check failed: the linear-attention layers run the reference path"):
        ServingEngine.start(settings_for(snapshot, sha256), "cuda:0", torch=torch)
    assert "engine constructed" in [event[0] for event in torch.events if isinstance(event, tuple)]


def test_the_slow_path_serves_when_allowed_explicitly_and_says_so(tmp_path, torch):
    snapshot, sha256 = write_checkpoint(tmp_path, fast_kernels=False)
    engine = ServingEngine.start(settings_for(snapshot, sha256, allow_slow_kernels="1"), "cuda:0", torch=torch)
    assert (engine.facts.linear_attention, engine.facts.slow_kernels_allowed) == ("reference", True)


def test_the_cpu_serves_on_the_reference_kernels(tmp_path, monkeypatch):
    torch = make_torch(cpu_only=True)
    monkeypatch.setitem(sys.modules, "torch", torch)
    snapshot, sha256 = write_checkpoint(tmp_path, fast_kernels=False, placed_on="cpu")
    engine = ServingEngine.start(settings_for(snapshot, sha256, device="cpu"), "cpu", torch=torch)
    assert engine.facts.linear_attention == "reference"
