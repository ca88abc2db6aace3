"""The playground's request building and copy-as-code (shim/playground/static/request.mjs), run as it is in node:
the state read as typed, the checks against the published limits, the body, the curl and MCP commands run by bash
(curl replaced by a recorder), the Python code run against a recording stand-in of the SDK, and how answers and
errors read. CI machines have node; the browser tests load the same module in chromium."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

MODULE = Path(__file__).resolve().parents[2] / "shim" / "playground" / "static" / "request.mjs"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")

LIMITS = {"max_questions_per_call": 16, "max_questions_per_request": 3, "max_options_per_question": 2,
          "max_tokens_per_call": 4096, "max_batch_items": 32}
BASE = "http://127.0.0.1:8080"


def js(function: str, *args):
    """request.mjs's `function` called with the JSON arguments; its JSON result."""
    script = (f"import * as m from {json.dumps(MODULE.as_uri())};"
              f"const out = m[{json.dumps(function)}](...JSON.parse(process.argv[1]));"
              "process.stdout.write(JSON.stringify(out === undefined ? null : out));")
    done = subprocess.run([NODE, "--input-type=module", "-e", script, json.dumps(args)], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def question(type_: str, name: str, **fields) -> dict:
    """A question as the page holds it (what newQuestion makes, then edited)."""
    return {"type": type_, "name": name, "instructions": "",
            "options": [{"value": "", "description": ""}] if type_ == "choice" else [],
            "levels": [""] if type_ == "score" else [], "whenTrue": "", "whenFalse": "", **fields}


@pytest.mark.parametrize("type_", ["choice", "score", "noul"])
def test_a_new_question_is_the_shape_these_tests_edit(type_):
    assert js("newQuestion", type_, "q") == question(type_, "q")


THREE = [
    question("choice", "team", instructions="Which team? It's urgent", options=[
        {"value": "billing", "description": "Payments and refunds"}, {"value": "delivery", "description": ""}]),
    question("score", "urgency", levels=["Low", "High"]),
    question("noul", "refund", instructions="Is a refund asked for?", whenTrue="A refund is asked for"),
]
STATE = {"ticket": 4512, "text": "Charged twice for one order — l'addition, s'il vous plaît"}


def body() -> dict:
    return js("buildRequest", "Intern-Decision-4B", STATE, THREE)


# --- the state ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, text, value", [
    ("text", "The customer was charged twice.", "The customer was charged twice."),
    ("json", '{"ticket": 7, "tags": ["a"]}', {"ticket": 7, "tags": ["a"]}),
    ("json", '["one"]', ["one"]),
    ("json", '"a string"', "a string"),
    ("json", "{}", {}),
    ("json", "[]", []),
    ("json", '""', ""),
])
def test_a_state_that_the_service_takes_reads_as_its_value(mode, text, value):
    assert js("parseState", mode, text) == {"ok": True, "value": value}


@pytest.mark.parametrize("mode, text, says", [
    ("text", "   ", "Write the state"),
    ("json", '{"ticket": ', "Not valid JSON"),
    ("json", "42", "object, array or string"),
    ("json", "null", "object, array or string"),
    ("json", '{"big": 1e999}', "finite"),
])
def test_a_blank_text_or_a_state_the_service_would_refuse_is_an_error_as_typed(mode, text, says):
    read = js("parseState", mode, text)
    assert read["ok"] is False and says in read["error"]


# --- the limits and the checks -----------------------------------------------------------------------------------

def test_the_limits_are_the_named_models_as_published():
    models = {"models": [{"name": "canonical@abc", "limits": LIMITS},
                         {"name": "alias", "limits": {**LIMITS, "max_options_per_question": 9}}]}
    assert js("limitsOf", js("modelEntry", models, "alias"))["max_options_per_question"] == 9
    assert js("limitsOf", js("modelEntry", models, "unknown"))["max_options_per_question"] == 2
    assert js("limitsOf", {"name": "x"}) is None


def test_questions_within_the_limits_have_no_problems():
    assert js("questionProblems", THREE, LIMITS) == []


