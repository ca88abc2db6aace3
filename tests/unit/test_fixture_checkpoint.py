"""The tiny fixture checkpoint: a reproducible build, and an inference.py that behaves like the real checkpoint file.

The checkpoint is built once for the module (a few seconds); every number checked here comes from a real forward of
the tiny random model, recomputed independently from the model's logits.
"""
import copy
import hashlib
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE_DIR = REPO_ROOT / "fixture_checkpoint"
REPO_ID = "internlm/Intern-Decision-4B"
EN_DASH = "\u2013"
SYMBOLS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
SYSTEM_PROMPT = (
    "You are a careful decision assistant. Use the state and decision schema in the user message to make the "
    "requested decisions. For every field, choose exactly one answer symbol (e.g. A, B, C, ...) from its listed "
    "options and return one valid JSON object mapping each field name to its chosen symbol. Use the field names and "
    "symbols exactly as given. Do not include explanations, Markdown, or extra text."
)
NO_TEXT = "The answer is no (negative, or disagree with the claim)."
YES_TEXT = "The answer is yes (affirmative, or align with the claim)."

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this request?",
             "criteria": {"billing": "Payments and refunds", "delivery": "Shipping and delivery"}},
    "urgency": {"type": "score", "instructions": "Rate the priority.", "criteria": ["Low", "Medium", "High"]},
    "refund_requested": {"type": "noul", "instructions": "Is the customer asking for a refund?"},
}
REQUEST = {"state": "The customer was charged twice and asks for the extra payment back.", "questions": QUESTIONS}


def _load(path: Path, name: str):
    """Execute a file as a module (like the service does), writing no __pycache__ next to it."""
    spec = importlib.util.spec_from_loader(name, loader=None, origin=str(path))
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    sys.modules[name] = module  # dataclasses look their module up here
    exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    return module


def _files(snapshot: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(snapshot.iterdir())}


@pytest.fixture(scope="module")
def builder():
    return _load(FIXTURE_DIR / "build.py", "fixture_checkpoint_build_under_test")


@pytest.fixture(scope="module")
def built(builder, tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-cache")
    info = builder.build(root)
    info["root"] = root
    return info


@pytest.fixture(scope="module")
def snapshot(built) -> Path:
    return Path(built["checkpoint"])


@pytest.fixture(scope="module")
def inf(snapshot):
    return _load(snapshot / "inference.py", "fixture_checkpoint_inference_under_test")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # The tiny model is faster on one thread, and a busy machine cannot oversubscribe it.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _engine(inf, snapshot, **kwargs):
    kwargs.setdefault("device", "cpu")
    kwargs.setdefault("dtype", "float32")
    return inf.DecisionEngine(checkpoint=str(snapshot), **kwargs)


@pytest.fixture(scope="module")
def engine(inf, snapshot):
    return _engine(inf, snapshot)


@pytest.fixture(scope="module")
def raw_engine(inf, snapshot):
    return _engine(inf, snapshot, temperature=1)


def _render(tokenizer, messages) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False,
                                         enable_thinking=False, add_vision_id=True)


def _reference_logits(engine, inf, request):
    """Independently: render, tokenize, run a FULL forward, take the logits just before each marker."""
    compiled = inf.compile_row(inf.validate_request(request))
    tokenizer = engine.tokenizer
    ids = tokenizer(_render(tokenizer, compiled.messages), add_special_tokens=False, return_tensors="pt")
    marker = tokenizer.convert_tokens_to_ids("<decision>")
    where = (ids["input_ids"][0] == marker).nonzero().flatten()
    assert len(where) == len(compiled.fields)
    with torch.inference_mode():
        full = engine.backend.model(**ids, use_cache=False).logits[0]
    return compiled, full[where - 1], int(ids["input_ids"].shape[1])


def _expected_probabilities(engine, inf, request, temperature):
    compiled, logits, length = _reference_logits(engine, inf, request)
    expected = {}
    for row, field in enumerate(compiled.fields):
        symbol_ids = [engine.tokenizer.convert_tokens_to_ids(s) for s in compiled.symbols[field]]
        raw = torch.softmax(logits[row, symbol_ids].double(), dim=-1)
        scaled = torch.softmax(torch.log(raw) / temperature, dim=-1)
        expected[field] = scaled.tolist()
    return expected, length


