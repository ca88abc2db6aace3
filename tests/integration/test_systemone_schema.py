"""System One answers what the official SDK's own request model accepts, unless a numbered delta in docs/systemone.md
refuses it: requests generated from the SDK's SystemOneRequest JSON schema, through the real CPU stack (uvicorn shim,
tritonserver, fixture checkpoint); the empty states through both routes and the MCP tool, against predict() in this
process; every listed delta produced with the words the docs quote; the README's and the docs' examples as written."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typesafe_sdk._schemas.models import SystemOneRequest as SdkRequest
from typesafe_sdk._schemas.models import SystemOneResponse as SdkResponse

from .helpers import AUTH, NAME, SHIM_TOKEN, TEST_MAX_TOKENS, assert_equals_predict

pytestmark = pytest.mark.triton

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "systemone.md"
README = ROOT / "README.md"
QUESTIONS = {"refund": {"type": "noul", "instructions": "Is a refund asked for?"},
             "team": {"type": "choice", "criteria": {"billing": "Payments", "delivery": None}}}
MCP_HEADERS = {**AUTH, "Accept": "application/json, text/event-stream"}


def listed_deltas() -> dict[int, str]:
    """docs/systemone.md's numbered deltas: number -> the words its 422 message holds."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Deltas from TypeSafe's hosted API"):]
    items = re.split(r"^(\d+)\. ", section, flags=re.M)[1:]
    deltas = {}
    for number, body in zip(items[::2], items[1::2]):
        quoted = re.findall(r"The message holds `([^`]+)`", re.sub(r"\s+", " ", body))
        assert len(quoted) == 1, f"delta {number} quotes no message (or more than one)"
        deltas[int(number)] = quoted[0]
    return deltas


DELTAS = listed_deltas()


# --- requests from the SDK's own schema -----------------------------------------------------------------------

def json_values() -> st.SearchStrategy:
    """Any JSON value, small: what the schema's Any and {} stand for."""
    leaves = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False) \
        | st.text(max_size=12)
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


def from_schema(schema: dict, defs: dict) -> st.SearchStrategy:
    """A strategy for the values a (pydantic-written) JSON schema allows, sizes kept small; objects only with the
    properties the schema names, as the SDK's models write them."""
    if "$ref" in schema:
        return from_schema(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
    for union in ("anyOf", "oneOf"):
        if union in schema:
            return st.one_of([from_schema(choice, defs) for choice in schema[union]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind is None:
        return json_values()
    if kind == "null":
        return st.none()
    if kind == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=16)
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers(-1000, 1000)
    if kind == "number":
        return st.floats(-1000, 1000, allow_nan=False)
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {}), defs), min_size=schema.get("minItems", 0),
                        max_size=max(schema.get("minItems", 0), 4))
    assert kind == "object", schema
    if "properties" in schema:
        required = set(schema.get("required", ()))
        fields = {name: from_schema(field, defs) for name, field in schema["properties"].items()}
        return st.fixed_dictionaries({name: fields[name] for name in fields if name in required},
                                     optional={name: fields[name] for name in fields if name not in required})
    values = schema.get("additionalProperties", True)
    return st.dictionaries(st.text(max_size=8), json_values() if values is True else from_schema(values, defs),
                           min_size=schema.get("minProperties", 0), max_size=max(schema.get("minProperties", 0), 4))


OLDEST_SDK = ROOT / ".cache" / "typesafe-sdk-oldest"
# The oldest supported SDK's request model is a msgspec Struct; its JSON schema, written in a process of its own
# (-S: that SDK alone, not the newest installed beside this one).
OLDEST_SCHEMA_PROGRAM = ("import json, msgspec; from typesafe_sdk._schemas import models; "
                         "print(json.dumps(msgspec.json.schema(models.SystemOneRequest)))")


