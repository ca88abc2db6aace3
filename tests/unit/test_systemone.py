"""The System One surface over a fake model: /v1/models, /v1/systemone and the batch; the translation onto
predict(), the re-keying of its answers, chunking, every refusal with FastAPI's detail, and encoded bodies."""
from __future__ import annotations

import asyncio
import gzip
import json
import time
from types import SimpleNamespace

import pytest
from backports import zstd

from shim.cycle import Cycle
from shim.errors import OUT_OF_MEMORY_WORDS, Failure, ModelFailure
from shim.settings import ShimSettings

from .fake_model import CALIBRATION, FACTS, FakeModel
from .shim_helpers import AUTH, client_for, make_settings

pytestmark = pytest.mark.anyio
CANONICAL = f"internlm/Intern-Decision-4B@{'f' * 12}"
NAMES = [CANONICAL, "internlm/Intern-Decision-4B", "Intern-Decision-4B"]


@pytest.fixture
def model():
    return FakeModel(base={"billing": 1.0, "1": 0.5, "yes": 0.25})


@pytest.fixture
async def client(model):
    async with client_for(model) as client:
        yield client


def mixed(**overrides) -> dict:
    body = {"model": "Intern-Decision-4B", "state": "The customer was charged twice and asks for the money back.",
            "questions": {
                "team": {"type": "choice", "instructions": "Which team?",
                         "criteria": {"delivery": "Shipping", "billing": {"handles": ["refunds", "payments"]}}},
                "urgency": {"type": "score", "instructions": None, "criteria": ["Low", ["Medium", 1], "High"]},
                "refund": {"type": "noul", "instructions": {"ask": "refund?"},
                           "criteria": {"true": "Asks for a refund", "false": None}},
            }}
    body.update(overrides)
    return body


def many(count: int) -> dict:
    return {f"q{n}": {"type": "noul", "instructions": f"question {n}?"} for n in range(1, count + 1)}


async def test_models_lists_the_canonical_name_its_aliases_and_the_operators(model):
    async with client_for(model, extra_model_names="jev-latest") as client:
        assert (await client.get("/v1/models")).status_code == 401
        assert (await client.head("/v1/models")).status_code == 401
        assert (await client.post("/v1/models", headers=AUTH)).status_code == 405
        response = await client.get("/v1/models", headers=AUTH)
    assert response.status_code == 200
    entries = response.json()["models"]
    assert [entry["name"] for entry in entries] == NAMES + ["jev-latest"]
    assert all(entry["release_date"] == "2026-09-30" for entry in entries)
    assert [entry.get("alias_of") for entry in entries] == [None] + [CANONICAL] * 3
    assert entries[0]["revision"] == FACTS["revision"] and entries[0]["inference_sha256"] == FACTS["inference_sha256"]
    assert entries[0]["limits"] == {"max_questions_per_call": 16, "max_questions_per_request": 64,
                                    "max_options_per_question": 62, "max_tokens_per_call": 8192,
                                    "max_batch_items": 32}
    assert response.headers["x-typesafe-request-id"] == response.headers["x-request-id"]


async def test_three_types_answer_under_the_callers_names_with_predicts_numbers(client, model):
    response = await client.post("/v1/systemone", json=mixed(), headers={**AUTH, "X-Request-Id": "req-1"})
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == response.headers["x-typesafe-request-id"] == "req-1"
    body = response.json()
    native = model.answer_for(model.calls[0])["answers"]
    assert body["model"] == CANONICAL
    assert list(body["answers"]) == ["team", "urgency", "refund"]
    team, urgency, refund = (body["answers"][name] for name in ("team", "urgency", "refund"))
    assert team == {"type": "choice", "choice": native["team"]["choice"], "confidence": native["team"]["confidence"],
                    "probabilities": native["team"]["probabilities"], "x_native": native["team"]}
    assert list(team["probabilities"]) == ["delivery", "billing"] and team["choice"] == "billing"
    assert urgency["score"] == native["urgency"]["score"] and urgency["confidence"] == native["urgency"]["confidence"]
    assert urgency["probabilities"] == native["urgency"]["probabilities"]
    assert urgency["legend"] == {"0": "Low", "1": ["Medium", 1], "2": "High"}
    assert refund == {"type": "noul", "noul": native["refund"]["noul"], "x_native": native["refund"]}
    assert body["usage"] == {"input_tokens": 130, "output_tokens": 3}
    assert body["x_calls"] == [{"index": 0, "questions": ["team", "urgency", "refund"], "input_tokens": 130,
                                "prompt_sha256": "sha-of-call-1", "inference_ms": 12.5}]
    assert body["x_calibration"] == CALIBRATION and body["x_prompt_version"] == FACTS["prompt_version"]
    assert body["x_model_facts"]["revision"] == FACTS["revision"]
    assert model.request_ids == ["req-1"]