def test_the_checks_use_the_limits_they_are_given():
    three_options = question("choice", "c", options=[{"value": v, "description": ""} for v in "abc"])
    assert js("questionProblems", [three_options], LIMITS) == [
        {"question": 0, "field": "options", "message": "At most 2 options."}]
    assert js("questionProblems", [three_options], {**LIMITS, "max_options_per_question": 62}) == []
    assert js("questionProblems", THREE + [question("noul", "more")], LIMITS)[0]["message"] == \
        "At most 3 questions in one request."


@pytest.mark.parametrize("questions, message", [
    ([], "Add at least one question."),
    ([question("noul", "same"), question("noul", "same")], "The name same is used twice."),
    ([question("noul", " ")], "Give the question a name."),
    ([question("choice", "c", options=[])], "Add at least one option."),
    ([question("choice", "c", options=[{"value": "a", "description": ""}, {"value": "a", "description": ""}])],
     "Two options have the same value."),
    ([question("score", "s", levels=["Low", ""])], "Every level needs text."),
])
def test_each_problem_is_named(questions, message):
    assert message in [problem["message"] for problem in js("questionProblems", questions, LIMITS)]


# --- the body ------------------------------------------------------------------------------------------------------

def test_the_body_is_system_ones_request_in_the_order_the_questions_were_added():
    built = body()
    assert built == {"model": "Intern-Decision-4B", "state": STATE, "questions": {
        "team": {"type": "choice", "instructions": "Which team? It's urgent",
                 "criteria": {"billing": "Payments and refunds", "delivery": None}},
        "urgency": {"type": "score", "criteria": ["Low", "High"]},
        "refund": {"type": "noul", "instructions": "Is a refund asked for?",
                   "criteria": {"true": "A refund is asked for"}}}}
    assert list(built["questions"]) == ["team", "urgency", "refund"]


def test_a_noul_without_descriptions_sends_no_criteria():
    assert js("buildRequest", "m", "s", [question("noul", "n")])["questions"]["n"] == {"type": "noul"}


# --- the code ------------------------------------------------------------------------------------------------------

def run_as_bash(command: str) -> list[str]:
    """What curl would be called with when bash runs `command` with API_TOKEN set."""
    recorder = f"curl() {{ {sys.executable} -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \"$@\"; }}"
    done = subprocess.run(["bash", "-c", f"{recorder}\n{command}"], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "API_TOKEN": "the-token"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_curl_sends_the_body_to_v1_systemone_with_the_token_from_the_environment():
    code = js("asCurl", BASE, body())
    assert "the-token" not in code and "$API_TOKEN" in code
    args = run_as_bash(code)
    assert args[:2] == ["-sS", f"{BASE}/v1/systemone"]
    assert args[args.index("-H") + 1] == "Authorization: Bearer the-token"
    assert "Content-Type: application/json" in args
    sent = args[args.index("--data-binary") + 1]
    assert json.loads(sent) == body()


def test_the_mcp_call_is_a_tools_call_of_system_one_with_the_same_arguments():
    args = run_as_bash(js("asMcp", BASE, body()))
    assert args[1] == f"{BASE}/mcp"
    assert "Authorization: Bearer the-token" in args and "Accept: application/json, text/event-stream" in args
    message = json.loads(args[args.index("--data-binary") + 1])
    assert message == {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "system_one", "arguments": body()}}


def recording_sdk() -> tuple[types.ModuleType, list]:
    """A stand-in for typesafe_sdk that records the client and the call; questions become their request JSON."""
    calls: list = []
    sdk = types.ModuleType("typesafe_sdk")

    def question_type(kind: str):
        return lambda **fields: {"type": kind, **fields}

    sdk.Choice, sdk.Score, sdk.Noul = question_type("choice"), question_type("score"), question_type("noul")

    class TypeSafeClient:
        def __init__(self, **options):
            calls.append(("client", options))

        def system_one(self, state, questions):
            calls.append(("system_one", state, questions))
            response = types.SimpleNamespace(json=lambda: {"answers": {}})
            return types.SimpleNamespace(raw_http_response=response)

    sdk.TypeSafeClient = TypeSafeClient
    return sdk, calls