# ---------------------------------------------------------------------------------------------------------------
# The build
# ---------------------------------------------------------------------------------------------------------------

def test_build_is_byte_for_byte_reproducible(builder, built, snapshot, tmp_path):
    again = builder.build(tmp_path / "second")
    assert again["revision"] == built["revision"]
    assert again["inference_sha256"] == built["inference_sha256"]
    assert _files(Path(again["checkpoint"])) == _files(snapshot)
    for info in (built, again):
        path = Path(info["checkpoint"])
        assert path.is_absolute() and path.name == info["revision"] and len(info["revision"]) == 40
        assert path.parent.parent.name == "models--internlm--Intern-Decision-4B"
        assert (path.parent.parent / "refs" / "main").read_text() == info["revision"]
        assert all((p.stat().st_mode & 0o777) == 0o644 for p in path.iterdir())
        assert sorted(os.listdir(path.parent.parent)) == ["refs", "snapshots"]  # no temporary leftovers
    assert built["inference_sha256"] == hashlib.sha256((FIXTURE_DIR / "inference.py").read_bytes()).hexdigest()
    assert _files(snapshot)["inference.py"] == (FIXTURE_DIR / "inference.py").read_bytes()
    assert set(_files(snapshot)) == {
        "config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
        "chat_template.jinja", "preprocessor_config.json", "video_preprocessor_config.json",
        "processor_config.json", "inference.py"}
    assert json.loads(_files(snapshot)["processor_config.json"]) == {"processor_class": "Qwen3_5Tokenizer"}


def test_rebuild_into_the_same_root_leaves_the_snapshot(builder, built, snapshot):
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in snapshot.iterdir()}
    again = builder.build(built["root"])
    assert again["checkpoint"] == built["checkpoint"] and again["revision"] == built["revision"]
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in snapshot.iterdir()} == before


def test_rebuild_tolerates_pycache_and_repairs_damage(builder, tmp_path):
    root = tmp_path / "hf"
    first = builder.build(root)
    snap = Path(first["checkpoint"])
    (snap / "__pycache__").mkdir()
    (snap / "__pycache__" / "inference.cpython-311.pyc").write_bytes(b"x")
    inode = (snap / "config.json").stat().st_ino
    assert builder.build(root) == first
    assert (snap / "config.json").stat().st_ino == inode  # left alone
    (snap / "config.json").write_text("{}")  # damage: same revision name, other bytes
    (snap / "tokenizer.json").chmod(0o600)
    assert builder.build(root) == first
    assert _files(snap) == _files(Path(builder.build(tmp_path / "clean")["checkpoint"]))
    assert (snap / "tokenizer.json").stat().st_mode & 0o777 == 0o644
    assert sorted(os.listdir(snap.parent.parent)) == ["refs", "snapshots"]


def test_revision_follows_the_content(builder, built, tmp_path, monkeypatch):
    changed = tmp_path / "inference.py"
    changed.write_bytes((FIXTURE_DIR / "inference.py").read_bytes() + b"\n# changed\n")
    monkeypatch.setattr(builder, "INFERENCE_SOURCE", changed)
    root = tmp_path / "hf"
    first = builder.build(root)
    assert first["revision"] != built["revision"]
    assert first["inference_sha256"] == hashlib.sha256(changed.read_bytes()).hexdigest()
    assert first["revision"] == builder.content_revision(Path(first["checkpoint"]))
    monkeypatch.setattr(builder, "INFERENCE_SOURCE", FIXTURE_DIR / "inference.py")
    second = builder.build(root)
    assert second["revision"] == built["revision"]
    refs = root / "models--internlm--Intern-Decision-4B" / "refs" / "main"
    assert refs.read_text() == built["revision"]


