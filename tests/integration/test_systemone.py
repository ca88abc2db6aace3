"""The System One surface through the real CPU stack (uvicorn shim, tritonserver, fixture checkpoint): the official
TypeSafe SDK, sync and async, and plain HTTP with Decidealot's examples; every number compared with the fixture's
predict() in this process on the same translated request."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import httpx2
import pytest
import schemathesis
from schemathesis.generation import GenerationMode
from typesafe_sdk import (
    AsyncTypeSafeClient,
    Noul,
    RetryPolicy,
    TypeSafeAuthenticationError,
    TypeSafeClient,
    TypeSafeUnprocessableEntityError,
)

from tests.fuzzing import Tally, fuzz

from .helpers import AUTH, NAME, SHIM_TOKEN, TEST_MAX_TOKENS, assert_equals_predict, held_queue, model_log_lines
from .sdk_program import QUESTIONS as SDK_QUESTIONS
from .sdk_program import STATE

pytestmark = pytest.mark.triton

# What the shim sends predict() for SDK_QUESTIONS (structured values as JSON text).
TRANSLATED = {"state": STATE, "questions": {
    "team": {"type": "choice", "instructions": "Which team should handle this request?",
             "criteria": {"billing": "Payments and refunds", "delivery": '{"handles": ["shipping", "returns"]}'}},
    "urgency": {"type": "score", "instructions": "Rate the priority.", "criteria": ["Low", "Medium", "High"]},
    "refund_requested": {"type": "noul", "instructions": "Is the customer asking for a refund?",
                         "criteria": {"true": "A refund is asked for"}},
}}


def sdk(shim, **options) -> TypeSafeClient:
    return TypeSafeClient(api_key=SHIM_TOKEN, base_url=shim.url, model=NAME, timeout=120, **options)


@pytest.fixture(scope="module")
def http(shim):
    with httpx.Client(base_url=shim.url, timeout=120) as client:
        yield client


def test_the_sdk_lists_the_models_and_refuses_a_wrong_key(shim, canonical):
    with sdk(shim) as client:
        models = client.models.list()
    assert [model.name for model in models.models] == [canonical, "internlm/Intern-Decision-4B", NAME]
    assert all(model.release_date == "2026-09-30" for model in models.models)
    with TypeSafeClient(api_key="wrong-key", base_url=shim.url) as client, \
            pytest.raises(TypeSafeAuthenticationError):
        client.models.list()


def test_the_sdk_asks_three_types_and_gets_predicts_numbers(shim, http, in_process, canonical, triton):
    _, engine = in_process
    with sdk(shim) as client:
        result = client.system_one(STATE, SDK_QUESTIONS, extra_headers={"X-Request-Id": "sdk-three-types"})
    local = engine.predict(TRANSLATED)
    assert result.model == canonical and result.request_id == "sdk-three-types"
    assert result.choices["team"].choice == local["answers"]["team"]["choice"]
    assert result.choices["team"].probabilities == local["answers"]["team"]["probabilities"]
    assert result.scores["urgency"].score == local["answers"]["urgency"]["score"]
    assert result.scores["urgency"].probabilities == {int(k): p for k, p in
                                                      local["answers"]["urgency"]["probabilities"].items()}
    assert result.scores["urgency"].legend == {0: "Low", 1: "Medium", 2: "High"}
    assert result.nouls["refund_requested"].noul == local["answers"]["refund_requested"]["noul"]
    assert result.usage.input_tokens == local["usage"]["input_tokens"]
    assert result.usage.output_tokens == local["usage"]["output_tokens"] == 3
    body = result.raw_http_response.json()
    assert_equals_predict(body["answers"], local)
    assert list(body["answers"]) == list(SDK_QUESTIONS)
    assert body["x_calibration"] == local["calibration"]
    assert [call["questions"] for call in body["x_calls"]] == [list(SDK_QUESTIONS)]
    assert model_log_lines(triton, "sdk-three-types.0")


def test_the_async_sdk_and_40_questions_in_three_calls(shim, in_process):
    _, engine = in_process
    questions = {f"step{n}": Noul(instructions=f"Is step {n} needed?") for n in range(40)}

    async def ask():
        async with AsyncTypeSafeClient(api_key=SHIM_TOKEN, base_url=shim.url, model=NAME, timeout=120) as client:
            return await client.models.list(), await client.system_one({"ticket": 4512}, questions)

    models, result = asyncio.run(ask())
    assert len(models.models) == 3
    body = result.raw_http_response.json()
    assert [len(call["questions"]) for call in body["x_calls"]] == [16, 16, 8]
    names = list(questions)
    for call, start in zip(body["x_calls"], (0, 16, 32)):
        chunk = names[start:start + len(call["questions"])]
        assert call["questions"] == chunk
        local = engine.predict({"state": {"ticket": 4512}, "questions": {
            name: {"type": "noul", "instructions": f"Is step {name[4:]} needed?"} for name in chunk}})
        assert call["input_tokens"] == local["usage"]["input_tokens"]
        assert_equals_predict(body["answers"], local)
    assert result.usage.input_tokens == sum(call["input_tokens"] for call in body["x_calls"])
    assert result.usage.output_tokens == 40


def test_the_sdk_compresses_a_large_body_with_zstd(shim, in_process):
    _, engine = in_process
    sent = []
    state = {"log": ["Entry: the order was checked, weighed and filed for review."] * 40}
    client = httpx2.Client(event_hooks={"request": [lambda request: sent.append(dict(request.headers))]},
                           timeout=120)
    with sdk(shim, http_client=client) as typesafe:
        result = typesafe.system_one(state, {"team": SDK_QUESTIONS["team"]})
    assert sent[-1]["content-encoding"] == "zstd"
    local = engine.predict({"state": state, "questions": {"team": TRANSLATED["questions"]["team"]}})
    assert_equals_predict(result.raw_http_response.json()["answers"], local)


def test_the_sdk_retries_a_429_after_retry_after(shim):
    """The queue is held full by slow semif requests; the SDK's first tries are 429 busy, a later one is answered."""
    statuses = []
    client = httpx2.Client(event_hooks={"response": [lambda response: statuses.append(response.status_code)]},
                           timeout=120)
    retry = RetryPolicy(max_retries=8, backoff_initial=0.1, timeout=30)
    with held_queue(shim, 1.5), sdk(shim, http_client=client, retry=retry) as typesafe:
        result = typesafe.system_one(STATE, {"team": SDK_QUESTIONS["team"]})
    assert statuses[0] == 429 and statuses[-1] == 200 and set(statuses) == {429, 200}
    assert result.choices["team"].choice in ("billing", "delivery")


