"""The model repository in a real tritonserver on CPU with the fixture checkpoint, called with tritonclient."""
from __future__ import annotations

import hashlib
import json
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from devstack.triton import TritonServer
from wire.ping import ping
from wire.protocol import OUTCOMES

from .helpers import (
    MODEL,
    TEST_MAX_TOKENS,
    calls,
    infer,
    infer_calls,
    infer_calls_error,
    infer_error,
    metrics_text,
    model_env,
    quiet_metrics,
    read_metrics,
    settled_call_counts,
)

pytestmark = pytest.mark.triton


REQUESTS = {
    "one choice over a string state": {
        "state": "The customer was charged twice and asks for the extra payment back.",
        "questions": {"q": {"type": "choice", "instructions": "Which team handles this?",
                            "criteria": {"billing": "Payments and refunds", "delivery": "Shipping"}}},
    },
    "three types over an object state": {
        "state": {"ticket": 4512, "text": "colis abîmé, remboursement demandé", "tags": ["urgent", None]},
        "questions": {
            "team": {"type": "choice", "instructions": "Route it.",
                     "criteria": {"billing": "Payments", "delivery": "Shipping", "support": "Anything else"}},
            "urgency": {"type": "score", "instructions": "Rate the priority.", "criteria": ["Low", "Medium", "High"]},
            "refund_requested": {"type": "noul", "instructions": "Is a refund requested?"},
        },
    },
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_answer_equals_predict_in_process_number_for_number(triton, fixture_pins, in_process, name):
    module, engine = in_process
    request = REQUESTS[name]
    served = infer(triton, request)
    local = engine.predict(request)
    for key in ("answers", "usage", "calibration", "model", "backend"):
        assert served[key] == local[key], key
    assert list(served["answers"]) == list(request["questions"])
    assert isinstance(served["timing"]["inference_ms"], float)
    compiled = module.compile_row(module.validate_request(request))
    prompt = engine.tokenizer.apply_chat_template(compiled.messages, tokenize=False, add_generation_prompt=False,
                                                  enable_thinking=False, add_vision_id=True)
    assert served["prompt_sha256"] == hashlib.sha256(prompt.encode()).hexdigest()
    assert served["prompt_version"] == f"inference.py@sha256:{fixture_pins.inference_sha256[:16]}"
    assert served["model_facts"] == {
        "name": module.MODEL_NAME, "repo": "internlm/Intern-Decision-4B", "revision": fixture_pins.revision,
        "inference_sha256": fixture_pins.inference_sha256, "dtype": "float32", "device": "cpu"}


def test_validation_error_is_invalid_argument_with_the_models_message(triton):
    error = infer_error(triton, {"state": "s", "questions": {}})
    assert error.status() == "400"
    assert error.message() == "invalid_request: call 0: Supply 1–16 questions."


def test_over_limit_token_count_is_invalid_argument_never_truncated(triton):
    request = {"state": "word " * (TEST_MAX_TOKENS * 2),
               "questions": {"q": {"type": "choice", "criteria": {"a": "A", "b": "B"}}}}
    error = infer_error(triton, request)
    assert error.status() == "400"
    assert error.message().startswith("invalid_request: call 0: Example has ")
    assert error.message().endswith(f" tokens, above {TEST_MAX_TOKENS}; truncation is forbidden")


def test_reserved_marker_in_the_input_is_invalid_argument(triton):
    error = infer_error(triton, {"state": "say <decision> here",
                                 "questions": {"q": {"type": "choice", "criteria": {"a": "A", "b": "B"}}}})
    assert (error.status(), error.message()) == \
        ("400", "invalid_request: call 0: Reserved decision marker appears in input evidence")


@pytest.mark.parametrize("raw, message", [
    (b"{not json", "invalid_request: call 0: the request is not JSON"),
    (b"[1, 2, 3]", "invalid_request: call 0: the request must be a JSON object, got list"),
    (b'{"state": NaN}', "invalid_request: call 0: the request is not finite JSON"),
    (b"\xff", "invalid_request: call 0: the request is not UTF-8"),
])
def test_unusable_request_strings_are_invalid_argument(triton, raw, message):
    error = infer_error(triton, raw)
    assert error.status() == "400" and error.message().startswith(message)


def test_missing_input_tensor_is_invalid_argument(triton):
    with httpclient.InferenceServerClient(triton.http_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.infer(MODEL, [], headers=triton.key_header)
    assert caught.value.status() == "400"
    assert caught.value.message() == "invalid_request: call 0: the request carries no REQUEST tensor"


def test_oom_is_unavailable_and_the_model_answers_the_next_request(triton):
    oom = {"state": {"__fixture_fault__": "oom"}, "questions": REQUESTS["one choice over a string state"]["questions"]}
    error = infer_error(triton, oom)
    assert error.status() == "503"
    assert error.message().startswith("out_of_memory: call 0: OutOfMemoryError: CUDA out of memory")
    answer = infer(triton, REQUESTS["one choice over a string state"])
    assert answer["answers"]["q"]["decision"] in ("billing", "delivery")


def test_other_failure_is_internal_with_its_kind_word(triton):
    failing = {"state": {"__fixture_fault__": "runtime"},
               "questions": REQUESTS["one choice over a string state"]["questions"]}
    error = infer_error(triton, failing)
    assert error.status() == "500"
    assert error.message() == "scoring_failed: call 0: RuntimeError: fixture fault: simulated kernel failure"


def test_a_requests_calls_are_answered_in_order_each_equal_to_predict_in_process(triton, in_process):
    module, engine = in_process
    requests = [REQUESTS[name] for name in sorted(REQUESTS)] + [REQUESTS["one choice over a string state"]]
    served = infer_calls(triton, requests)
    assert len(served) == len(requests)
    for request, answer in zip(requests, served):
        local = engine.predict(request)
        assert (answer["answers"], answer["usage"]) == (local["answers"], local["usage"])


def test_calls_sharing_one_state_sent_once_are_each_equal_to_predict_in_process(triton, in_process):
    """Wire protocol v3: the state every call shares travels once, in STATE, and each call without it is answered as
    the same call carrying it, number for number."""
    module, engine = in_process
    base = REQUESTS["one choice over a string state"]
    state = {"ticket": 4512, "notes": ["charged twice", 0.25, None]}
    calls = [{"questions": base["questions"]}, {"questions": REQUESTS[sorted(REQUESTS)[0]]["questions"]}]
    tensors = []
    for name, texts in (("REQUEST", [json.dumps(call).encode() for call in calls]),
                        ("STATE", [json.dumps(state).encode()])):
        tensor = httpclient.InferInput(name, [len(texts)], "BYTES")
        tensor.set_data_from_numpy(np.array(texts, dtype=np.object_))
        tensors.append(tensor)
    with httpclient.InferenceServerClient(triton.http_url) as client:
        result = client.infer(MODEL, tensors, headers=triton.key_header)
    served = [json.loads(answer) for answer in result.as_numpy("RESPONSE")]
    assert len(served) == len(calls)
    for call, answer in zip(calls, served):
        local = engine.predict({"state": state, **call})
        assert (answer["answers"], answer["usage"]) == (local["answers"], local["usage"])


def test_a_failed_call_stops_the_request_there_and_names_the_call(triton):
    good = REQUESTS["one choice over a string state"]
    before = quiet_metrics(triton)
    error = infer_calls_error(triton, [good, {"state": "s", "questions": {}}, good], request_id="req-stop")
    assert (error.status(), error.message()) == ("400", "invalid_request: call 1: Supply 1–16 questions.")
    # call 0 ran, call 1 failed, call 2 never ran
    assert settled_call_counts(triton, before, {"ok": 1, "invalid": 1, "out_of_memory": 0, "failed": 0})


def test_an_empty_request_tensor_is_a_ping_answered_empty_that_runs_and_counts_no_call(triton):
    before = quiet_metrics(triton)
    assert infer_calls(triton, []) == []
    assert ping(triton.http_url, MODEL, triton.api_key, timeout=5) is None
    after = quiet_metrics(triton)
    assert {outcome: calls(after, outcome) - calls(before, outcome) for outcome in OUTCOMES} == \
        {outcome: 0 for outcome in OUTCOMES}


def call_log(server: TritonServer) -> dict[str, dict]:
    """The model's per-call JSON lines by request id. Triton writes each after its own prefix as an escaped JSON
    string: I1130 15:40:59.961443 20912 model.py:37] "{\\"request_id\\": ...}"."""
    lines = {}
    for line in server.log_text().splitlines():
        prefix, separator, quoted = line.partition('] "')
        if separator and "model.py:" in prefix and quoted.startswith("{"):
            payload = json.loads(json.loads('"' + quoted))
            lines[payload["request_id"]] = payload
    return lines


def test_every_call_reaches_the_model_log_as_a_json_line_named_by_request_id_and_index(triton):
    good = REQUESTS["one choice over a string state"]
    infer_calls(triton, [good, good], request_id="req-ok2")
    infer_calls_error(triton, [good, {"state": "s", "questions": {}}], request_id="req-7f3a")
    names = ("req-ok2.0", "req-ok2.1", "req-7f3a.0", "req-7f3a.1")
    deadline = time.monotonic() + 5
    while not all(name in call_log(triton) for name in names):
        assert time.monotonic() < deadline, triton.log_text()[-2000:]
        time.sleep(0.1)
    lines = call_log(triton)
    for name in ("req-ok2.0", "req-ok2.1", "req-7f3a.0"):
        assert lines[name]["outcome"] == "ok" and lines[name]["input_tokens"] > 0 and lines[name]["ms"] > 0
        assert "error" not in lines[name]
    assert lines["req-7f3a.1"] == {"request_id": "req-7f3a.1", "outcome": "invalid", "input_tokens": None,
                                   "ms": lines["req-7f3a.1"]["ms"],
                                   "error": "invalid_request: call 1: Supply 1–16 questions."}
    assert "charged twice" not in triton.log_text()  # the state never reaches the log


def test_metrics_show_triton_success_and_the_custom_outcomes(triton, fixture_pins):
    before = quiet_metrics(triton)
    good = REQUESTS["one choice over a string state"]
    infer(triton, good)
    infer_calls(triton, [good, good])
    infer_error(triton, {"state": "s", "questions": {}})
    infer_error(triton, {"state": {"__fixture_fault__": "oom"}, "questions": good["questions"]})
    infer_error(triton, {"state": {"__fixture_fault__": "runtime"}, "questions": good["questions"]})
    settled_call_counts(triton, before, {"ok": 3, "invalid": 1, "out_of_memory": 1, "failed": 1})
    after = read_metrics(triton)

    assert f'nv_inference_request_success{{model="{MODEL}",version="1"}}' in metrics_text(triton)
    success = ("nv_inference_request_success_total", (("model", MODEL), ("version", "1")))
    # Triton counts inference requests (one per HTTP request, whatever its calls), and an error response as a
    # success: that is why the model keeps its own counter of calls by outcome.
    assert after[success] - before.get(success, 0) == 5

    count = ("intern_decision_inference_seconds_count", (("model", MODEL),))
    assert after[count] - before.get(count, 0) == 6
    tokens = ("intern_decision_input_tokens_count", (("model", MODEL),))
    assert after[tokens] - before.get(tokens, 0) == 3
    for kind in ("reserved", "allocated", "peak_reserved", "baseline"):
        assert after[("intern_decision_gpu_memory_bytes", (("kind", kind), ("model", MODEL)))] == 0
    info = [labels for (name, labels) in after if name == "intern_decision_model_info"]
    assert len(info) == 1
    assert dict(info[0])["revision"] == fixture_pins.revision
    assert dict(info[0])["max_tokens"] == str(TEST_MAX_TOKENS)
    assert dict(info[0])["vision_tower"] == "removed"
    # on the CPU the fast linear-attention kernels are neither expected nor refused
    assert (dict(info[0])["linear_attention"], dict(info[0])["slow_kernels_allowed"]) == ("reference", "false")
    assert dict(info[0])["pinned"] == "false"  # the fixture overrides the pins, with the opt-in
    assert len(dict(info[0])["boot_id"]) == 32 and dict(info[0])["started_at"].endswith("+00:00")


def refused_start(fixture_pins, tmp_path, **overrides) -> tuple[int, str]:
    server = TritonServer(model_env(fixture_pins, **overrides), tmp_path / "tritonserver.log").start()
    try:
        code = server.wait(timeout=180)
    finally:
        server.stop()
    return code, server.log_text()


def test_overriding_the_pins_without_the_opt_in_refuses_to_start(fixture_pins, tmp_path):
    code, log = refused_start(fixture_pins, tmp_path, INTERN_DECISION_ALLOW_UNPINNED="0")
    assert code != 0
    assert ("startup refused: ValueError: INTERN_DECISION_REVISION, INTERN_DECISION_INFERENCE_SHA256, "
            "INTERN_DECISION_DTYPE override the contract's pins; set INTERN_DECISION_ALLOW_UNPINNED=1") in log


def test_wrong_inference_hash_makes_the_server_refuse_to_start(fixture_pins, tmp_path):
    code, log = refused_start(fixture_pins, tmp_path, INTERN_DECISION_INFERENCE_SHA256="0" * 64)
    assert code != 0
    assert "startup refused: StartupRefused: inference.py hash check failed" in log


def test_checkpoint_outside_its_snapshot_path_makes_the_server_refuse_to_start(fixture_pins, tmp_path):
    moved = tmp_path / "copy" / fixture_pins.checkpoint.name
    moved.parent.mkdir()
    moved.symlink_to(fixture_pins.checkpoint, target_is_directory=True)
    code, log = refused_start(fixture_pins, tmp_path, INTERN_DECISION_CHECKPOINT=str(moved))
    assert code != 0
    assert "startup refused: StartupRefused: checkpoint path check failed" in log


def test_cpu_config_without_explicit_cpu_device_refuses_to_start(fixture_pins, tmp_path):
    code, log = refused_start(fixture_pins, tmp_path, INTERN_DECISION_DEVICE="cuda")
    assert code != 0
    assert "INTERN_DECISION_DEVICE=cpu explicitly" in log
