"""Model-side configuration: defaults, and every value validated with a ValueError naming the variable."""
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from intern_decision_model.settings import PINNED_INFERENCE_SHA256, PINNED_REVISION, Settings, instance_device


def test_defaults_are_the_pins_and_the_contract_limits():
    settings = Settings.from_env({})
    assert settings.revision == PINNED_REVISION == "0e5e6aa7d6d750e2b1504ba11a8136cb58aeb3cd"
    assert settings.inference_sha256 == PINNED_INFERENCE_SHA256
    assert settings.checkpoint == Path(f"/hf/hub/models--internlm--Intern-Decision-4B/snapshots/{PINNED_REVISION}")
    assert (settings.device, settings.dtype, settings.vram_cap_gib) == ("cuda", "bfloat16", None)
    assert (settings.max_tokens, settings.release_slack_mib, settings.keep_vision) == (8192, 512, False)
    assert settings.release_slack_bytes == 512 * 1024 * 1024
    assert settings.pinned and settings.unpinned == ()


def test_each_declared_default_is_what_an_empty_environment_gives():
    settings = Settings.from_env({})
    declared = {field.name: field.default for field in fields(Settings) if field.default is not MISSING}
    assert {"device", "max_tokens", "release_slack_mib", "graph_budget_mib"} <= set(declared)
    assert {name: getattr(settings, name) for name in declared} == declared


def test_the_default_checkpoint_follows_an_explicit_revision():
    settings = Settings.from_env({"INTERN_DECISION_REVISION": "a" * 40, "INTERN_DECISION_ALLOW_UNPINNED": "1"})
    assert settings.checkpoint.name == "a" * 40


def test_explicit_values_are_taken():
    settings = Settings.from_env({
        "INTERN_DECISION_CHECKPOINT": "/data/snap", "INTERN_DECISION_DEVICE": "cuda:1",
        "INTERN_DECISION_DTYPE": "float32", "INTERN_DECISION_VRAM_CAP_GIB": "35.5",
        "INTERN_DECISION_MAX_TOKENS": "4096", "INTERN_DECISION_RELEASE_SLACK_MIB": "0",
        "INTERN_DECISION_KEEP_VISION": "1", "INTERN_DECISION_INFERENCE_SHA256": "b" * 64,
        "INTERN_DECISION_ALLOW_UNPINNED": "1",
    })
    assert settings.checkpoint == Path("/data/snap") and settings.device == "cuda:1"
    assert settings.vram_cap_gib == 35.5 and settings.max_tokens == 4096 and settings.release_slack_mib == 0
    assert settings.keep_vision and settings.inference_sha256 == "b" * 64 and settings.dtype == "float32"


@pytest.mark.parametrize("name, value", [
    ("VRAM_CAP_GIB", "0"), ("VRAM_CAP_GIB", "-1"), ("VRAM_CAP_GIB", "nan"), ("VRAM_CAP_GIB", "inf"),
    ("VRAM_CAP_GIB", "lots"),
    ("MAX_TOKENS", "0"), ("MAX_TOKENS", "-5"), ("MAX_TOKENS", "1e3"), ("MAX_TOKENS", "8k"), ("MAX_TOKENS", " 9"),
    ("MAX_TOKENS", "４"),
    ("RELEASE_SLACK_MIB", "-1"), ("RELEASE_SLACK_MIB", "1.5"),
    ("KEEP_VISION", "yes"), ("KEEP_VISION", "2"), ("KEEP_VISION", "true"),
    ("ALLOW_UNPINNED", "yes"), ("ALLOW_UNPINNED", "true"),
    ("DEVICE", "gpu"), ("DEVICE", "cuda:"), ("DEVICE", "CPU"), ("DEVICE", "mps"),
    ("DTYPE", "fp16"), ("DTYPE", "int8"),
    ("REVISION", "main"), ("REVISION", "0E5E6AA7D6D750E2B1504BA11A8136CB58AEB3CD"),
    ("INFERENCE_SHA256", "c904"), ("INFERENCE_SHA256", "z" * 64),
    ("CHECKPOINT", "relative/snapshots/x"),
])
def test_a_bad_value_is_refused_naming_the_variable(name, value):
    with pytest.raises(ValueError, match=f"INTERN_DECISION_{name} "):
        Settings.from_env({f"INTERN_DECISION_{name}": value})


