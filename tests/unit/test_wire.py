"""The shared wire module: strict JSON, the error kinds and their messages, the model facts and their labels, the
tensors the model's configs declare, port numbers and host:port addresses."""
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire import strict_json
from wire.env import host_port, port_number
from wire.facts import ModelFacts
from wire.protocol import (
    CONFIG_DATA_TYPE,
    MODEL_NAME,
    OUTCOMES,
    REQUEST,
    RESPONSE,
    STATE,
    Kind,
    error_message,
    parse_error,
)

MODEL_DIR = Path(__file__).resolve().parents[2] / "model_repository" / "intern_decision"

FACTS = ModelFacts(name="Intern-Decision-4B", repo="internlm/Intern-Decision-4B", revision="0e5e" * 10,
                   inference_sha256="c904" * 16, prompt_version="inference.py@sha256:c904c904c904c904",
                   dtype="bfloat16", device="cuda:0", vram_cap_gib=35.5, max_tokens=8192, vision_tower="removed",
                   fla_version="0.5.2", causal_conv1d_version="1.7.0", linear_attention="fast",
                   slow_kernels_allowed=False, pinned=True, boot_id="b" * 32,
                   started_at="2026-05-04T10:11:12.345+00:00")


def test_an_escaped_surrogate_pair_is_a_real_character():
    assert strict_json.loads(b'{"state": "\\ud83d\\ude00"}', "the body") == {"state": "\U0001F600"}


@pytest.mark.parametrize("raw, message", [
    (b"\xff\xfe", "the body is not UTF-8"),
    (b"{not json", "the body is not JSON: Expecting property name"),
    (b"", "the body is not JSON"),
    (b'{"state": NaN}', "NaN is not a JSON number"),
    (b'{"state": -Infinity}', "-Infinity is not a JSON number"),
    (b"[" * 100000 + b"]" * 100000, "nested too deeply: more than 64 levels"),
    (b"[" * 65 + b"]" * 65, "nested too deeply: more than 64 levels"),
    (b'{"state": ' + b'{"a": ' * 64 + b"1" + b"}" * 65, "nested too deeply: more than 64 levels"),
    (b'{"id": "a", "id": "b"}', "the key 'id' appears twice in one object"),
    (b'{"state": {"x": 1, "y": [{"k": 1, "k": 2}]}}', "the key 'k' appears twice in one object"),
    (b'{"state": 1e999}', "1e999 does not fit a finite number"),
    (b'{"state": 1' + b"1" * 5000 + b"}", "not usable JSON: Exceeds the limit"),
    (b'{"state": "\\ud800"}', "lone UTF-16 surrogate"),
])
def test_what_is_not_strict_json_is_refused_naming_what_was_read(raw, message):
    with pytest.raises(strict_json.NotStrictJson, match=message):
        strict_json.loads(raw, "the body")


def test_strict_dumps_refuses_what_json_cannot_hold():
    assert json.loads(strict_json.dumps({"é": [1, 0.5]})) == {"é": [1, 0.5]}
    with pytest.raises(ValueError):
        strict_json.dumps({"p": float("inf")})


@pytest.mark.parametrize("kind", list(Kind))
def test_an_error_message_reads_back_as_its_kind_and_call(kind):
    message = error_message(kind, 3, "Example has 9000 tokens: above 8192")
    error = parse_error(kind.triton_status, message)
    assert (error.kind, error.call, error.detail) == (kind, 3, "Example has 9000 tokens: above 8192")
    assert message.startswith(f"{kind.word}: call 3: ")


def test_the_kinds_table():
    assert [(kind.word, kind.triton_code, kind.triton_status) for kind in Kind] == [
        ("invalid_request", "INVALID_ARG", 400),
        ("out_of_memory", "UNAVAILABLE", 503),
        ("scoring_failed", "INTERNAL", 500),
    ]
    assert OUTCOMES == ("ok", "invalid", "out_of_memory", "failed")


@pytest.mark.parametrize("status, message", [
    (400, "out_of_memory: call 0: a kind word with the wrong status is not the model's"),
    (None, "invalid_request: call 0: no status"),
    (500, "scoring_failed: RuntimeError: no call index"),
    (500, "Stub process 'intern_decision_0_0' is not healthy."),
])
def test_what_does_not_read_as_the_models_error_is_not(status, message):
    assert parse_error(status, message) is None


def test_facts_travel_as_labels_and_back_typed():
    labels = FACTS.to_labels()
    assert labels["vram_cap_gib"] == "35.5" and labels["max_tokens"] == "8192" and labels["pinned"] == "true"
    assert ModelFacts.from_labels(labels) == FACTS
    uncapped = ModelFacts.from_labels({**labels, "vram_cap_gib": ""})
    assert uncapped.vram_cap_gib is None and uncapped.to_labels()["vram_cap_gib"] == ""
    unpinned = ModelFacts.from_labels({**labels, "pinned": "false"})
    assert unpinned.pinned is False and unpinned.to_labels()["pinned"] == "false"


@pytest.mark.parametrize("change", [{"max_tokens": "many"}, {"vram_cap_gib": "lots"}, {"pinned": "True"},
                                    {"pinned": ""}])