def oldest_sdk_schema() -> dict:
    done = subprocess.run([sys.executable, "-S", "-c", OLDEST_SCHEMA_PROGRAM], env={"PYTHONPATH": str(OLDEST_SDK)},
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def requests_of(schema: dict) -> st.SearchStrategy:
    """Requests the schema allows. Its model is "a name GET /v1/models returns": the stack's own name stands in for
    it (an unknown one is delta 8, produced below)."""
    return from_schema(schema, schema["$defs"]).map(lambda request: {**request, "model": NAME})


SDK_SCHEMA = SdkRequest.model_json_schema()
SDK_REQUESTS = requests_of(SDK_SCHEMA)
SCHEMAS = {"newest": lambda: SDK_SCHEMA, "oldest": oldest_sdk_schema}


def test_the_sdk_schema_is_the_one_these_requests_come_from():
    """The generator reads the SDK's schema as it is: every generated request is one the SDK's model accepts."""
    assert {"model", "state", "questions", "assets"} <= set(SDK_SCHEMA["properties"])

    @settings(max_examples=200, deadline=None, database=None)
    @given(SDK_REQUESTS)
    def accepted_by_the_sdk(request):
        SdkRequest.model_validate(request)

    accepted_by_the_sdk()


def outside_the_deltas(request: dict) -> dict:
    """The request less what the shape-level deltas refuse (images, box questions, empty names, a choice without
    options, a score without levels), a noul asked when nothing is left: what must be answered 200, every time."""
    questions = {name: question for name, question in request["questions"].items()
                 if name and question["type"] != "box" and (question["type"] == "noul" or question["criteria"])}
    return {"model": request["model"], "state": request["state"],
            "questions": questions or {"fallback": {"type": "noul"}}}


def answered_or_refused_by_a_delta(http: httpx.Client, request: dict) -> int:
    response = http.post("/v1/systemone", json=request, headers=AUTH)
    if response.status_code == 422:
        message = response.json()["error"]["message"]
        assert any(words in message for words in DELTAS.values()), f"a refusal no delta lists: {message}"
        return 422
    assert response.status_code == 200, response.text
    body = response.json()
    SdkResponse.model_validate(body)  # the answers as the SDK's own response model reads them
    assert list(body["answers"]) == list(request["questions"])
    assert [answer["type"] for answer in body["answers"].values()] == \
        [question["type"] for question in request["questions"].values()]
    return 200


# Modest counts: each answered example is a model call on the CPU stack.
GENERATED = settings(max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck))
ANSWERED = settings(GENERATED, max_examples=15)


@pytest.mark.parametrize("sdk", SCHEMAS)
def test_requests_the_sdk_schema_allows_are_answered_or_refused_by_a_listed_delta(shim, sdk):
    statuses: list[int] = []

    @GENERATED
    @given(requests_of(SCHEMAS[sdk]()))
    def answered(request):
        statuses.append(answered_or_refused_by_a_delta(http, request))

    with httpx.Client(base_url=shim.url, timeout=120) as http:
        answered()
    assert len(statuses) == 30 and 422 in statuses, statuses  # the next test holds the answered ones


@pytest.mark.parametrize("sdk", SCHEMAS)
def test_requests_the_sdk_schema_allows_outside_the_deltas_are_all_answered(shim, sdk):
    @ANSWERED
    @given(requests_of(SCHEMAS[sdk]()).map(outside_the_deltas))
    def answered(request):
        assert answered_or_refused_by_a_delta(http, request) == 200

    with httpx.Client(base_url=shim.url, timeout=120) as http:
        answered()


# --- the empty states ----------------------------------------------------------------------------------------

def mcp_call(http: httpx.Client, name: str, arguments: dict) -> dict:
    """One tools/call as plain JSON-RPC (the server is stateless: no initialize first); its structured content."""
    response = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                       "params": {"name": name, "arguments": arguments}}, headers=MCP_HEADERS)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert not result.get("isError"), result
    return result["structuredContent"]