@pytest.mark.parametrize("name, value", [
    ("REVISION", "a" * 40), ("INFERENCE_SHA256", "b" * 64), ("DTYPE", "float32"), ("DTYPE", "float16"),
])
def test_overriding_a_pin_needs_the_explicit_opt_in_and_is_reported(name, value):
    with pytest.raises(ValueError, match=f"INTERN_DECISION_{name} override the contract's pins; "
                                         "set INTERN_DECISION_ALLOW_UNPINNED=1"):
        Settings.from_env({f"INTERN_DECISION_{name}": value})
    with pytest.raises(ValueError, match="ALLOW_UNPINNED"):
        Settings.from_env({f"INTERN_DECISION_{name}": value, "INTERN_DECISION_ALLOW_UNPINNED": "0"})
    settings = Settings.from_env({f"INTERN_DECISION_{name}": value, "INTERN_DECISION_ALLOW_UNPINNED": "1"})
    assert not settings.pinned and settings.unpinned == (f"INTERN_DECISION_{name}",)


def test_the_pins_restated_or_the_opt_in_alone_stay_pinned():
    restated = Settings.from_env({"INTERN_DECISION_REVISION": PINNED_REVISION, "INTERN_DECISION_DTYPE": "bfloat16",
                                  "INTERN_DECISION_INFERENCE_SHA256": PINNED_INFERENCE_SHA256})
    assert restated.pinned
    assert Settings.from_env({"INTERN_DECISION_ALLOW_UNPINNED": "1"}).pinned


def test_prompt_version_names_the_pinned_inference_file():
    assert Settings.from_env({}).prompt_version == "inference.py@sha256:c904e2c67ca07756"


def test_cpu_instance_needs_device_cpu_set_explicitly():
    assert instance_device("cpu", "CPU", 0) == "cpu"
    with pytest.raises(ValueError, match="INTERN_DECISION_DEVICE=cpu explicitly"):
        instance_device("cuda", "CPU", 0)


def test_gpu_instance_takes_the_device_triton_assigned():
    assert instance_device("cuda", "GPU", 1) == "cuda:1"
    assert instance_device("cuda:1", "GPU", 1) == "cuda:1"
    with pytest.raises(ValueError, match="Triton placed this instance on cuda:1"):
        instance_device("cuda:0", "GPU", 1)
    with pytest.raises(ValueError, match="Triton placed this instance on cuda:0"):
        instance_device("cpu", "GPU", 0)


def test_graph_settings_default_to_auto_and_read_their_lists():
    settings = Settings.from_env({})
    assert (settings.cuda_graphs, settings.graph_shapes, settings.graph_budget_mib) == ("auto", (), 1024)
    assert settings.graph_buckets == (256, 512, 1024, 2048, 4096, 8192) and settings.graph_gate == 0.01
    settings = Settings.from_env({"INTERN_DECISION_CUDA_GRAPHS": "bucketed",
                                  "INTERN_DECISION_GRAPH_SHAPES": "289x3,9x1",
                                  "INTERN_DECISION_GRAPH_BUCKETS": "128,640", "INTERN_DECISION_GRAPH_BUDGET_MIB": "0",
                                  "INTERN_DECISION_GRAPH_GATE": "0.002"})
    assert settings.cuda_graphs == "bucketed" and [str(shape) for shape in settings.graph_shapes] == ["289x3", "9x1"]
    assert (settings.graph_buckets, settings.graph_budget_mib, settings.graph_gate) == ((128, 640), 0, 0.002)


@pytest.mark.parametrize("name, value", [("CUDA_GRAPHS", "on"), ("GRAPH_SHAPES", "289"), ("GRAPH_SHAPES", "289x3,"),
                                         ("GRAPH_BUCKETS", "128,0"), ("GRAPH_BUCKETS", "x"), ("GRAPH_GATE", "0"),
                                         ("GRAPH_BUDGET_MIB", "-1")])
def test_a_bad_graph_setting_is_refused_by_name(name, value):
    with pytest.raises(ValueError, match=f"INTERN_DECISION_{name}"):
        Settings.from_env({f"INTERN_DECISION_{name}": value})