def test_cli_prints_one_json_line(built, tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run([sys.executable, str(FIXTURE_DIR / "build.py"), "--root", str(tmp_path / "cli")],
                          check=True, capture_output=True, text=True, env=env, cwd=str(REPO_ROOT), timeout=300)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    facts = json.loads(lines[0])
    assert list(facts) == ["checkpoint", "revision", "inference_sha256"]
    assert facts["revision"] == built["revision"]
    assert facts["inference_sha256"] == built["inference_sha256"]
    assert Path(facts["checkpoint"]) == (tmp_path / "cli").resolve() / (
        "models--internlm--Intern-Decision-4B/snapshots/" + built["revision"])


def test_snapshot_loads_offline_with_the_transformers_auto_classes(built, snapshot):
    from transformers import AutoProcessor, AutoTokenizer, Qwen3_5ForConditionalGeneration

    for source, extra in ((str(snapshot), {}), (REPO_ID, {"cache_dir": str(built["root"])})):
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True, **extra)
        assert "<decision>" in tokenizer.get_added_vocab()
        processor = AutoProcessor.from_pretrained(source, local_files_only=True, **extra)
        assert "<decision>" in processor.get_added_vocab()  # the text-only processor is a tokenizer
        model = Qwen3_5ForConditionalGeneration.from_pretrained(source, local_files_only=True, **extra)
        assert model.config.model_type == "qwen3_5"
        assert model.dtype == torch.bfloat16  # stored like the real checkpoint
        assert tokenizer.convert_tokens_to_ids("<decision>") < model.get_input_embeddings().weight.shape[0]


def test_tokenizer_has_the_decision_token_and_single_token_symbols(engine):
    tokenizer = engine.tokenizer
    marker = tokenizer.convert_tokens_to_ids("<decision>")
    assert tokenizer.get_added_vocab()["<decision>"] == marker
    assert tokenizer.encode("<decision>", add_special_tokens=False) == [marker]
    assert tokenizer.encode('"a<decision>b"', add_special_tokens=False).count(marker) == 1
    ids = [tokenizer.encode(symbol, add_special_tokens=False) for symbol in SYMBOLS]
    assert all(len(one) == 1 for one in ids)
    assert len({one[0] for one in ids}) == 62
    assert engine.backend.marker_id == marker


# ---------------------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------------------

def _q(**question):
    return {"q": question}


CHOICE = {"type": "choice", "criteria": {"a": "x"}}
VALIDATION_CASES = [
    ("not a dict", ["state"], "Supply a JSON object containing state and questions."),
    ("no state", {"questions": _q(**CHOICE)}, "Supply a JSON object containing state and questions."),
    ("images not a list", {"state": 1, "images": "a.png", "questions": _q(**CHOICE)}, f"Upload 1{EN_DASH}8 images."),
    ("nine images", {"state": 1, "images": ["a"] * 9, "questions": _q(**CHOICE)}, f"Upload 1{EN_DASH}8 images."),
    ("empty image path", {"state": 1, "images": [""], "questions": _q(**CHOICE)},
     "Images must be nonempty local file paths."),
    ("image path not a string", {"state": 1, "images": [3], "questions": _q(**CHOICE)},
     "Images must be nonempty local file paths."),
    ("no questions", {"state": 1}, f"Supply 1{EN_DASH}16 questions."),
    ("empty questions", {"state": 1, "questions": {}}, f"Supply 1{EN_DASH}16 questions."),
    ("17 questions", {"state": 1, "questions": {"q%d" % i: CHOICE for i in range(17)}},
     f"Supply 1{EN_DASH}16 questions."),
    ("empty name", {"state": 1, "questions": {"": CHOICE}}, "Question names must be nonempty strings."),
    ("bad type", {"state": 1, "questions": _q(type="rank", criteria={"a": "x"})},
     "Question type must be choice, score, or noul."),
    ("question not an object", {"state": 1, "questions": {"q": "choice"}},
     "Question type must be choice, score, or noul."),
    ("choice list", {"state": 1, "questions": _q(type="choice", criteria=["a"])}, "Choice criteria must be an object."),
    ("score string", {"state": 1, "questions": _q(type="score", criteria="0-10")},
     "Score criteria must be a list or object."),
    ("score nan key", {"state": 1, "questions": _q(type="score", criteria={"1": "a", "nan": "b"})},
     "Score option keys must be finite numbers."),
    ("score inf key", {"state": 1, "questions": _q(type="score", criteria={"inf": "b"})},
     "Score option keys must be finite numbers."),
    ("score word key", {"state": 1, "questions": _q(type="score", criteria={"x": "b"})},
     "Score option keys must be finite numbers."),
    ("no options", {"state": 1, "questions": _q(type="choice", criteria={})}, f"Supply 1{EN_DASH}62 options."),
    ("63 options", {"state": 1, "questions": _q(type="score", criteria=["x"] * 63)}, f"Supply 1{EN_DASH}62 options."),
    ("marker in state", {"state": {"note": "see <decision>"}, "questions": _q(**CHOICE)},
     "Reserved decision marker appears in input evidence"),
    ("marker in a description", {"state": 1, "questions": _q(type="choice", criteria={"a": "<decision>"})},
     "Reserved decision marker appears in input evidence"),
    ("marker in a field name", {"state": 1, "questions": {"x<decision>": CHOICE}},
     "Reserved decision marker appears in input evidence"),
    # evaluation order: images before questions, questions before options, options before the marker
    ("empty images are ignored", {"state": 1, "images": [], "questions": {}}, f"Supply 1{EN_DASH}16 questions."),
    ("images before questions", {"state": 1, "images": [""], "questions": {}},
     "Images must be nonempty local file paths."),
    ("names before types", {"state": 1, "questions": {"": {"type": "x"}}}, "Question names must be nonempty strings."),
    ("options before the marker", {"state": "<decision>", "questions": _q(type="choice", criteria={})},
     f"Supply 1{EN_DASH}62 options."),
]