TYPESAFE_RESPONSE_FIELDS = {"model", "answers", "usage"}
TYPESAFE_ANSWER_FIELDS = {"type", "choice", "score", "noul", "confidence", "probabilities", "legend"}


async def test_every_field_typesafe_does_not_define_carries_the_x_prefix(client):
    response = await client.post("/v1/systemone", json=mixed(), headers=AUTH)
    body = response.json()
    assert {key for key in body if not key.startswith("x_")} == TYPESAFE_RESPONSE_FIELDS
    assert {"x_calls", "x_calibration", "x_prompt_version", "x_model_facts"} <= set(body)
    for name, answer in body["answers"].items():
        assert {key for key in answer if not key.startswith("x_")} <= TYPESAFE_ANSWER_FIELDS, name
        assert "x_native" in answer, name


async def test_floats_are_written_with_a_decimal_point(client, model):
    model.base = {"billing": 1000.0}  # the choice's probability is 1.0 exactly
    response = await client.post("/v1/systemone", json=mixed(), headers=AUTH)
    assert b'"confidence":1.0' in response.content and b'"confidence":1' + b"," not in response.content


async def test_the_translation_onto_predict(client, model):
    assert (await client.post("/v1/systemone", json=mixed(), headers=AUTH)).status_code == 200
    assert model.calls == [{"state": mixed()["state"], "questions": {
        "team": {"type": "choice", "instructions": "Which team?",
                 "criteria": {"delivery": "Shipping", "billing": '{"handles": ["refunds", "payments"]}'}},
        "urgency": {"type": "score", "criteria": ["Low", '["Medium", 1]', "High"]},
        "refund": {"type": "noul", "instructions": '{"ask": "refund?"}', "criteria": {"true": "Asks for a refund"}},
    }}]


async def test_a_null_choice_description_is_empty_and_all_null_noul_criteria_fall_back(client, model):
    body = mixed(questions={"a": {"type": "choice", "criteria": {"x": None, "y": "é"}},
                            "b": {"type": "noul", "criteria": {"true": None, "false": None}},
                            "c": {"type": "noul", "criteria": None}})
    assert (await client.post("/v1/systemone", json=body, headers=AUTH)).status_code == 200
    assert model.calls[0]["questions"] == {"a": {"type": "choice", "criteria": {"x": "", "y": "é"}},
                                           "b": {"type": "noul"}, "c": {"type": "noul"}}


@pytest.mark.parametrize("state", [{}, [], ""])
async def test_an_empty_state_is_a_state_as_typesafes_schema_has_it(client, model, state):
    assert (await client.post("/v1/systemone", json=mixed(state=state), headers=AUTH)).status_code == 200
    assert model.calls[0]["state"] == state


async def test_noul_criteria_keys_besides_true_and_false_are_left_out_as_the_schema_ignores_them(client, model):
    body = mixed(questions={"q": {"type": "noul", "criteria": {"yes": "x", "false": "No refund", "maybe": None}}})
    assert (await client.post("/v1/systemone", json=body, headers=AUTH)).status_code == 200
    assert model.calls[0]["questions"] == {"q": {"type": "noul", "criteria": {"false": "No refund"}}}


async def test_above_16_questions_are_chunked_greedily_and_the_calls_shown(client, model):
    response = await client.post("/v1/systemone", json=mixed(questions=many(40)), headers=AUTH)
    body = response.json()
    assert [len(call["questions"]) for call in model.calls] == [16, 16, 8]
    assert [call["questions"] for call in body["x_calls"]] == [[f"q{n}" for n in range(start, end)]
                                                               for start, end in ((1, 17), (17, 33), (33, 41))]
    assert list(body["answers"]) == [f"q{n}" for n in range(1, 41)]
    assert body["usage"] == {"input_tokens": 260 + 260 + 180, "output_tokens": 40}
    assert len(model.request_ids) == 1  # one inference request for all three calls