@pytest.mark.parametrize("state", [{}, [], ""], ids=["object", "array", "string"])
def test_an_empty_state_is_answered_by_both_routes_and_the_mcp_tool_as_predict_answers_it(shim, in_process, state):
    _, engine = in_process
    request = {"model": NAME, "state": state, "questions": QUESTIONS}
    local = engine.predict({"state": state, "questions": {
        "refund": QUESTIONS["refund"], "team": {"type": "choice", "criteria": {"billing": "Payments",
                                                                               "delivery": ""}}}})
    with httpx.Client(base_url=shim.url, timeout=120) as http:
        single = http.post("/v1/systemone", json=request, headers=AUTH)
        batch = http.post("/v1/systemone/batch", json={"requests": [request]}, headers=AUTH)
        tool = mcp_call(http, "system_one", request)
        batch_tool = mcp_call(http, "system_one_batch", {"requests": [request]})
    assert single.status_code == 200 and batch.status_code == 200, (single.text, batch.text)
    for body in (single.json(), batch.json()["results"][0], tool, batch_tool["results"][0]):
        assert_equals_predict(body["answers"], local)
        assert body["usage"] == {"input_tokens": local["usage"]["input_tokens"], "output_tokens": 2}


# --- every listed delta, produced -----------------------------------------------------------------------------

def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def asking(**change) -> dict:
    return {"model": NAME, "state": {"ticket": 4512}, "questions": QUESTIONS, **change}


DELTA_BODIES = {
    1: asking(assets={"photo": {"type": "image", "format": "png", "data_base64": "iVBORw0KGgo="}}),
    2: asking(questions={"spot": {"type": "box", "instructions": "the dent"}}),
    3: asking(questions={"team": {"type": "choice", "criteria": {}}}),
    4: asking(questions={f"q{n}": {"type": "noul"} for n in range(65)}),
    5: asking(questions={"": {"type": "noul"}}),
    6: asking(state="word " * TEST_MAX_TOKENS),
    7: asking(state="the answer goes after <decision>"),
    8: asking(model="jev-latest"),
    9: asking(state=nested(70)),
    10: asking(state={"weight": float("nan")}),
    11: asking(config={"temperature": 0.2}),
}


def test_every_delta_the_docs_list_is_produced_with_the_words_they_quote(shim):
    assert sorted(DELTAS) == list(range(1, len(DELTAS) + 1)), "the deltas are numbered without a gap"
    assert set(DELTA_BODIES) == set(DELTAS), "each listed delta has a request here that produces it"
    with httpx.Client(base_url=shim.url, timeout=120) as http:
        for number, body in DELTA_BODIES.items():
            SdkRequest.model_validate(body)  # each is a request the SDK's own model accepts
            response = http.post("/v1/systemone", content=_json_text(body),
                                 headers={**AUTH, "Content-Type": "application/json"})
            assert response.status_code == 422, (number, response.text)
            assert DELTAS[number] in response.json()["error"]["message"], (number, response.text)


def _json_text(body: dict) -> bytes:
    return json.dumps(body).encode()  # NaN written as NaN, as Python's JSON writer does


# --- the examples as written ----------------------------------------------------------------------------------

def fenced(path: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def test_the_readme_system_one_example_runs_as_written(shim, tmp_path):
    """Run where ./dev up would have left its token file, against this stack's address."""
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "dev-token").write_text(SHIM_TOKEN + "\n")
    [program] = [block for block in fenced(README, "python") if "TypeSafeClient" in block]
    done = subprocess.run([sys.executable, "-c", program.replace("http://127.0.0.1:8080", shim.url)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] in ("billing", "delivery")


def test_the_curl_examples_of_the_readme_and_the_docs_answer_200(shim, tmp_path):
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "dev-token").write_text(SHIM_TOKEN)
    examples = [block for block in fenced(README, "bash") if "/v1/systemone" in block]
    examples += [block for block in fenced(DOCS, "bash")]
    assert len(examples) == 3
    for example in examples:
        command = example.replace("http://127.0.0.1:8080", shim.url).replace("http://host:8080", shim.url)
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "TOKEN": SHIM_TOKEN})
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        answer = answer["result"]["structuredContent"] if "jsonrpc" in answer else answer
        assert answer["answers"]["team"]["choice"] in ("billing", "delivery"), done.stdout
