"""The ping of the wire protocol: its body, what counts as its answer, where its key comes from."""
from __future__ import annotations

import json

import pytest

from wire import ping
from wire.protocol import REQUEST, RESPONSE

PONG = json.dumps({"model_name": "intern_decision", "model_version": "1",
                   "outputs": [{"name": RESPONSE, "datatype": "BYTES", "shape": [0], "data": []}]}).encode()


def test_the_ping_is_a_request_tensor_with_no_calls():
    assert json.loads(ping.BODY) == {"inputs": [{"name": REQUEST, "datatype": "BYTES", "shape": [0], "data": []}]}
    assert ping.headers("k" * 32) == {"Content-Type": "application/json", "triton-api-key": "k" * 32}
    assert ping.infer_path("intern_decision") == "/v2/models/intern_decision/infer"


def test_only_an_empty_response_answers_the_ping():
    assert ping.pong_error(200, PONG) is None
    one_call = PONG.replace(b'"shape": [0]', b'"shape": [1]')
    assert ping.pong_error(200, one_call).startswith("the answer is not an empty RESPONSE")
    assert ping.pong_error(200, b"not json").startswith("the answer is not an empty RESPONSE")


@pytest.mark.parametrize("status, body, message", [
    (500, b'{"error":"Stub process \'intern_decision_0_0\' is not healthy."}',
     "Triton answered 500: Stub process 'intern_decision_0_0' is not healthy."),
    (403, b'{"error":"This API is restricted, expecting header \'triton-api-key\'"}',
     "Triton answered 403: This API is restricted, expecting header 'triton-api-key'"),
    (400, b"plain text", "Triton answered 400: plain text"),
])
def test_an_error_answer_says_what_triton_said(status, body, message):
    assert ping.pong_error(status, body) == message


def test_the_key_comes_from_the_variable_or_its_file(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("f" * 32 + "\n")
    assert ping.api_key_from({"INTERN_DECISION_TRITON_API_KEY": "v" * 32,
                              "INTERN_DECISION_TRITON_API_KEY_FILE": str(key_file)}) == "v" * 32
    assert ping.api_key_from({"INTERN_DECISION_TRITON_API_KEY_FILE": str(key_file)}) == "f" * 32
    with pytest.raises(ValueError, match="INTERN_DECISION_TRITON_API_KEY"):
        ping.api_key_from({})


def test_the_command_line_says_unhealthy_in_one_line_when_triton_does_not_answer(capsys):
    assert ping.main(["--url", "127.0.0.1:1", "--timeout", "2"], {"INTERN_DECISION_TRITON_API_KEY": "k" * 32}) == 1
    error = capsys.readouterr().err
    assert error.startswith("unhealthy: Triton did not answer: ") and error.count("\n") == 1
    assert ping.main([], {}) == 1
    assert "INTERN_DECISION_TRITON_API_KEY" in capsys.readouterr().err
