"""The synthetic checkpoint: the full-size configuration (computed, never built) and a scaled-down build of the same
structure, checked for layout, configuration, shard index, dtype and that the fixture's DecisionEngine runs on it."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fixture_checkpoint import build as fixture  # noqa: E402
from fixture_checkpoint import synthetic  # noqa: E402

REPO_DIR = "models--internlm--Intern-Decision-4B"
SNAPSHOT_FILES = {
    "config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json",
    "tokenizer_config.json", "chat_template.jinja", "preprocessor_config.json", "video_preprocessor_config.json",
    "processor_config.json", "inference.py",
}
PUBLISHED_4B_PARAMETERS = 4_539_265_536  # Intern-Decision-4B's safetensors metadata
REQUEST = {
    "state": "The customer was charged twice and asks for the extra payment back.",
    "questions": {
        "team": {"type": "choice", "instructions": "Which team should handle this request?",
                 "criteria": {"billing": "Payments and refunds", "delivery": "Shipping and delivery"}},
        "urgency": {"type": "score", "instructions": "Rate the priority.", "criteria": ["Low", "Medium", "High"]},
        "refund_requested": {"type": "noul", "instructions": "Is the customer asking for a refund?"},
    },
}
SMALL_SHARD_BYTES = 256 << 10  # several shards even at tiny size


def placeholder_ids() -> dict:
    return {content: 300 + index for index, (content, _) in enumerate(fixture.ADDED_TOKENS)}


def test_full_size_config_has_the_4b_shapes():
    config = synthetic.make_config("full", placeholder_ids())
    text, vision = config.text_config, config.vision_config
    assert (text.hidden_size, text.num_hidden_layers, text.intermediate_size) == (2560, 32, 9216)
    assert (text.num_attention_heads, text.num_key_value_heads, text.head_dim) == (16, 4, 256)
    assert text.vocab_size == 248320
    assert text.layer_types == ["linear_attention"] * 3 + ["full_attention"] + (
        ["linear_attention"] * 3 + ["full_attention"]) * 7
    assert [i for i, kind in enumerate(text.layer_types) if kind == "full_attention"] == list(range(3, 32, 4))
    assert config.tie_word_embeddings and text.tie_word_embeddings
    assert (vision.depth, vision.hidden_size, vision.out_hidden_size) == (24, 1024, 2560)
    assert sum(text.rope_parameters["mrope_section"]) == text.head_dim * 0.25 / 2
    assert config.dtype == "bfloat16"


def test_full_size_parameter_count_is_that_of_a_4b_model():
    config = synthetic.make_config("full", placeholder_ids())
    count = synthetic.parameter_count(config)
    assert 4.0e9 <= count <= 5.0e9
    assert count == PUBLISHED_4B_PARAMETERS
    plan = synthetic.tensor_plan(config)
    assert sum(spec.nbytes for spec in plan) == 2 * count  # every tensor once, in bf16
    assert "lm_head.weight" not in {spec.name for spec in plan}  # tied: stored once, as the embeddings
    shards = synthetic.pack_shards(plan, 1 << 30)
    assert all(sum(s.nbytes for s in shard) <= 1 << 30 or len(shard) == 1 for shard in shards)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-cache")
    info = synthetic.build_synthetic(root, size="small", workers=2, max_shard_bytes=SMALL_SHARD_BYTES)
    info["root"] = root
    return info


@pytest.fixture(scope="module")
def snapshot(built) -> Path:
    return Path(built["checkpoint"])


@pytest.fixture(scope="module")
def index(snapshot) -> dict:
    return json.loads((snapshot / "model.safetensors.index.json").read_text())


def test_snapshot_layout_is_the_hub_cache_layout(built, snapshot):
    assert snapshot.parent == built["root"] / REPO_DIR / "snapshots"
    assert snapshot.name == built["revision"] == fixture.content_revision(snapshot)
    assert (built["root"] / REPO_DIR / "refs" / "main").read_text() == built["revision"]
    shards = {p.name for p in snapshot.iterdir() if p.name.endswith(".safetensors")}
    assert built["shards"] >= 3
    assert shards == {f"model-{i:05d}-of-{built['shards']:05d}.safetensors" for i in range(1, built["shards"] + 1)}
    assert {p.name for p in snapshot.iterdir()} == SNAPSHOT_FILES | shards
    assert (snapshot / "inference.py").read_bytes() == fixture.INFERENCE_SOURCE.read_bytes()


def test_config_keeps_the_structure_at_small_size(snapshot):
    config = json.loads((snapshot / "config.json").read_text())
    tokenizer = json.loads((snapshot / "tokenizer.json").read_text())
    added = {token["content"]: token["id"] for token in tokenizer["added_tokens"]}
    text = config["text_config"]
    assert config["model_type"] == "qwen3_5" and config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert config["dtype"] == "bfloat16"
    assert config["tie_word_embeddings"] is True and text["tie_word_embeddings"] is True
    assert text["layer_types"] == (["linear_attention"] * 3 + ["full_attention"]) * 2
    assert config["vision_config"]["depth"] == 2
    assert config["vision_config"]["out_hidden_size"] == text["hidden_size"]
    assert config["image_token_id"] == added["<|image_pad|>"]
    assert config["vision_start_token_id"] == added["<|vision_start|>"]
    assert text["eos_token_id"] == added["<|im_end|>"]
    assert max(added.values()) < text["vocab_size"]


def test_index_covers_every_tensor_once_in_bf16(snapshot, index):
    from safetensors import safe_open

    config = synthetic.make_config("small", _ids(snapshot))
    expected = {spec.name for spec in synthetic.tensor_plan(config)}
    stored, total = {}, 0
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(str(snapshot / shard), framework="pt") as handle:
            for name in handle.keys():
                tensor = handle.get_tensor(name)
                assert tensor.dtype == torch.bfloat16, name
                assert name not in stored, f"{name} is in two shards"
                stored[name] = shard
                total += tensor.numel() * tensor.element_size()
    assert stored == index["weight_map"]
    assert set(stored) == expected
    assert index["metadata"]["total_size"] == total


def test_loads_with_every_weight_and_the_embeddings_tied(snapshot):
    from transformers import Qwen3_5ForConditionalGeneration

    model, info = Qwen3_5ForConditionalGeneration.from_pretrained(
        str(snapshot), dtype=torch.bfloat16, local_files_only=True, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.lm_head.weight.data_ptr() == model.model.language_model.embed_tokens.weight.data_ptr()
    assert model.model.visual is not None


def test_initialisation_follows_the_model_class(snapshot):
    """Where Hugging Face's own init gives a constant tensor, the synthetic one is that tensor; matrices are
    normal(0, initializer_range)."""
    from safetensors import safe_open
    from transformers import Qwen3_5ForConditionalGeneration

    config = synthetic.make_config("small", _ids(snapshot))
    torch.manual_seed(0)
    reference = Qwen3_5ForConditionalGeneration(config).state_dict()
    plan = {spec.name: spec for spec in synthetic.tensor_plan(config)}
    index = json.loads((snapshot / "model.safetensors.index.json").read_text())["weight_map"]
    for name, shard in index.items():
        with safe_open(str(snapshot / shard), framework="pt") as handle:
            ours = handle.get_tensor(name).float()
        theirs = reference[name].float()
        assert ours.shape == theirs.shape, name
        if bool((theirs == theirs.flatten()[0]).all()):
            assert torch.equal(ours, theirs.to(torch.bfloat16).float()), name
        elif plan[name].init == "normal" and ours.numel() >= 4096:
            assert abs(ours.std().item() - 0.02) < 0.002, name
            assert abs(ours.mean().item()) < 0.002, name


def test_bytes_do_not_depend_on_the_number_of_workers(built, tmp_path):
    again = synthetic.build_synthetic(tmp_path, size="small", workers=1, max_shard_bytes=SMALL_SHARD_BYTES)
    assert again["revision"] == built["revision"]


@pytest.fixture(scope="module")
def engine(snapshot):
    spec = importlib.util.spec_from_file_location("synthetic_checkpoint_inference_under_test",
                                                  snapshot / "inference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.DecisionEngine(checkpoint=str(snapshot), device="cpu", dtype="float32")


def test_the_fixture_engine_answers(engine):
    result = engine.predict(REQUEST)
    assert list(result["answers"]) == ["team", "urgency", "refund_requested"]
    for answer in result["answers"].values():
        assert abs(sum(answer["probabilities"].values()) - 1) < 1e-6
    assert result["usage"]["decision_count"] == 3


def test_the_anchor_prompt_fits_its_real_token_count(engine):
    """The real tokenizer makes this request (the published anchor) 289 tokens; the synthetic one counts close to
    it, and leaves room to fill any prompt of the anchor's shape up to it."""
    tokens = engine.predict(REQUEST)["usage"]["input_tokens"]
    assert abs(tokens - 289) <= 10
    bare = engine.predict({**REQUEST, "state": ""})["usage"]["input_tokens"]
    assert bare < 289


def _ids(snapshot: Path) -> dict:
    tokenizer = json.loads((snapshot / "tokenizer.json").read_text())
    return {token["content"]: token["id"] for token in tokenizer["added_tokens"]}