def test_the_python_code_calls_the_sdk_with_the_same_request(monkeypatch, capsys):
    code = js("asPython", BASE, body())
    assert "the-token" not in code
    sdk, calls = recording_sdk()
    monkeypatch.setitem(sys.modules, "typesafe_sdk", sdk)
    monkeypatch.setenv("API_TOKEN", "the-token")
    exec(compile(code, "playground-python", "exec"), {})
    client, (_, state, questions) = calls
    assert client == ("client", {"api_key": "the-token", "base_url": BASE, "model": "Intern-Decision-4B"})
    assert state == STATE and questions == body()["questions"]
    assert list(questions) == ["team", "urgency", "refund"]
    assert json.loads(capsys.readouterr().out) == {"answers": {}}


def test_the_python_code_reads_a_text_state_and_json_literals(monkeypatch):
    sdk, calls = recording_sdk()
    built = js("buildRequest", "m", "it's \"quoted\"\nand\\escaped", [
        question("choice", "c", options=[{"value": "x", "description": ""}])])
    monkeypatch.setitem(sys.modules, "typesafe_sdk", sdk)
    monkeypatch.setenv("API_TOKEN", "t")
    exec(compile(js("asPython", BASE, built), "playground-python", "exec"), {"print": lambda *a: None})
    assert calls[1][1] == "it's \"quoted\"\nand\\escaped"
    assert calls[1][2] == {"c": {"type": "choice", "criteria": {"x": None}}}


# --- answers and errors as shown -------------------------------------------------------------------------------------

def test_bars_carry_each_answers_own_numbers_and_mark_the_models_decision():
    choice = {"type": "choice", "choice": "b", "confidence": 0.7, "probabilities": {"a": 0.3, "b": 0.7}}
    score = {"type": "score", "score": 0.6, "confidence": 0.6, "legend": {"0": "Low", "1": {"level": "High"}},
             "probabilities": {"0": 0.4, "1": 0.6}, "x_native": {"decision": "1"}}
    noul = {"type": "noul", "noul": 0.25, "x_native": {"probabilities": {"yes": 0.25, "no": 0.75}, "decision": "no"}}
    assert js("answerBars", choice) == [{"key": "a", "label": "a", "value": 0.3, "chosen": False},
                                        {"key": "b", "label": "b", "value": 0.7, "chosen": True}]
    assert js("answerBars", score) == [{"key": "0", "label": "0: Low", "value": 0.4, "chosen": False},
                                       {"key": "1", "label": '1: {"level":"High"}', "value": 0.6, "chosen": True}]
    assert js("answerBars", noul) == [{"key": "true", "label": "yes", "value": 0.25, "chosen": False},
                                      {"key": "false", "label": "no", "value": 0.75, "chosen": True}]


def test_without_predicts_decision_the_highest_probability_is_marked():
    score = {"type": "score", "score": 0.3, "confidence": 0.7, "legend": {"0": "Low", "1": "High"},
             "probabilities": {"0": 0.7, "1": 0.3}}
    assert [bar["chosen"] for bar in js("answerBars", score)] == [True, False]
    assert js("answerBars", {"type": "noul", "noul": 0.8}) == [
        {"key": "true", "label": "yes", "value": 0.8, "chosen": True}]


def test_an_error_shows_the_envelopes_code_and_message_and_a_429s_wait():
    busy = {"error": {"code": "busy", "message": "the queue is full"}}
    assert js("errorReport", 429, busy, "1") == {"status": 429, "code": "busy", "message": "the queue is full",
                                                 "retryAfter": "1", "fields": []}
    assert js("errorReport", 401, {"error": {"code": "unauthorized", "message": "m"}}, None)["retryAfter"] is None
    assert js("errorReport", 503, {"error": {"code": "out_of_memory", "message": "m"}}, "1")["retryAfter"] == "1"
    assert js("errorReport", 400, {"error": {"code": "bad", "message": "m"}}, "1")["retryAfter"] is None
    invalid = {"error": {"code": "invalid_request", "message": "bad"},
               "detail": [{"loc": ["body", "questions", "team", "criteria"], "msg": "at most 62", "type": "x"}]}
    assert js("errorReport", 422, invalid, None)["fields"] == ["body.questions.team.criteria: at most 62"]
    assert js("errorReport", 502, None, None)["code"] == "http_502"