@pytest.mark.parametrize("request_, message", [c[1:] for c in VALIDATION_CASES], ids=[c[0] for c in VALIDATION_CASES])
def test_validation_messages(inf, request_, message):
    with pytest.raises(ValueError) as caught:
        inf.validate_request(request_)
    assert str(caught.value) == message


def test_range_messages_use_an_en_dash(inf):
    for request_ in ({"state": 1, "images": "x", "questions": {}}, {"state": 1, "questions": {}},
                     {"state": 1, "questions": _q(type="choice", criteria={})}):
        with pytest.raises(ValueError) as caught:
            inf.validate_request(request_)
        assert EN_DASH in str(caught.value) and "-" not in str(caught.value)


def test_predict_validates_first(engine):
    with pytest.raises(ValueError, match=f"^Supply 1{EN_DASH}16 questions.$"):
        engine.predict({"state": "x", "questions": {}})


def test_validate_request_returns_a_clean_copy_and_never_mutates(inf, engine):
    request_ = {
        "state": {"items": [1, 2], "note": "n"}, "model": "other", "thinking": {"enabled": True}, "id": "r1",
        "questions": {"team": {"type": "choice", "criteria": {"a": "x", "b": "y"}, "answer": "a", "extra": 1},
                      "ok": {"type": "noul", "instructions": "Ok?", "criteria": {"Yes": "fine"}}},
    }
    frozen = copy.deepcopy(request_)
    row = inf.validate_request(request_)
    assert row == {"state": {"items": [1, 2], "note": "n"},
                   "questions": {"team": {"type": "choice", "criteria": {"a": "x", "b": "y"}},
                                 "ok": {"type": "noul", "instructions": "Ok?", "criteria": {"Yes": "fine"}}}}
    assert list(row["questions"]) == ["team", "ok"]
    row["state"]["items"].append(3)
    row["questions"]["team"]["criteria"]["c"] = "z"
    assert request_ == frozen
    engine.predict(request_)
    assert request_ == frozen


# ---------------------------------------------------------------------------------------------------------------
# The prompt
# ---------------------------------------------------------------------------------------------------------------

