"""The model's side of the wire protocol: decoding one call, encoding an answer, naming a failure's kind."""
import json

import pytest

from intern_decision_model.guard import OutOfMemory, ScoringFailed
from intern_decision_model.protocol import (
    AnswerNotEncodable,
    InvalidRequest,
    SharedState,
    decode_call,
    decode_state,
    encode_answer,
    kind_of,
)
from wire.protocol import Kind


def test_a_json_object_is_decoded_unchanged():
    request = {"state": {"a": [1, 2.5, None]}, "questions": {"q": {"type": "choice", "criteria": {"x": "é"}}}}
    assert decode_call(json.dumps(request, ensure_ascii=False).encode()) == request


def test_a_call_without_its_state_takes_the_one_parsed_shared_state_first_as_when_it_carried_it():
    request = {"state": {"a": [1, 2.5, None], "é": "x"}, "questions": {"q": {"type": "noul"}}}
    shared = decode_state(json.dumps(request["state"], ensure_ascii=False).encode())
    first = decode_call(json.dumps({"questions": request["questions"]}).encode(), shared)
    second = decode_call(json.dumps({"questions": request["questions"]}).encode(), shared)
    assert first == request == decode_call(json.dumps(request, ensure_ascii=False).encode())
    assert list(first) == ["state", "questions"] and first["state"] is second["state"] is shared.value


@pytest.mark.parametrize("state", [None, 0, "", [], {}])
def test_a_falsy_shared_state_is_still_the_calls_state(state):
    assert decode_call(b'{"questions": {}}', decode_state(json.dumps(state).encode())) == \
        {"state": state, "questions": {}}


def test_a_call_carrying_its_own_state_beside_the_shared_state_is_an_invalid_request():
    with pytest.raises(InvalidRequest, match="a call carries a state of its own beside the request's shared STATE"):
        decode_call(b'{"state": 1, "questions": {}}', SharedState(2))


@pytest.mark.parametrize("raw, message", [(b"[NaN]", "NaN is not a JSON number"), (b"\xff", "the state is not UTF-8")])
def test_a_shared_state_that_is_not_strict_json_is_an_invalid_request(raw, message):
    with pytest.raises(InvalidRequest, match=message):
        decode_state(raw)


@pytest.mark.parametrize("raw, message", [
    (b"\xff\xfe", "the request is not UTF-8"),
    (b"{not json", "the request is not JSON: Expecting property name"),
    (b'{"state": NaN, "questions": {}}', "NaN is not a JSON number"),
    (b"[1, 2]", "the request must be a JSON object, got list"),
    (b'"text"', "the request must be a JSON object, got str"),
    (b'{"state": 1, "questions": {}, "images": ["/etc/passwd"]}', "this service takes no images"),
])
def test_unusable_calls_are_invalid_requests(raw, message):
    with pytest.raises(InvalidRequest, match=message):
        decode_call(raw)


@pytest.mark.parametrize("images", [None, [], ""])
def test_an_empty_images_key_is_no_images(images):
    assert decode_call(json.dumps({"state": 1, "images": images}).encode())["images"] == images


def test_invalid_request_is_a_value_error_so_it_maps_like_the_models_own_validation():
    assert kind_of(InvalidRequest("x")) is Kind.INVALID


@pytest.mark.parametrize("exc, kind", [
    (ValueError("Supply 1–16 questions."), Kind.INVALID),
    (OutOfMemory("CUDA out of memory"), Kind.OUT_OF_MEMORY),
    (ScoringFailed("RuntimeError: boom"), Kind.FAILED),
    (AnswerNotEncodable("nan"), Kind.FAILED),
    (KeyError("usage"), Kind.FAILED),
])
def test_error_kinds(exc, kind):
    assert kind_of(exc) is kind


def test_answer_is_strict_utf8_json():
    body = encode_answer({"answers": {"q": {"probabilities": {"é": 0.25}}}})
    assert json.loads(body.decode("utf-8")) == {"answers": {"q": {"probabilities": {"é": 0.25}}}}
    assert "é".encode() in body
    with pytest.raises(AnswerNotEncodable):
        encode_answer({"p": float("nan")})