OLDEST_SDK = Path(__file__).resolve().parents[2] / ".cache" / "typesafe-sdk-oldest"
OLDEST_SDK_VERSION = (Path(__file__).resolve().parents[2] / "constraints" / "typesafe-sdk-oldest.txt") \
    .read_text().split("typesafe-sdk==")[1].strip()


def oldest_sdk(shim, action: str) -> dict:
    """tests/integration/sdk_program.py run by the oldest SDK the README supports, apart from the newest (-S: no
    site-packages, only the folder scripts/bootstrap.sh installed it into)."""
    done = subprocess.run([sys.executable, "-S", str(Path(__file__).with_name("sdk_program.py")), shim.url,
                           SHIM_TOKEN, NAME, action], env={"PYTHONPATH": str(OLDEST_SDK)}, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["version"] == OLDEST_SDK_VERSION
    return result


@pytest.mark.parametrize("action", ["sync", "async"])
def test_the_oldest_supported_sdk_asks_three_types_and_gets_predicts_numbers(shim, in_process, canonical, action):
    _, engine = in_process
    result = oldest_sdk(shim, action)
    local = engine.predict(TRANSLATED)
    assert result["model"] == canonical
    assert result["typed"] == {name: answer.get("choice", answer.get("score", answer.get("noul")))
                               for name, answer in local["answers"].items()}
    assert_equals_predict(result["body"]["answers"], local)
    assert result["body"]["usage"]["input_tokens"] == local["usage"]["input_tokens"]


def test_the_oldest_supported_sdk_lists_models_retries_a_429_and_types_a_401(shim, canonical):
    assert oldest_sdk(shim, "models")["names"] == [canonical, "internlm/Intern-Decision-4B", NAME]
    wrong = oldest_sdk(shim, "wrong_key")
    assert wrong["status"] == 401 and wrong["body"]["error"]["code"] == "unauthorized"
    # Held long enough for the program's interpreter to start and send while the queue is still full.
    with held_queue(shim, 3, settle=0.3):
        retried = oldest_sdk(shim, "retry")
    statuses = retried["statuses"]
    assert statuses[0] == 429 and statuses[-1] == 200 and set(statuses) == {429, 200}
    assert retried["choice"] in ("billing", "delivery")


def test_a_model_valueerror_is_the_sdks_typed_422_naming_the_call(shim):
    questions = {**{f"q{n}": Noul(instructions=f"Is {n} true?") for n in range(17)},
                 "long": Noul(instructions="word " * TEST_MAX_TOKENS)}
    with sdk(shim) as client, pytest.raises(TypeSafeUnprocessableEntityError) as caught:
        client.system_one(STATE, questions)
    error = caught.value
    assert error.status == 422 and error.request_id == error.headers["x-request-id"]
    message = error.body["error"]["message"]
    assert message.startswith("call 1 (questions 17–18): Example has ") and "truncation is forbidden" in message
    assert error.body["detail"] == [{"loc": ["body"], "msg": message, "type": "value_error"}]


def test_decidealots_examples_over_plain_http_and_the_batch(http, in_process, canonical):
    _, engine = in_process
    mixed = {"model": NAME, "state": {"summary": "A request changes access for an account that holds protected "
                                      "records.", "requestedBy": "automated-worker", "hasApproval": False},
             "questions": {"route": {"type": "choice", "criteria": {"standard": "Handle through the normal workflow.",
                                                                    "review": "Send to a human reviewer."}},
                           "urgency": {"type": "score", "criteria": ["routine", "important", "urgent"]},
                           "can_run": {"type": "noul", "criteria": {"true": "The request may run now.",
                                                                    "false": "The request must wait."}}}}
    single = http.post("/v1/systemone", json=mixed, headers=AUTH)
    assert single.status_code == 200, single.text
    assert single.headers["x-typesafe-request-id"] == single.headers["x-request-id"]
    local = engine.predict({"state": mixed["state"], "questions": mixed["questions"]})
    body = single.json()
    assert body["model"] == canonical and body["usage"]["input_tokens"] == local["usage"]["input_tokens"]
    assert_equals_predict(body["answers"], local)
    review = {"model": canonical, "state": "A request would delete an audit record.",
              "questions": {"review": {"type": "noul", "instructions": "Is human review needed?"}}}
    batch = http.post("/v1/systemone/batch", json={"requests": [review, mixed]}, headers=AUTH)
    assert batch.status_code == 200, batch.text
    first, second = batch.json()["results"]
    assert_equals_predict(first["answers"], engine.predict({"state": review["state"],
                                                            "questions": review["questions"]}))
    def timeless(calls: list[dict]) -> list[dict]:
        return [{key: value for key, value in call.items() if key != "inference_ms"} for call in calls]

    assert second["answers"] == body["answers"] and timeless(second["x_calls"]) == timeless(body["x_calls"])


def test_an_oom_in_a_batch_item_fails_the_batch_naming_it(http):
    fatal = "this question runs out of memory"
    ok = {"model": NAME, "state": "fine", "questions": {"a": {"type": "noul", "instructions": "Fine?"}}}
    oom = {"model": NAME, "state": {"__fixture_fault__": {"oom_when_asked": fatal}},
           "questions": {"a": {"type": "noul", "instructions": "Fine?"}, "b": {"type": "noul", "instructions": fatal}}}
    response = http.post("/v1/systemone/batch", json={"requests": [ok, oom, ok]}, headers=AUTH)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    error = response.json()["error"]
    assert error["code"] == "out_of_memory" and error["message"].startswith("requests[1]: call 0 (questions 1–2): ")
    assert "results" not in response.json()
    assert http.post("/v1/systemone", json=ok, headers=AUTH).status_code == 200


def test_the_semif_prompt_hash_is_the_same_for_the_same_prompt(http):
    options = [{"id": "refund", "description": "Refund it."}, {"id": "decline", "description": "Decline it."}]
    semif = http.post("/decide", json={"id": "x", "state": STATE, "question": "What now?", "options": options},
                      headers=AUTH).json()
    native = http.post("/v1/systemone", json={"model": NAME, "state": STATE, "questions": {"q": {
        "type": "choice", "instructions": "What now?", "criteria": {o["id"]: o["description"] for o in options}}}},
        headers=AUTH).json()
    assert native["x_calls"][0]["prompt_sha256"] == semif["prompt_sha256"]
    assert native["answers"]["q"]["probabilities"] == dict(zip(semif["option_ids"], semif["probabilities"]))


def test_schemathesis_against_the_system_one_routes(shim):
    schema = schemathesis.openapi.from_url(f"{shim.url}/openapi.json")
    tally = Tally()
    for path in ("/v1/systemone", "/v1/systemone/batch"):
        fuzz(schema, path, "POST", GenerationMode.POSITIVE, 20, tally, headers=AUTH)
        fuzz(schema, path, "POST", GenerationMode.NEGATIVE, 10, tally, headers=AUTH)
    fuzz(schema, "/v1/models", "GET", GenerationMode.POSITIVE, 2, tally, headers=AUTH)
    assert tally.total >= 61 and tally.statuses[200] > 0