@pytest.mark.parametrize("change, loc, message", [
    ({"model": "intern-decision-4b"}, ["body", "model"], "unknown model 'intern-decision-4b'; this service answers "
     f"to '{CANONICAL}', 'internlm/Intern-Decision-4B', 'Intern-Decision-4B' (exact, case-sensitive)"),
    ({"model": None}, ["body", "model"], "must be a string"),
    ({"state": 3}, ["body", "state"], "must be a string, object or array"),
    ({"state": None}, ["body", "state"], "must be a string, object or array"),
    ({"questions": {}}, ["body", "questions"], "must hold 1..64 questions (MAX_DECISIONS), got 0"),
    ({"questions": many(65)}, ["body", "questions"], "must hold 1..64 questions (MAX_DECISIONS), got 65"),
    ({"questions": {"": {"type": "noul"}}}, ["body", "questions", ""], "question names must be nonempty strings"),
    ({"questions": {"spot": {"type": "box", "instructions": "the dent"}}}, ["body", "questions", "spot", "type"],
     "box questions need an image; this model takes no images"),
    ({"questions": {"q": {"type": "rank", "criteria": {}}}}, ["body", "questions", "q", "type"],
     "must be one of choice, score, noul"),
    ({"questions": {"q": {"type": "choice", "criteria": {str(n): None for n in range(63)}}}},
     ["body", "questions", "q", "criteria"],
     "must hold 1..62 options (the checkpoint's single-token answer symbols; TypeSafe takes up to 255), got 63"),
    ({"questions": {"q": {"type": "choice", "criteria": {}}}}, ["body", "questions", "q", "criteria"],
     "must hold 1..62 options (the checkpoint's single-token answer symbols; TypeSafe takes up to 255), got 0"),
    ({"questions": {"q": {"type": "choice", "criteria": {"a": 1}}}}, ["body", "questions", "q", "criteria", "a"],
     "must be a string, object or array or null"),
    ({"questions": {"q": {"type": "score", "criteria": {"0": "low"}}}}, ["body", "questions", "q", "criteria"],
     "must be an array of levels (a list only)"),
    ({"questions": {"q": {"type": "score", "criteria": ["low", None]}}}, ["body", "questions", "q", "criteria", 1],
     "must be a string, object or array"),
    ({"questions": {"q": {"type": "noul", "instructions": 7}}}, ["body", "questions", "q", "instructions"],
     "must be a string, object or array or null"),
    ({"assets": {"img": {"type": "image"}}}, ["body", "assets"], "this model takes no images: send no assets, "
     "null or {}"),
    ({"config": {"temperature": 0.8}}, ["body", "config", "temperature"],
     "unknown config key; this model accepts single_call"),
    ({"config": {"single_call": "yes"}}, ["body", "config", "single_call"], "must be a boolean"),
    ({"config": {"single_call": True}, "questions": many(17)}, ["body", "config", "single_call"],
     "single_call allows at most 16 questions (one call), the request has 17"),
])
async def test_refusals_are_422_with_the_field_named_before_any_model_work(client, model, change, loc, message):
    response = await client.post("/v1/systemone", json=mixed(**change), headers=AUTH)
    assert response.status_code == 422
    body = response.json()
    assert body["detail"][0]["loc"] == loc and body["detail"][0]["msg"] == message
    assert body["error"]["code"] == "invalid_request" and message in body["error"]["message"]
    assert model.calls == []


async def test_missing_fields_and_bad_json(client):
    for field in ("model", "state", "questions"):
        body = mixed()
        del body[field]
        detail = (await client.post("/v1/systemone", json=body, headers=AUTH)).json()["detail"]
        assert detail == [{"loc": ["body", field], "msg": "Field required", "type": "missing"}]
    response = await client.post("/v1/systemone", content=b"{nope", headers=AUTH)
    assert response.status_code == 422 and response.json()["detail"][0]["type"] == "json_invalid"


async def test_assets_absent_null_or_empty_and_single_call_within_16_are_accepted(client, model):
    for extra in ({"assets": None}, {"assets": {}}, {"config": {}}, {"config": {"single_call": True}}):
        assert (await client.post("/v1/systemone", json=mixed(**extra), headers=AUTH)).status_code == 200


async def test_a_model_valueerror_names_the_call_and_its_questions(client, model):
    model.fail_with = ModelFailure(Failure.INVALID, "Example has 9000 tokens, above 4096; truncation is forbidden",
                                   call=1)
    model.fail_on_call = 1
    response = await client.post("/v1/systemone", json=mixed(questions=many(20)), headers=AUTH)
    assert response.status_code == 422
    message = "call 1 (questions 17–20): Example has 9000 tokens, above 4096; truncation is forbidden"
    assert response.json() == {"error": {"code": "invalid_request", "message": message},
                               "detail": [{"loc": ["body"], "msg": message, "type": "value_error"}]}


@pytest.mark.parametrize("failure, status, retry_after", [
    (Failure.OUT_OF_MEMORY, 503, "1"), (Failure.FAILED, 500, None), (Failure.TRITON, 502, None)])
