"""The wire protocol's pure parts: decoding a request string, encoding an answer, error kinds."""
import json

import pytest

from intern_decision_model.guard import OutOfMemory, ScoringFailed
from intern_decision_model.protocol import (OUTCOMES, AnswerNotEncodable, InvalidRequest, Kind, decode_request,
                                            encode_answer, error_message, kind_of)


def test_an_escaped_surrogate_pair_is_a_real_character():
    assert decode_request(b'{"state": "\\ud83d\\ude00"}') == {"state": "\U0001F600"}


def test_a_json_object_is_decoded_unchanged():
    request = {"state": {"a": [1, 2.5, None]}, "questions": {"q": {"type": "choice", "criteria": {"x": "é"}}}}
    assert decode_request(json.dumps(request, ensure_ascii=False).encode()) == request


@pytest.mark.parametrize("raw, message", [
    (None, "the request carries no REQUEST tensor"),
    (b"\xff\xfe", "the request is not UTF-8"),
    (b"{not json", "the request is not JSON: Expecting property name"),
    (b"", "the request is not JSON"),
    (b'{"state": NaN, "questions": {}}', "NaN is not a JSON number"),
    (b'{"state": -Infinity}', "-Infinity is not a JSON number"),
    (b"[1, 2]", "the request must be a JSON object, got list"),
    (b'"text"', "the request must be a JSON object, got str"),
    (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
    (b'{"state": 1, "questions": {}, "images": ["/etc/passwd"]}', "this service takes no images"),
    (b'{"state": 1e999}', "1e999 does not fit a finite number"),
    (b'{"state": 1' + b"1" * 5000 + b"}", "not usable JSON: Exceeds the limit"),
    (b'{"state": "\\ud800"}', "lone UTF-16 surrogate"),
])
def test_unusable_request_strings_are_invalid_requests(raw, message):
    with pytest.raises(InvalidRequest, match=message):
        decode_request(raw)


@pytest.mark.parametrize("images", [None, [], ""])
def test_an_empty_images_key_is_no_images(images):
    assert decode_request(json.dumps({"state": 1, "images": images}).encode())["images"] == images


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


def test_error_messages_start_with_a_stable_kind_word():
    assert error_message(Kind.INVALID, ValueError("Supply 1–16 questions.")) == \
        "invalid_request: Supply 1–16 questions."
    assert error_message(Kind.OUT_OF_MEMORY, OutOfMemory("x")).startswith("out_of_memory: ")
    assert error_message(Kind.FAILED, ScoringFailed("x")).startswith("scoring_failed: ")
    assert OUTCOMES == ("ok", "invalid", "out_of_memory", "failed")


def test_answer_is_strict_utf8_json():
    body = encode_answer({"answers": {"q": {"probabilities": {"é": 0.25}}}})
    assert json.loads(body.decode("utf-8")) == {"answers": {"q": {"probabilities": {"é": 0.25}}}}
    assert "é".encode() in body
    with pytest.raises(AnswerNotEncodable):
        encode_answer({"p": float("nan")})