def test_unreadable_labels_are_refused(change):
    with pytest.raises(ValueError):
        ModelFacts.from_labels({**FACTS.to_labels(), **change})


def test_a_missing_label_is_refused():
    labels = FACTS.to_labels()
    del labels["revision"]
    with pytest.raises(KeyError):
        ModelFacts.from_labels(labels)


def depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


def nest(levels: int, inner=None):
    value = inner
    for level in range(levels):
        value = [value] if level % 2 else {"k": value}
    return value


def test_sixty_four_levels_are_accepted_and_sixty_five_refused():
    assert depth(strict_json.loads(json.dumps(nest(64)).encode(), "the body")) == 64
    with pytest.raises(strict_json.NotStrictJson, match="nested too deeply"):
        strict_json.loads(json.dumps(nest(65)).encode(), "the body")


def _tensors(config: str, section: str) -> list[tuple[str, str]]:
    """(name, data_type) of each tensor in the config's `input [...]` or `output [...]`."""
    (body,) = re.findall(rf"^{section} \[(.*?)^\]", config, re.MULTILINE | re.DOTALL)
    return re.findall(r'name: "([^"]+)"\s+data_type: (\w+)', body)


@pytest.mark.parametrize("config", ["config.pbtxt", "configs/cpu.pbtxt"])
def test_the_model_configs_declare_the_protocols_tensors(config):
    """The .pbtxt files cannot import wire/protocol.py: they are held to its names here."""
    text = (MODEL_DIR / config).read_text()
    assert re.search(r'^name: "([^"]+)"', text, re.MULTILINE)[1] == MODEL_NAME
    assert _tensors(text, "input") == [(REQUEST, CONFIG_DATA_TYPE), (STATE, CONFIG_DATA_TYPE)]
    assert _tensors(text, "output") == [(RESPONSE, CONFIG_DATA_TYPE)]


@pytest.mark.parametrize("raw, lowest, port", [
    ("8080", 1, 8080), ("65535", 1, 65535), ("0", 0, 0), ("0", 1, None), ("65536", 1, None), ("", 1, None),
    ("80a", 1, None), (" 80", 1, None), ("-1", 0, None), ("\u0668\u0660", 1, None),
])
def test_a_port_number_is_ascii_digits_in_range(raw, lowest, port):
    assert port_number(raw, lowest) == port


@pytest.mark.parametrize("address, expected", [
    ("127.0.0.1:8000", ("127.0.0.1", 8000)), ("triton:8000", ("triton", 8000)), ("[::1]:8000", ("::1", 8000)),
])
def test_host_port_splits_at_the_last_colon(address, expected):
    assert host_port(address) == expected


def test_brackets_and_escapes_inside_strings_do_not_count_as_nesting():
    tricky = "[[{{ \\\" ]]\\\\\" {{ \\"
    value = nest(60, {"text": tricky * 20, "more": [tricky] * 10})
    assert strict_json.loads(json.dumps(value).encode(), "the body") == value
    assert strict_json.loads(json.dumps(value, ensure_ascii=False).encode(), "the body") == value


strings = st.text(alphabet=st.sampled_from('[]{}"\\ a\n\u00e9\u2028'), max_size=6)
values = st.recursive(st.none() | st.integers() | strings,
                      lambda children: st.lists(children, max_size=3) | st.dictionaries(strings, children, max_size=3),
                      max_leaves=80)


@settings(max_examples=300, deadline=None)
@given(value=values, extra=st.integers(min_value=0, max_value=70), ascii_only=st.booleans())
def test_the_byte_scan_measures_the_decoded_values_depth(value, extra, ascii_only):
    value = nest(extra, value)
    raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert strict_json.nested_too_deeply(raw) == (depth(value) > strict_json.MAX_DEPTH)


def test_a_text_of_more_values_than_the_bound_is_refused_before_any_is_built(monkeypatch):
    """A few bytes per value make many objects (1 MiB of `[{},{},...]`: ~50 MiB held): the count, read from the
    bytes, refuses the text before json builds anything."""
    at_bound = b"[" + b",".join([b"0"] * (strict_json.MAX_VALUES - 1)) + b"]"
    assert strict_json.values_at_most(at_bound) == strict_json.MAX_VALUES
    assert len(strict_json.loads(at_bound, "the body")) == strict_json.MAX_VALUES - 1
    over = b"[" + b",".join([b"{}"] * (strict_json.MAX_VALUES // 2)) + b"]"
    built = []
    monkeypatch.setattr(strict_json.json, "loads", lambda *args, **kwargs: built.append(args))
    with pytest.raises(strict_json.NotStrictJson, match="the body holds too many values: more than 131072"):
        strict_json.loads(over, "the body")
    assert built == []


def test_commas_and_brackets_inside_strings_are_not_values():
    text = json.dumps({"prose": "a, b, [c], {d}" * 60_000, "list": [1, 2, 3]}).encode()
    assert text.count(b",") + text.count(b"[") + text.count(b"{") > strict_json.MAX_VALUES
    assert strict_json.values_at_most(text) == 6  # the object, the prose, the list and its three numbers
    assert strict_json.loads(text, "the body")["list"] == [1, 2, 3]