async def test_model_failures_as_on_the_semif_routes_503_with_retry_after(client, model, failure, status,
                                                                          retry_after):
    model.fail_with = ModelFailure(failure, "boom", call=0)
    response = await client.post("/v1/systemone", json=mixed(), headers=AUTH)
    assert response.status_code == status and response.headers.get("retry-after") == retry_after
    # a model_unavailable failure is told in fixed words (shim/errors/failures.py, Problem.public), the detail logged;
    # so is an out-of-memory's detail (CUDA's line), after which call failed
    message = {Failure.TRITON: "model unavailable", Failure.FAILED: "call 0 (questions 1–3): boom",
               Failure.OUT_OF_MEMORY: f"call 0 (questions 1–3): {OUT_OF_MEMORY_WORDS}"}[failure]
    assert response.json()["error"] == {"code": failure.error.code, "message": message}


async def test_an_answer_of_the_wrong_type_is_never_guessed(client, model):
    answer_for = model.answer_for
    model.answer_for = lambda request: {**answer_for(request), "answers": {
        name: {**answer, "type": "choice", "choice": "no"} if name == "refund" else answer
        for name, answer in answer_for(request)["answers"].items()}}
    response = await client.post("/v1/systemone", json=mixed(), headers=AUTH)
    assert response.status_code == 500
    assert response.json()["error"]["message"] == ("the model's answer to question 'refund' is a choice answer, "
                                                   "not a noul")


async def test_the_batch_answers_in_order_one_inference_request_per_item(client, model):
    items = [mixed(), mixed(model=CANONICAL, questions=many(17))]
    response = await client.post("/v1/systemone/batch", json={"requests": items},
                                 headers={**AUTH, "X-Request-Id": "b-1"})
    assert response.status_code == 200
    results = response.json()["results"]
    assert [list(result["answers"]) for result in results] == [["team", "urgency", "refund"], list(many(17))]
    assert [len(result["x_calls"]) for result in results] == [1, 2]
    assert model.request_ids == ["b-1.0", "b-1.1"]
    single = (await client.post("/v1/systemone", json=mixed(), headers=AUTH)).json()
    assert results[0]["answers"] == single["answers"]


async def test_every_batch_item_is_checked_before_any_model_work(client, model):
    items = [mixed(), mixed(questions={"q": {"type": "box"}})]
    response = await client.post("/v1/systemone/batch", json={"requests": items}, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "requests", 1, "questions", "q", "type"]
    assert model.calls == []
    unknown = [mixed(), mixed(model="jev-latest")]
    response = await client.post("/v1/systemone/batch", json={"requests": unknown}, headers=AUTH)
    assert response.json()["detail"][0]["loc"] == ["body", "requests", 1, "model"] and model.calls == []


@pytest.mark.parametrize("body, message", [
    ({}, "must be an array of System One requests"), ({"requests": []}, "must hold 1..3 requests"),
    ({"requests": [{}] * 4}, "must hold 1..3 requests (MAX_BATCH_ITEMS), got 4")])
async def test_the_batch_bounds(model, body, message):
    async with client_for(model, max_batch_items="3") as client:
        response = await client.post("/v1/systemone/batch", json=body, headers=AUTH)
    assert response.status_code == 422 and message in response.json()["detail"][0]["msg"]
    assert response.json()["detail"][0]["loc"] == ["body", "requests"]


async def test_the_first_failure_fails_the_batch_naming_the_item(client, model):
    model.fail_with = ModelFailure(Failure.OUT_OF_MEMORY, "CUDA out of memory", call=0)
    model.fail_on_call = 1
    items = [mixed(), mixed(), mixed()]
    response = await client.post("/v1/systemone/batch", json={"requests": items}, headers=AUTH)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    message = f"requests[1]: call 0 (questions 1–3): {OUT_OF_MEMORY_WORDS}"  # CUDA's own line: the log's only
    assert response.json() == {"error": {"code": "out_of_memory", "message": message},
                               "detail": {"error_type": "overloaded_error", "message": message}}
    assert len(model.calls) == 2  # the third item never ran