def _expected_prompt(state_json: str, schema: str, fields) -> str:
    user = ("Return one answer for every field using the supplied answer symbols.\n\n## State\n" + state_json
            + "\n## Decision schema\n" + schema)
    skeleton = "{\n" + ",\n".join('    "%s": "<decision>"' % f for f in fields) + "\n}"
    return ("<|im_start|>system\n" + SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\n" + user
            + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n" + skeleton + "<|im_end|>\n")


def test_module_constants(inf):
    assert inf.SYSTEM_PROMPT == SYSTEM_PROMPT
    assert inf.ANSWER_SYMBOLS == SYMBOLS
    assert inf.DECISION_TOKEN == "<decision>"
    assert inf.MODEL_NAME == "Intern-Decision-4B-tiny-fixture"
    assert inf.DEFAULT_TEMPERATURE == 1.99241824


def test_prompt_layout_with_a_string_state(inf, engine):
    row = inf.validate_request(REQUEST)
    compiled = inf.compile_row(row)
    assert compiled.fields == ("team", "urgency", "refund_requested")
    assert compiled.symbols == {"team": ("A", "B"), "urgency": ("A", "B", "C"), "refund_requested": ("A", "B")}
    assert [m["role"] for m in compiled.messages] == ["system", "user", "assistant"]
    schema = ("team: Which team should handle this request?\n"
              "    A = billing: Payments and refunds\n"
              "    B = delivery: Shipping and delivery\n"
              "urgency: Rate the priority.\n"
              "    A = 0: Low\n"
              "    B = 1: Medium\n"
              "    C = 2: High\n"
              "refund_requested: Is the customer asking for a refund?\n"
              "    A = no: " + NO_TEXT + "\n"
              "    B = yes: " + YES_TEXT)
    expected = _expected_prompt('"The customer was charged twice and asks for the extra payment back."', schema,
                                compiled.fields)
    assert _render(engine.tokenizer, compiled.messages) == expected
    with pytest.raises(TypeError):
        inf.compile_row(row, include_targets=False)
    with pytest.raises(Exception):
        compiled.fields = ()  # frozen


def test_prompt_layout_with_an_object_state(inf, engine):
    request_ = {
        "state": {"left_box": "red", "right_box": "blue", "n": 2, "café": None},
        "questions": {
            "box": {"type": "choice", "criteria": {"left": "The left box", "right": None}},
            "size": {"type": "score", "instructions": "How big?", "criteria": {"10": "big", "2.5": "small"}},
            "agree": {"type": "noul", "instructions": "Agree?", "criteria": {"FALSE": "Nope", "True": "Sure"}},
        },
    }
    compiled = inf.compile_row(inf.validate_request(request_))
    state_json = '{\n  "left_box": "red",\n  "right_box": "blue",\n  "n": 2,\n  "café": null\n}'
    schema = ("box: \n"
              "    A = left: The left box\n"
              "    B = right: None\n"
              "size: How big?\n"
              "    A = 10: big\n"
              "    B = 2.5: small\n"
              "agree: Agree?\n"
              "    A = no: Nope\n"
              "    B = yes: Sure")
    assert _render(engine.tokenizer, compiled.messages) == _expected_prompt(state_json, schema, compiled.fields)
    assert inf._options(request_["questions"]["agree"]) == [("no", "Nope"), ("yes", "Sure")]
    assert inf._options({"type": "noul"}) == [("no", NO_TEXT), ("yes", YES_TEXT)]


def test_message_content_with_images(inf):
    assert inf._message_content({"images": []}, "text") == "text"
    assert inf._message_content({"images": ["a.png", "/b.png"]}, "text") == [
        {"type": "image_url", "image_url": {"url": "a.png"}},
        {"type": "image_url", "image_url": {"url": "/b.png"}},
        {"type": "text", "text": "text"}]


# ---------------------------------------------------------------------------------------------------------------
# predict()
# ---------------------------------------------------------------------------------------------------------------

def test_predict_output_keys_and_order(engine):
    result = engine.predict(REQUEST)
    assert list(result) == ["answers", "usage", "timing", "calibration", "model", "backend"]
    assert list(result["answers"]) == ["team", "urgency", "refund_requested"]
    team, urgency, refund = (result["answers"][f] for f in ("team", "urgency", "refund_requested"))
    assert list(team) == ["type", "probabilities", "confidence", "choice", "source", "decision"]
    assert list(urgency) == ["type", "probabilities", "confidence", "score", "legend", "source", "decision"]
    assert list(refund) == ["type", "probabilities", "confidence", "noul", "source", "decision"]
    assert list(team["probabilities"]) == ["billing", "delivery"]
    assert list(urgency["probabilities"]) == ["0", "1", "2"]
    assert list(refund["probabilities"]) == ["no", "yes"]
    assert urgency["legend"] == {"0": "Low", "1": "Medium", "2": "High"}
    assert list(result["usage"]) == ["input_tokens", "output_tokens", "decision_count"]
    assert result["usage"]["output_tokens"] == result["usage"]["decision_count"] == 3
    assert type(result["usage"]["input_tokens"]) is int
    assert result["calibration"] == {"method": "temperature-scaling", "temperature": 1.99241824}
    assert result["model"] == "Intern-Decision-4B-tiny-fixture" and result["backend"] == "hf"
    ms = result["timing"]["inference_ms"]
    assert list(result["timing"]) == ["inference_ms"]
    assert isinstance(ms, float) and ms > 0 and round(ms, 2) == ms
    for answer in result["answers"].values():
        assert answer["source"] == "local"
        assert answer["decision"] == min(answer["probabilities"], key=lambda v: (-answer["probabilities"][v], v))
        assert answer["confidence"] == answer["probabilities"][answer["decision"]]
    assert team["choice"] == team["decision"]
    assert refund["noul"] == refund["probabilities"]["yes"]
    assert urgency["score"] == pytest.approx(sum(float(v) * p for v, p in urgency["probabilities"].items()))
    assert engine.temperature == 1.99241824 and engine.backend_name == "hf"
    assert engine.tokenizer is engine.backend.tokenizer


@pytest.mark.parametrize("state", [REQUEST["state"], {"left": "red", "right": "blue", "n": [1, 2, 3]}])
def test_probabilities_are_the_models_calibrated_softmax(inf, engine, state):
    request_ = {"state": state, "questions": QUESTIONS}
    result = engine.predict(request_)
    expected, length = _expected_probabilities(engine, inf, request_, inf.DEFAULT_TEMPERATURE)
    assert result["usage"]["input_tokens"] == length
    for field, probs in expected.items():
        got = list(result["answers"][field]["probabilities"].values())
        assert got == pytest.approx(probs, rel=1e-5, abs=1e-7)
        assert math.fsum(got) == pytest.approx(1.0, abs=1e-9)
    # not constant: the numbers move with the input
    other = engine.predict({"state": ["something", "else", 42], "questions": QUESTIONS})
    assert other["answers"]["urgency"]["probabilities"] != result["answers"]["urgency"]["probabilities"]


def test_temperature_one_leaves_the_raw_softmax(inf, engine, raw_engine):
    result = raw_engine.predict(REQUEST)
    assert result["calibration"] == {"method": "temperature-scaling", "temperature": 1.0}
    assert raw_engine.temperature == 1.0
    expected, _ = _expected_probabilities(raw_engine, inf, REQUEST, 1.0)
    calibrated = engine.predict(REQUEST)
    for field, probs in expected.items():
        raw = list(result["answers"][field]["probabilities"].values())
        assert raw == pytest.approx(probs, rel=1e-6, abs=1e-8)
        # and the default temperature (about 2) flattens the same distribution, keeping its argmax
        flat = list(calibrated["answers"][field]["probabilities"].values())
        assert max(flat) <= max(raw) + 1e-12
        assert calibrated["answers"][field]["decision"] == result["answers"][field]["decision"]
    # scale_result reproduces the engine's calibration from the raw result
    rescaled = inf.scale_result({k: v for k, v in result.items() if k != "calibration"}, inf.DEFAULT_TEMPERATURE)
    for field in expected:
        assert list(rescaled["answers"][field]["probabilities"].values()) == pytest.approx(
            list(calibrated["answers"][field]["probabilities"].values()), rel=1e-6)


def test_backend_score_and_encode(inf, engine):
    row = inf.validate_request(REQUEST)
    compiled, batch, positions = engine.backend.encode(row)
    marker = engine.backend.marker_id
    assert (batch["input_ids"][0, positions + 1] == marker).all() and len(positions) == 3
    compiled2, logits, length, ms = engine.backend.score(row)
    assert compiled2 == compiled
    assert tuple(logits.shape) == (3, engine.backend.model.config.text_config.vocab_size)
    assert length == batch["input_ids"].shape[1] and isinstance(ms, float)
    _, reference, _ = _reference_logits(engine, inf, REQUEST)
    assert torch.allclose(logits.float(), reference.float(), atol=1e-5)


def test_over_the_token_limit(inf, snapshot, engine):
    compiled = inf.compile_row(inf.validate_request(REQUEST))
    n = len(engine.tokenizer(_render(engine.tokenizer, compiled.messages), add_special_tokens=False)["input_ids"])
    assert n > len(engine.tokenizer(compiled.messages[1]["content"], add_special_tokens=False)["input_ids"]) + 50
    tight = _engine(inf, snapshot, max_length=n - 1)
    with pytest.raises(ValueError) as caught:
        tight.predict(REQUEST)
    assert str(caught.value) == f"Example has {n} tokens, above {n - 1}; truncation is forbidden"
    exact = _engine(inf, snapshot, max_length=n)
    assert exact.predict(REQUEST)["usage"]["input_tokens"] == n


def test_missing_image_paths_resolve_against_media_root(inf, snapshot, tmp_path):
    engine = _engine(inf, snapshot, media_root=str(tmp_path))
    assert engine.backend.media_root == tmp_path.resolve()
    request_ = {"state": "x", "images": ["missing.png"], "questions": QUESTIONS}
    with pytest.raises(FileNotFoundError) as caught:
        engine.predict(request_)
    assert caught.value.filename == str(tmp_path.resolve() / "missing.png")
    (tmp_path / "present.png").write_bytes(b"not really a png")
    with pytest.raises(FileNotFoundError):
        engine.predict({"state": "x", "images": ["present.png", str(tmp_path / "gone.png")], "questions": QUESTIONS})
    with pytest.raises(NotImplementedError):  # the fixture has no pixel path
        engine.predict({"state": "x", "images": ["present.png"], "questions": QUESTIONS})


# ---------------------------------------------------------------------------------------------------------------
# Fixture-only fault triggers
# ---------------------------------------------------------------------------------------------------------------

def _faulty(fault, questions=QUESTIONS):
    return {"state": {"__fixture_fault__": fault}, "questions": questions}


def test_tie_trigger_gives_the_lexically_smallest_value(engine):
    questions = {
        "pick": {"type": "choice", "criteria": {"zeta": "z", "alpha": "a", "mid": "m"}},
        "yes_no": {"type": "noul"},
        "level": {"type": "score", "criteria": {"2": "two", "10": "ten", "3": "three"}},
    }
    untied = engine.predict({"state": {"__fixture_fault__": "something else"}, "questions": questions})
    assert len(set(untied["answers"]["pick"]["probabilities"].values())) == 3  # ignored value: scored normally
    result = engine.predict(_faulty("tie", questions))
    pick, yes_no, level = (result["answers"][f] for f in ("pick", "yes_no", "level"))
    assert len(set(pick["probabilities"].values())) == 1
    assert pick["decision"] == pick["choice"] == "alpha"
    assert yes_no["probabilities"]["no"] == yes_no["probabilities"]["yes"] and yes_no["decision"] == "no"
    assert len(set(level["probabilities"].values())) == 1 and level["decision"] == "10"
    assert list(pick["probabilities"]) == ["zeta", "alpha", "mid"]


def test_oom_trigger(engine):
    with pytest.raises(torch.cuda.OutOfMemoryError) as caught:
        engine.predict(_faulty("oom"))
    assert isinstance(caught.value, RuntimeError)
    assert str(caught.value) == "CUDA out of memory. Tried to allocate 20.00 GiB (fixture fault)"


def test_oom_when_asked_trigger_fails_only_the_call_that_asks_that_question(engine):
    fault = {"oom_when_asked": "the fatal question?"}
    asked = {"a": {"type": "choice", "instructions": "a harmless question?", "criteria": {"x": "X", "y": "Y"}},
             "b": {"type": "noul", "instructions": "the fatal question?"}}
    with pytest.raises(torch.cuda.OutOfMemoryError, match="fixture fault"):
        engine.predict(_faulty(fault, asked))
    del asked["b"]
    assert set(engine.predict(_faulty(fault, asked))["answers"]) == {"a"}


def test_runtime_trigger(engine):
    with pytest.raises(RuntimeError) as caught:
        engine.predict(_faulty("runtime"))
    assert not isinstance(caught.value, torch.cuda.OutOfMemoryError)
    assert str(caught.value) == "fixture fault: simulated kernel failure"


def test_sleep_trigger(engine):
    result = engine.predict(_faulty({"sleep_seconds": 0.25}))
    assert result["timing"]["inference_ms"] >= 250
    assert engine.predict(_faulty({"sleep_seconds": 1e9}))["timing"]["inference_ms"] < 60000  # out of range: ignored


# ---------------------------------------------------------------------------------------------------------------
# Constructor and helpers
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"backend": "xtuner"}, "Only backend='hf' is implemented in this release"),
    ({"backend": "xtuner", "temperature": 0}, "Only backend='hf' is implemented in this release"),
    ({"temperature": 0}, "Temperature must be finite and positive"),
    ({"temperature": -1.5}, "Temperature must be finite and positive"),
    ({"temperature": float("nan")}, "Temperature must be finite and positive"),
    ({"temperature": float("inf")}, "Temperature must be finite and positive"),
    ({"temperature": "warm"}, "Temperature must be finite and positive"),
    ({"dtype": "int8"}, "Unsupported dtype"),
    ({"dtype": "int8", "temperature": 0}, "Temperature must be finite and positive"),
    ({"max_length": 0}, "max_length must be positive"),
    ({"max_length": -5, "dtype": "float64"}, "Unsupported dtype"),
])
def test_constructor_checks(inf, snapshot, kwargs, message):
    with pytest.raises(ValueError) as caught:
        inf.DecisionEngine(checkpoint=str(snapshot), device="cpu", **kwargs)
    assert str(caught.value) == message


