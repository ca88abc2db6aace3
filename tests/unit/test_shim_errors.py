"""Triton's errors mapped by the model's kind words, the model facts read from the metrics text, the calls' bytes."""
import pytest

from shim.errors import from_triton
from shim.port.triton import facts_from_metrics


@pytest.mark.parametrize("status, message, expected", [
    (400, "invalid_request: call 0: Supply 1–16 questions.", (422, "invalid_request", "Supply 1–16 questions.")),
    ("503", "out_of_memory: call 2: OutOfMemoryError: CUDA out of memory",
     (503, "out_of_memory", "OutOfMemoryError: CUDA out of memory")),
    (500, "scoring_failed: call 1: RuntimeError: boom", (500, "scoring_failed", "RuntimeError: boom")),
])
def test_the_models_errors_map_by_kind_word(status, message, expected):
    error = from_triton(status, message)
    assert (error.status, error.code, error.message) == expected


@pytest.mark.parametrize("status, message", [
    ("400", "Request for unknown model: 'intern_decision' is not found"),
    ("503", "Server is not ready"),
    ("500", "Stub process 'intern_decision_0_0' is not healthy."),
    ("400", "out_of_memory: call 0: a kind word with the wrong status is not the model's"),
    (None, "invalid_request: call 0: no status"),
    ("500", "Failed to process the request(s) for model 'intern_decision_0_0', message: ValueError: x"),
])
def test_anything_else_is_model_unavailable(status, message):
    error = from_triton(status, message)
    assert (error.status, error.code) == (502, "model_unavailable")
    assert message in error.message


METRICS = """# HELP intern_decision_model_info The pins and limits in force
# TYPE intern_decision_model_info gauge
intern_decision_model_info{model="other",name="x",max_tokens="1",vram_cap_gib=""} 1
intern_decision_model_info{model="intern_decision",name="Intern-Decision-4B",repo="internlm/Intern-Decision-4B",\
revision="0e5e6aa7d6d750e2b1504ba11a8136cb58aeb3cd",inference_sha256="c904",prompt_version="inference.py@sha256:c904",\
dtype="bfloat16",device="cuda:0",vram_cap_gib="35.5",max_tokens="8192",vision_tower="removed",\
fla_version="0.5.2",causal_conv1d_version="1.7.0",linear_attention="fast",slow_kernels_allowed="false",\
pinned="false",boot_id="9f1c0b7e2d4a4c5e8b6a1f3d2c4e5a6b",started_at="2026-05-04T10:11:12.345+00:00",\
cuda_graphs="off",cuda_graphs_reason="the attention runs 'eager', not sdpa"} 1
# HELP nv_inference_count x
# TYPE nv_inference_count counter
nv_inference_count{model="intern_decision",version="1"} 3
"""


def test_facts_come_from_the_info_gauge_of_our_model():
    facts = facts_from_metrics(METRICS, "intern_decision")
    assert facts.as_dict() == {"name": "Intern-Decision-4B", "repo": "internlm/Intern-Decision-4B",
                               "revision": "0e5e6aa7d6d750e2b1504ba11a8136cb58aeb3cd", "inference_sha256": "c904",
                               "prompt_version": "inference.py@sha256:c904", "dtype": "bfloat16", "device": "cuda:0",
                               "vram_cap_gib": 35.5, "max_tokens": 8192, "vision_tower": "removed",
                               "fla_version": "0.5.2", "causal_conv1d_version": "1.7.0", "linear_attention": "fast",
                               "slow_kernels_allowed": False,
                               "pinned": False, "boot_id": "9f1c0b7e2d4a4c5e8b6a1f3d2c4e5a6b",
                               "started_at": "2026-05-04T10:11:12.345+00:00", "cuda_graphs": "off",
                               "cuda_graphs_reason": "the attention runs 'eager', not sdpa"}


def test_no_facts_until_the_model_publishes_them():
    assert facts_from_metrics("# TYPE nv_inference_count counter\nnv_inference_count 1\n", "intern_decision") is None


@pytest.mark.anyio
@pytest.mark.parametrize("count", [1, 26])
async def test_a_requests_state_is_serialized_once_for_all_its_calls(monkeypatch, count):
    """The state is handed over once beside its calls; it is serialized once (a 1 MiB state took 49 ms each time:
    ~1.3 s of the event loop for 26 calls) and travels once, in STATE, even for one call; each call reaches Triton as
    its own bytes."""
    from types import SimpleNamespace

    from shim.errors import ModelFailure
    from shim.port.triton import TritonModel
    from tests.unit.shim_helpers import make_settings
    from wire import strict_json

    state = {"ticket": [1, {"é": "\u2028 line"}, None] * 50}
    calls = [{"questions": {f"q{n}": {"type": "noul", "instructions": f"{n}?"}}} for n in range(count)]
    dumped, real_dumps = [], strict_json.dumps
    monkeypatch.setattr(strict_json, "dumps", lambda value: (dumped.append(value), real_dumps(value))[1])
    sent = []

    async def triton(method, path, timeout, body=None, headers=None):
        sent.append(body)
        return SimpleNamespace(status=500, headers={}, body=b'{"error": "refused in the test"}')

    model = TritonModel(make_settings())
    monkeypatch.setattr(model._inference, "request", triton)
    with pytest.raises(ModelFailure):
        await model.predict_calls(state, calls, "r-1")
    assert sum(value is state for value in dumped) == 1 and dumped.count(state) == 1
    assert all(real_dumps(call) in sent[0] for call in calls)
    assert sent[0].count(real_dumps(state)) == 1 and b'"STATE"' in sent[0]