@pytest.mark.parametrize("encoding, compress", [("gzip", gzip.compress), ("zstd", zstd.compress)])
async def test_encoded_bodies_are_decoded(client, model, encoding, compress):
    raw = json.dumps(mixed()).encode()
    response = await client.post("/v1/systemone", content=compress(raw),
                                 headers={**AUTH, "Content-Encoding": encoding, "Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    plain = await client.post("/v1/systemone", content=raw, headers=AUTH)
    assert response.json()["answers"] == plain.json()["answers"]


@pytest.mark.parametrize("encoding, compress", [("gzip", gzip.compress), ("zstd", zstd.compress)])
async def test_a_small_body_that_inflates_past_the_limit_is_413(model, encoding, compress):
    bomb = compress(json.dumps(mixed(state="x" * 2_000_000)).encode())
    assert len(bomb) < 20_000
    async with client_for(model, max_body_bytes="100000", max_decode_ratio="1000000") as client:
        response = await client.post("/v1/systemone", content=bomb, headers={**AUTH, "Content-Encoding": encoding})
    assert response.status_code == 413
    assert response.json()["error"]["message"] == (f"the body is larger than 100000 bytes once its {encoding} is "
                                                   f"decoded (MAX_BODY_BYTES)")
    assert model.calls == []


async def test_other_encodings_are_415_and_a_broken_stream_422(client, model):
    response = await client.post("/v1/systemone", content=b"{}", headers={**AUTH, "Content-Encoding": "br"})
    assert response.status_code == 415 and response.json()["error"]["code"] == "unsupported_media_type"
    broken = gzip.compress(json.dumps(mixed()).encode())[:-8]
    response = await client.post("/v1/systemone", content=broken, headers={**AUTH, "Content-Encoding": "gzip"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["msg"] == "the body is not a whole gzip stream: it stops short"
    semif = await client.post("/decide", content=gzip.compress(b"{}"), headers={**AUTH, "Content-Encoding": "gzip"})
    assert semif.status_code == 422 and "detail" not in semif.json()  # decoded there too: {} lacks state


async def test_429_before_the_body_is_read(model):
    model.gate = asyncio.Event()
    async with client_for(model, max_queue="1") as client:
        held = asyncio.create_task(client.post("/v1/systemone", json=mixed(), headers=AUTH))
        while model.active == 0:
            await asyncio.sleep(0.005)
        refused = await client.post("/v1/systemone", json=mixed(), headers=AUTH)
        model.gate.set()
        assert (await held).status_code == 200
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert refused.headers["x-typesafe-request-id"] == refused.headers["x-request-id"]


@pytest.mark.parametrize("env, message", [
    ({"INTERN_DECISION_EXTRA_MODEL_NAMES": "jev-latest,,x"}, "EXTRA_MODEL_NAMES must be comma-separated"),
    ({"INTERN_DECISION_EXTRA_MODEL_NAMES": "a,a"}, "EXTRA_MODEL_NAMES names a model twice"),
    ({"INTERN_DECISION_MODEL_RELEASE_DATE": "30.09.2026"}, "MODEL_RELEASE_DATE must be a date YYYY-MM-DD"),
    ({"INTERN_DECISION_MAX_BATCH_ITEMS": "0"}, "MAX_BATCH_ITEMS must be an integer >= 1"),
])
def test_the_settings_it_adds_refuse_bad_values(env, message):
    base = {"INTERN_DECISION_API_TOKEN": "t" * 32, "INTERN_DECISION_TRITON_API_KEY": "k" * 32}
    with pytest.raises(ValueError, match=message):
        ShimSettings.from_env({**base, **env})


def test_the_settings_defaults():
    settings = make_settings()
    assert (settings.extra_model_names, settings.model_release_date, settings.max_batch_items) == ((), "2026-09-30",
                                                                                                   32)
    assert make_settings(model_release_date="2027-01-02").model_release_date == "2027-01-02"


async def test_an_unreadable_facts_page_is_502_for_models(model):
    async def no_facts():
        raise ModelFailure(Failure.TRITON, "the model has not published intern_decision_model_info yet")
    model.facts = no_facts
    async with client_for(model) as client:
        response = await client.get("/v1/models", headers=AUTH)
    assert response.status_code == 502 and response.json()["error"]["code"] == "model_unavailable"


async def test_the_upper_bounds_are_accepted(client, model):
    questions = {"levels": {"type": "score", "criteria": [f"level {n}" for n in range(62)]},
                 "options": {"type": "choice", "criteria": {f"o{n}": None for n in range(62)}}}
    response = await client.post("/v1/systemone", json=mixed(questions=questions), headers=AUTH)
    assert response.status_code == 200
    answers = response.json()["answers"]
    assert list(answers["levels"]["probabilities"]) == [str(n) for n in range(62)]
    assert list(answers["options"]["probabilities"]) == [f"o{n}" for n in range(62)]
    many_questions = await client.post("/v1/systemone", json=mixed(questions=many(64)), headers=AUTH)
    assert many_questions.status_code == 200 and len(many_questions.json()["x_calls"]) == 4


# -- errors as TypeSafe writes them, beside the envelope ---------------------------------------------------------

def typesafe_detail(response) -> dict:
    body = response.json()
    assert body["detail"] == {"error_type": body["detail"]["error_type"], "message": body["error"]["message"]}
    return body


async def test_every_non_422_error_on_the_system_one_routes_carries_typesafes_detail(model):
    async with client_for(model, max_queue="1", max_body_bytes="2048") as client:
        unauthorized = await client.get("/v1/models")
        assert unauthorized.status_code == 401
        assert typesafe_detail(unauthorized)["detail"]["error_type"] == "authentication_error"
        no_token = await client.post("/v1/systemone", json=mixed())
        assert no_token.status_code == 401 and typesafe_detail(no_token)["error"]["code"] == "unauthorized"
        too_large = await client.post("/v1/systemone", content=b"{" + b" " * 4096 + b"}",
                                      headers={**AUTH, "Content-Type": "application/json"})
        assert too_large.status_code == 413
        assert typesafe_detail(too_large)["detail"]["error_type"] == "request_too_large"
        brotli = await client.post("/v1/systemone", content=b"x", headers={**AUTH, "Content-Encoding": "br"})
        assert brotli.status_code == 415
        assert typesafe_detail(brotli)["detail"]["error_type"] == "invalid_request_error"
        missing = await client.get("/v1/nothing", headers=AUTH)
        assert missing.status_code == 404 and typesafe_detail(missing)["detail"]["error_type"] == "not_found_error"
        model.fail_with = ModelFailure(Failure.FAILED, "the readout failed")
        failed = await client.post("/v1/systemone", json=mixed(), headers=AUTH)
        assert failed.status_code == 500 and typesafe_detail(failed)["detail"] == {
            "error_type": "api_error", "message": "the readout failed"}
        assert failed.headers["x-typesafe-request-id"] == failed.headers["x-request-id"]


async def test_an_error_is_written_in_typesafes_shape_where_it_is_built_never_held_and_rewritten():
    """The System One layer adds its request id header and passes every message on as it comes: an error's start is
    sent before its body ends, its body unread (the envelope and TypeSafe's detail are built by shim/errors/)."""
    from shim.errors.codes import SCORING_FAILED
    from shim.errors.envelope import envelope
    from shim.systemone.conventions import SystemOneConventions

    sent: list[dict] = []
    start = {"type": "http.response.start", "status": 500, "headers": [(b"content-type", b"application/json")]}
    chunks = [{"type": "http.response.body", "body": b'{"error":', "more_body": True},
              {"type": "http.response.body", "body": b"not read", "more_body": False}]

    async def app(scope, receive, send):
        await send(start)
        assert len(sent) == 1
        for chunk in chunks:
            await send(chunk)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": "/v1/systemone", "state": {"cycle": Cycle("r-1")}}
    await SystemOneConventions(app)(scope, None, send)
    assert sent == [start, *chunks] and (b"x-typesafe-request-id", b"r-1") in start["headers"]
    assert envelope(SCORING_FAILED, "failed", system_one=True) == {
        "error": {"code": "scoring_failed", "message": "failed"},
        "detail": {"error_type": "api_error", "message": "failed"}}
    assert envelope(SCORING_FAILED, "failed") == {"error": {"code": "scoring_failed", "message": "failed"}}


async def test_a_422_keeps_fastapis_detail_list_even_when_refused_at_the_edge(client):
    undecodable = await client.post("/v1/systemone", content=b"not gzip",
                                    headers={**AUTH, "Content-Encoding": "gzip", "Content-Type": "application/json"})
    assert undecodable.status_code == 422
    body = undecodable.json()
    assert body["detail"] == [{"loc": ["body"], "msg": body["error"]["message"], "type": "value_error"}]
    unknown = await client.post("/v1/systemone", json=mixed(model="nobody"), headers=AUTH)
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"] == ["body", "model"]


async def test_the_semif_routes_keep_the_envelope_alone(client):
    refused = await client.post("/decide", json={})
    assert refused.status_code == 401 and refused.json() == {
        "error": {"code": "unauthorized", "message": "missing or wrong bearer token"}}
    assert "x-typesafe-request-id" not in refused.headers


# -- the same operations as MCP tools (the official client against the real stack: tests/integration/test_mcp.py)

MCP_HEADERS = {**AUTH, "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


async def mcp_call(client, method: str, params: dict | None = None, headers: dict | None = None):
    message = {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params is not None else {})}
    return await client.post("/mcp", json=message, headers=headers if headers is not None else MCP_HEADERS)


def without_call_hashes(body: dict) -> dict:
    return {**body, "x_calls": [{key: value for key, value in call.items() if key != "prompt_sha256"}
                                for call in body["x_calls"]]}


async def test_mcp_lists_the_three_tools_with_the_routes_input_schemas(client):
    import jsonschema_rs

    listed = await mcp_call(client, "tools/list")
    assert listed.status_code == 200, listed.text
    tools = {tool["name"]: tool for tool in listed.json()["result"]["tools"]}
    assert set(tools) == {"system_one", "system_one_batch", "list_models"}
    validator = jsonschema_rs.Draft202012Validator(tools["system_one"]["inputSchema"])
    assert validator.is_valid(mixed()) and not validator.is_valid({**mixed(), "questions": []})
    batch = jsonschema_rs.Draft202012Validator(tools["system_one_batch"]["inputSchema"])
    assert batch.is_valid({"requests": [mixed()]}) and not batch.is_valid({"requests": "x"})


async def test_an_mcp_tool_answers_what_the_route_answers_and_fails_as_it_fails(client, model):
    called = await mcp_call(client, "tools/call", {"name": "system_one", "arguments": mixed()},
                            {**MCP_HEADERS, "X-Request-Id": "mcp-1"})
    assert called.status_code == 200 and called.headers["x-request-id"] == "mcp-1"
    result = called.json()["result"]
    assert not result.get("isError")
    routed = await client.post("/v1/systemone", json=mixed(), headers=AUTH)
    assert result["structuredContent"] == json.loads(result["content"][0]["text"])
    assert without_call_hashes(result["structuredContent"]) == without_call_hashes(routed.json())  # the fake's
    # hash counts its calls
    assert model.request_ids == ["mcp-1", routed.headers["x-request-id"]]
    models = await mcp_call(client, "tools/call", {"name": "list_models", "arguments": {}})
    assert models.json()["result"]["structuredContent"] == (await client.get("/v1/models", headers=AUTH)).json()
    bad = await mcp_call(client, "tools/call", {"name": "system_one", "arguments": mixed(model="nobody")})
    refused = (await client.post("/v1/systemone", json=mixed(model="nobody"), headers=AUTH)).json()
    assert bad.json()["result"]["isError"] is True
    assert bad.json()["result"]["structuredContent"] == {"error": refused["error"], "detail": refused["detail"]}


@pytest.mark.parametrize("fault", ["NaN", "Infinity", "repeated key"])
async def test_mcp_arguments_are_read_as_strictly_as_the_routes_body(client, model, fault):
    """A text the SDK's reader would take: the tool answers the route's 422 as a tool error, and the model is never
    called; the same text sent to the route is refused with the same error."""
    arguments = json.dumps(mixed())
    arguments = {"NaN": arguments.replace('"state": ', '"state": NaN, "x": ', 1),
                 "Infinity": arguments.replace('"state": ', '"state": [Infinity], "x": ', 1),
                 "repeated key": arguments.replace('"model": ', '"model": "other", "model": ', 1)}[fault]
    text = '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "system_one", "arguments": %s}}'
    called = await client.post("/mcp", content=(text % arguments).encode(),
                               headers={**MCP_HEADERS, "Content-Type": "application/json"})
    routed = await client.post("/v1/systemone", content=arguments.encode(),
                               headers={**AUTH, "Content-Type": "application/json"})
    assert called.status_code == 200 and routed.status_code == 422
    result = called.json()["result"]
    assert result["isError"] is True and result["structuredContent"]["error"]["code"] == "invalid_request"
    assert result["structuredContent"] == {"error": routed.json()["error"], "detail": routed.json()["detail"]}
    assert model.calls == []


async def test_every_mcp_method_needs_the_token(client, model):
    for method in ("initialize", "tools/list"):
        refused = await mcp_call(client, method, {}, {k: v for k, v in MCP_HEADERS.items() if k != "Authorization"})
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    assert model.calls == []


async def test_mcp_is_off_with_its_setting(model):
    async with client_for(model, mcp="0") as client:
        assert (await mcp_call(client, "tools/list")).status_code == 404


# -- one parse per /mcp body, none of a large one on the event loop

def nested_groups(size: int, depth: int = 56) -> bytes:
    """About `size` bytes of state: 56-deep nested arrays, each around a 400-byte string, within the values bound."""
    group = b"[" * depth + b'"' + b"x" * 400 + b'"' + b"]" * depth
    return b"[" + b",".join([group] * (size // (len(group) + 1))) + b"]"


# The body: about 1 MiB of state, 56-deep nested arrays and nothing else.
NESTED_ARRAYS = b"[" + b",".join([b"[" * 56 + b"]" * 56] * 9000) + b"]"


def tool_call_text(state: bytes) -> bytes:
    arguments = json.dumps(mixed(state="STATE")).encode().replace(b'"STATE"', state)
    return (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "system_one", "arguments": '
            + arguments + b"}}")


@pytest.fixture
def sdk_parses(monkeypatch) -> list[int]:
    """The sizes of the texts the MCP SDK's transport parses (on the event loop)."""
    import pydantic_core
    from mcp.server import streamable_http

    sizes: list[int] = []

    def noting(data, *args, **kwargs):
        sizes.append(len(data))
        return pydantic_core.from_json(data, *args, **kwargs)

    monkeypatch.setattr(streamable_http, "pydantic_core", SimpleNamespace(from_json=noting))
    return sizes


async def test_a_large_tool_call_is_parsed_once_and_the_sdk_parses_only_the_message_around_it(client, model,
                                                                                              sdk_parses):
    from shim.systemone.mcp_body import SDK_MESSAGE_BYTES

    text = tool_call_text(nested_groups(1_000_000))
    called = await client.post("/mcp", content=text, headers={**MCP_HEADERS, "Content-Type": "application/json"})
    assert called.status_code == 200, called.text[:300]
    result = called.json()["result"]
    assert not result.get("isError"), result
    assert model.calls[0]["state"] == json.loads(nested_groups(1_000_000))
    assert len(sdk_parses) == 1 and sdk_parses[0] <= SDK_MESSAGE_BYTES < len(text) // 100


@pytest.mark.parametrize("state, status", [(NESTED_ARRAYS, 422), (nested_groups(1_000_000), 200)],
                         ids=["bare", "within the bounds"])
async def test_large_tool_calls_leave_health_answering(client, state, status):
    """Eight 1 MB tool calls of 56-deep nested arrays at once (before: /health stalled seconds, past a balancer's 3 s
    check): refused off the loop when over the values bound, parsed there once when within it."""
    text = tool_call_text(state)
    waits, sending = [], True

    async def probe():
        while sending:
            started = time.perf_counter()
            assert (await client.get("/health")).status_code in (200, 503)
            waits.append(time.perf_counter() - started)
            await asyncio.sleep(0.005)

    prober = asyncio.create_task(probe())
    await asyncio.sleep(0.02)
    called = await asyncio.gather(*[client.post("/mcp", content=text, headers={
        **MCP_HEADERS, "Content-Type": "application/json"}) for _ in range(8)])
    sending = False
    await prober
    assert [answer.status_code for answer in called] == [status] * 8
    assert len(waits) >= 3 and max(waits) < 1.0, max(waits)


async def test_a_large_mcp_body_that_is_not_strict_is_refused_before_the_sdk_reads_it(client, model, sdk_parses):
    text = tool_call_text(nested_groups(200_000)[:-1] + b", NaN]")
    refused = await client.post("/mcp", content=text, headers={**MCP_HEADERS, "Content-Type": "application/json"})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_request"
    assert "not finite" in refused.json()["error"]["message"]
    assert sdk_parses == [] and model.calls == []


async def test_an_mcp_message_large_besides_a_tools_arguments_is_413(client, model, sdk_parses):
    from shim.systemone.mcp_body import SDK_MESSAGE_BYTES

    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {"x": "y" * SDK_MESSAGE_BYTES}}}
    refused = await client.post("/mcp", json=message, headers=MCP_HEADERS)
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "request_too_large"
    assert sdk_parses == []


async def test_a_state_of_more_values_than_the_bound_is_refused_on_every_entry(client, model):
    """1 MiB of nested arrays, 56 deep: ~50 MiB once parsed, 1.6 GiB for a queue of 31 (the shim's limit is 2 GiB)."""
    state = NESTED_ARRAYS
    routed = await client.post("/v1/systemone", content=json.dumps(mixed(state="STATE")).encode().replace(
        b'"STATE"', state), headers={**AUTH, "Content-Type": "application/json"})
    decided = await client.post("/decide", content=json.dumps(
        {"id": "d", "state": "STATE", "question": "q?", "options": [{"id": "a", "description": "a"},
                                                                    {"id": "b", "description": "b"}]}).encode()
        .replace(b'"STATE"', state), headers={**AUTH, "Content-Type": "application/json"})
    called = await client.post("/mcp", content=tool_call_text(state),
                               headers={**MCP_HEADERS, "Content-Type": "application/json"})
    for answer in (routed, decided, called):
        assert answer.status_code == 422, answer.text[:200]
        assert "too many values" in answer.json()["error"]["message"]
    assert model.calls == []


@pytest.mark.parametrize("meta", [{"values": list(range(100_000))}, {"numbers": [10 ** 4000] * 3},
                                  {"text": "y" * 9000}],
                         ids=["many values", "long numbers", "a long string"])
async def test_a_large_mcp_message_is_refused_without_being_serialized_on_the_loop(client, model, sdk_parses,
                                                                                   monkeypatch, meta):
    """What the SDK would be handed is measured on the parsed value first: a large one is never dumped on the loop."""
    from shim.systemone import mcp

    dumped = []
    real_dumps = json.dumps
    monkeypatch.setattr(mcp.json, "dumps",
                        lambda value, **kwargs: (dumped.append(value), real_dumps(value, **kwargs))[1])
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "list_models", "arguments": {}, "_meta": meta}}
    refused = await client.post("/mcp", content=real_dumps(message).encode(),
                                headers={**MCP_HEADERS, "Content-Type": "application/json"})
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "request_too_large"
    assert [value for value in dumped if isinstance(value, dict) and value.get("jsonrpc")] == []
    assert sdk_parses == [] and model.calls == []
