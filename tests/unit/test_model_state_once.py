"""model.py over the fixture checkpoint's real engine: a request's STATE is parsed once and shared by its calls,
predict() leaves it as it was, and each call scores as when it carried the state itself."""
import copy
import importlib.util
import json
import sys

import pytest

from devstack.fixture import build_fixture
from wire import strict_json
from wire.protocol import REQUEST, RESPONSE, STATE, predict_request

from ..tools import MODEL_VERSION_DIR
from .fake_pb_utils import FakeBackendUtils, FakeInferenceRequest

torch = pytest.importorskip("torch")

SHARED = {"ticket": 4512, "notes": ["charged twice", 0.25, None], "customer": {"name": "Zoë", "orders": [3, 1]}}
CALLS = [
    {"questions": {"team": {"type": "choice", "instructions": "Which team should handle this?",
                            "criteria": {"billing": "Payments and refunds", "delivery": "Shipping"}}}},
    {"questions": {"q1": {"type": "score", "instructions": "Rate the priority.", "criteria": ["Low", "High"]},
                   "q2": {"type": "noul", "instructions": "Is a refund asked for?"}}},
    {"questions": {"q": {"type": "choice", "instructions": "Approve?",
                         "criteria": {"yes": "Approve it.", "no": "Refuse it.", "later": "Ask again."}}}},
]


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    """model.py's TritonPythonModel, initialized as Triton does, over the fake pb_utils and the fixture on the CPU."""
    pins = build_fixture(tmp_path_factory.mktemp("hf-cache"))
    utils = FakeBackendUtils()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**pins.env(), "INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32",
                            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                            "TOKENIZERS_PARALLELISM": "false"}.items():
            patch.setenv(name, value)  # model.py sets the last three: the patch restores them
        patch.setitem(sys.modules, "triton_python_backend_utils", utils)
        spec = importlib.util.spec_from_file_location("intern_decision_model_py_under_test",
                                                      MODEL_VERSION_DIR / "model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        model = module.TritonPythonModel()
        model.initialize({"model_instance_kind": "CPU", "model_instance_device_id": "0",
                          "model_name": "intern_decision"})
        try:
            yield model
        finally:
            model.finalize()
            torch.set_num_threads(threads)


def respond(model, tensors: dict) -> list[dict] | str:
    """The calls' answers, or the Triton error's message."""
    [response] = model.execute([FakeInferenceRequest(tensors)])
    if response.error is not None:
        return response.error.message
    [output] = response.output_tensors
    assert output.name() == RESPONSE
    return [json.loads(raw) for raw in output.as_numpy()]


def scored(answer: dict) -> dict:
    """All of an answer but its timing."""
    return {key: value for key, value in answer.items() if key != "timing"}


@pytest.fixture
def seen(backend, monkeypatch):
    """What each predict() of the checkpoint was handed: (the object itself, a deep copy taken on entry)."""
    checkpoint = backend._engine._engine
    handed, predict = [], checkpoint.predict

    def spying(request):
        handed.append((request, copy.deepcopy(request)))
        return predict(request)

    monkeypatch.setattr(checkpoint, "predict", spying)
    return handed


@pytest.fixture
def state_parses(monkeypatch):
    parsed, loads = [], strict_json.loads

    def counting(raw, what, *args, **kwargs):
        parsed.append(what)
        return loads(raw, what, *args, **kwargs)

    monkeypatch.setattr(strict_json, "loads", counting)
    return parsed


def test_one_state_is_parsed_once_shared_by_the_calls_unmutated_and_scored_as_when_each_call_carried_it(
        backend, seen, state_parses):
    original = copy.deepcopy(SHARED)
    shared = respond(backend, {REQUEST: [strict_json.dumps(call) for call in CALLS],
                               STATE: [strict_json.dumps(SHARED)]})
    assert state_parses.count("the state") == 1 and state_parses.count("the request") == len(CALLS)
    assert len(seen) == len(CALLS)
    assert all(request["state"] is seen[0][0]["state"] for request, _ in seen)  # one object, not a copy per call
    for (request, on_entry), call in zip(seen, CALLS):
        assert on_entry == request == predict_request(original, call)  # handed as sent, and left as it was
        assert list(request) == ["state", "questions"]

    state_parses.clear()
    per_call = respond(backend, {REQUEST: [strict_json.dumps(predict_request(SHARED, call)) for call in CALLS]})
    assert state_parses.count("the state") == 0 and state_parses.count("the request") == len(CALLS)
    assert len(shared) == len(per_call) == len(CALLS)
    for with_state, carried, call in zip(shared, per_call, CALLS):
        assert list(with_state["answers"]) == list(call["questions"])
        assert scored(with_state) == scored(carried)  # number for number, the prompt's hash included


@pytest.mark.parametrize("tensors, message", [
    ({REQUEST: [b'{"state": 1, "questions": {}}'], STATE: [b"2"]},
     "invalid_request: call 0: a call carries a state of its own beside the request's shared STATE"),
    ({REQUEST: [strict_json.dumps(CALLS[0])], STATE: [b"1", b"2"]},
     "invalid_request: call 0: STATE must hold one state, got 2"),
    ({REQUEST: [strict_json.dumps(CALLS[0])], STATE: [b"[NaN]"]},
     "invalid_request: call 0: the state is not finite JSON: NaN is not a JSON number"),
])
def test_a_state_the_model_cannot_take_fails_the_request_before_any_call_runs(backend, seen, tensors, message):
    assert respond(backend, tensors) == message
    assert seen == []