def test_constructor_rejects_the_github_api(inf, snapshot):
    with pytest.raises(TypeError):
        inf.DecisionEngine(str(snapshot), calibration_path="calibration.json", device="cpu", dtype="float32")
    with pytest.raises(TypeError):
        inf.DecisionEngine(str(snapshot), processor_path=str(snapshot), device="cpu", dtype="float32")
    with pytest.raises(TypeError):
        inf.DecisionEngine(str(snapshot), 1.5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_fails_the_way_torch_does(inf, snapshot):
    with pytest.raises((AssertionError, RuntimeError)):
        inf.DecisionEngine(checkpoint=str(snapshot), dtype="float32")  # device defaults to "cuda"


def test_default_checkpoint_is_the_snapshot_itself(inf, snapshot):
    engine = inf.DecisionEngine(device="cpu", dtype="float32")
    assert Path(engine.backend.checkpoint).resolve() == snapshot.resolve()
    assert engine.backend.media_root == Path(".").resolve()
    assert engine.backend.max_length == 8192 and engine.backend.device == torch.device("cpu")
    assert engine.backend.model.dtype == torch.float32


def test_helpers(inf):
    assert inf.argmax({"b": 0.5, "a": 0.5, "c": 0.1}) == "a"
    assert inf.argmax({"2": 0.4, "10": 0.4}) == "10"
    assert inf.validate_temperature("2") == 2.0
    probs = {"x": 0.7, "y": 0.3}
    assert inf.scale_probabilities(probs, 1) == probs
    scaled = inf.scale_probabilities(probs, 2.0)
    assert scaled["x"] == pytest.approx(math.sqrt(0.7) / (math.sqrt(0.7) + math.sqrt(0.3)))
    assert inf.scale_probabilities({"x": 1.0, "y": 0.0}, 3.0) == {"x": 1.0, "y": 0.0}
    with pytest.raises(ValueError, match="^Invalid probability distribution$"):
        inf.scale_probabilities({"x": float("nan"), "y": 0.5}, 2.0)
    with pytest.raises(ValueError, match="^Probabilities must sum to one$"):
        inf.scale_probabilities({"x": 0.5, "y": 0.4}, 2.0)
    assert inf._json({"a": [1], "é": None}) == '{\n  "a": [\n    1\n  ],\n  "é": null\n}'
