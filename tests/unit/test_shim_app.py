"""The shim's HTTP surface over a fake Triton model: auth, mapping, results, orderings, validation, limits,
failures and concurrency (the contract's "Tests" section for the shim)."""
from __future__ import annotations

import asyncio
import json
import logging
import math

import httpx
import pytest

from shim.app import build_service, create_app
from shim.errors import MODEL_NOT_READY, OUT_OF_MEMORY_WORDS, Failure, ModelFailure, Problem, from_triton, unreachable
from shim.errors.handlers import UNEXPECTED_FAILURE
from shim.health import CHUNKING
from shim.metrics import ShimMetrics

from .fake_model import CALIBRATION, FACTS, GRAPHS, FakeModel
from .shim_helpers import AUTH, TOKEN, client_for, decide_body, make_settings, options, shared_body

pytestmark = pytest.mark.anyio


@pytest.fixture
def model():
    return FakeModel(base={"approve": 1.0, "reject": 0.0})


@pytest.fixture
async def client(model):
    async with client_for(model) as client:
        yield client


# --- Auth -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                                     {"Authorization": f"Basic {TOKEN}"}, {"Authorization": f"Bearer {TOKEN}x"}])
async def test_post_without_the_right_bearer_is_401_and_never_reaches_the_model(client, model, headers):
    for path, body in (("/decide", decide_body()), ("/decide/shared", shared_body(1))):
        response = await client.post(path, json=body, headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"
    assert model.calls == []


async def test_bearer_scheme_is_case_insensitive(client):
    response = await client.post("/decide", json=decide_body(), headers={"Authorization": f"bEaReR {TOKEN}"})
    assert response.status_code == 200


async def test_health_needs_no_auth_and_reports_the_model_and_limits(client):
    response = await client.get("/health")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "model": {key: FACTS[key] for key in FACTS if key not in ("vram_cap_gib", "max_tokens")}, "graphs": GRAPHS,
        "vram_cap_gib": 35.0, "max_tokens": 8192, "max_decisions": 64, "max_questions_per_call": 16,
        "chunking": CHUNKING, "workloads": []}


async def test_health_says_what_the_graphs_do_now_not_what_start_up_chose(client, model):
    from shim.port.graph_series import LiveGraphs

    model.live_graphs = LiveGraphs("off", "replaying 289x3 failed: RuntimeError: x", 0,
                                   {"out_of_memory": 1, "budget": 0, "differs": 0}, 0, 40, 9)
    body = (await client.get("/health")).json()
    assert body["model"]["cuda_graphs"] == "exact"  # start-up's choice, from the info gauge
    assert body["graphs"] == {"mode": "off", "reason": "replaying 289x3 failed: RuntimeError: x",
                              "shapes_captured": 0, "shapes_refused": {"out_of_memory": 1, "budget": 0, "differs": 0},
                              "memory_bytes": 0, "calls_replayed": 40, "calls_eager": 9}
    model.live_graphs = None  # a model that publishes no graph series is still usable
    response = await client.get("/health")
    assert response.status_code == 200 and response.json()["graphs"] is None


async def test_health_is_503_in_the_envelope_when_the_model_is_not_ready(client, model):
    model.is_ready = Problem(MODEL_NOT_READY, "the model 'intern_decision' is not ready")
    response = await client.get("/health")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "error": {
        "code": "model_unavailable", "message": "model not ready"}}


async def test_health_facts_are_cached_and_re_read_after_their_ttl():
    from shim.port.facts_cache import FACTS_TTL_SECONDS, FactsCache

    model, now = FakeModel(), [100.0]
    reads = []
    facts_of = model.facts

    async def counted_facts():
        reads.append(now[0])
        return await facts_of()

    model.facts = counted_facts
    cache = FactsCache(model, clock=lambda: now[0])
    assert (await cache.get()).max_tokens == 8192
    now[0] += FACTS_TTL_SECONDS
    await cache.get()
    assert reads == [100.0]
    now[0] += 0.001
    await cache.get()
    assert reads == [100.0, 100.0 + FACTS_TTL_SECONDS + 0.001]
    cache.clear()
    await cache.get()
    assert len(reads) == 3


# --- Mapping ----------------------------------------------------------------------------------------------------

async def test_decide_sends_one_call_with_field_q_and_the_criteria_in_the_callers_order(client, model):
    body = decide_body(options=options("reject", "escalate", "approve"))
    response = await client.post("/decide", json=body, headers=AUTH)
    assert response.status_code == 200
    assert model.calls == [{"state": {"order": "shipped"}, "questions": {"q": {
        "type": "choice", "instructions": "Approve the refund?",
        "criteria": {"reject": "reject described", "escalate": "escalate described",
                     "approve": "approve described"}}}}]
    assert list(model.calls[0]["questions"]["q"]["criteria"]) == ["reject", "escalate", "approve"]


async def test_shared_sends_q1_to_qn_over_the_shared_state(client, model):
    response = await client.post("/decide/shared", json=shared_body(3), headers=AUTH)
    assert response.status_code == 200
    assert len(model.calls) == 1
    assert model.calls[0]["state"] == "shared state"
    assert list(model.calls[0]["questions"]) == ["q1", "q2", "q3"]
    assert [q["instructions"] for q in model.calls[0]["questions"].values()] == \
        ["question 0?", "question 1?", "question 2?"]


@pytest.mark.parametrize("count, sizes", [(17, [16, 1]), (40, [16, 16, 8])])
async def test_chunks_of_16_with_results_in_request_order(client, model, count, sizes):
    response = await client.post("/decide/shared", json=shared_body(count), headers=AUTH)
    assert response.status_code == 200
    assert [len(call["questions"]) for call in model.calls] == sizes
    results = response.json()["results"]
    assert [result["id"] for result in results] == [f"d{n}" for n in range(count)]
    expected_calls = [{"index": index, "field": "q" if size == 1 else f"q{k + 1}", "questions": size}
                      for index, size in enumerate(sizes) for k in range(size)]
    assert [result["call"] for result in results] == expected_calls
    timing = response.json()["timing"]
    assert timing["calls"] == len(sizes) and timing["questions_per_call"] == sizes
    assert timing["batch_size"] == count
    assert timing["input_tokens"] == [100 + 10 * size for size in sizes]
    assert timing["inference_seconds"] == pytest.approx(0.0125 * len(sizes))
    assert timing["total_seconds"] >= 0


async def test_decision_ids_never_appear_in_a_call(client, model):
    body = shared_body(20, orderings="rotations")
    for n, decision in enumerate(body["decisions"]):
        decision["id"] = f"private-decision-id-{n}"
    assert (await client.post("/decide/shared", json=body, headers=AUTH)).status_code == 200
    assert "private-decision-id" not in json.dumps(model.calls)


async def test_request_id_travels_with_the_one_triton_request_and_comes_back(client, model):
    response = await client.post("/decide/shared", json=shared_body(17),
                                 headers={**AUTH, "X-Request-Id": "caller-42"})
    assert response.headers["x-request-id"] == "caller-42"
    assert model.request_ids == ["caller-42"] and len(model.calls) == 2


@pytest.mark.parametrize("method, path, headers, body, status", [
    ("POST", "/decide", {}, decide_body(), 401),
    ("POST", "/decide", AUTH, {"id": ""}, 422),
    ("GET", "/nowhere", {}, None, 404),
    ("GET", "/health", {}, None, 200),
])
async def test_every_response_carries_a_request_id(client, method, path, headers, body, status):
    given = await client.request(method, path, headers={**headers, "X-Request-Id": "abc"}, json=body)
    assert (given.status_code, given.headers["x-request-id"]) == (status, "abc")
    generated = await client.request(method, path, headers={**headers, "X-Request-Id": "has space"}, json=body)
    assert len(generated.headers["x-request-id"]) == 32


# --- Result -----------------------------------------------------------------------------------------------------

async def test_plain_result_passes_the_models_numbers_through_re_keyed(client, model):
    body = decide_body(options=options("reject", "approve"))
    result = (await client.post("/decide", json=body, headers=AUTH)).json()
    native = model.answer_for(model.calls[0])["answers"]["q"]
    assert result["id"] == "refund-1"
    assert result["option_ids"] == ["reject", "approve"]
    assert result["probabilities"] == [native["probabilities"]["reject"], native["probabilities"]["approve"]]
    assert (result["top"], result["confidence"]) == (native["choice"], native["confidence"]) == \
        ("approve", native["probabilities"]["approve"])
    assert result["native"] == native
    assert result["calibration"] == CALIBRATION
    assert result["input_tokens"] == 110
    assert result["prompt_sha256"] == "sha-of-call-1" and result["prompt_version"] == FACTS["prompt_version"]
    assert result["model"]["revision"] == FACTS["revision"]
    assert result["probability_status"] == "calibrated" and "softmax" in result["readout"]
    assert result["call"] == {"index": 0, "field": "q", "questions": 1}
    assert result["forward_seconds"] == 0.0125 and result["total_seconds"] >= 0


async def test_an_answer_missing_an_option_id_is_500_scoring_failed(client, model):
    model.drop_option = "reject"
    response = await client.post("/decide", json=decide_body(), headers=AUTH)
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "scoring_failed"
    assert "reject" in response.json()["error"]["message"]


async def test_an_answer_that_cannot_be_read_is_500_scoring_failed(client, model):
    answer_for = model.answer_for
    model.answer_for = lambda request: {key: value for key, value in answer_for(request).items() if key != "timing"}
    response = await client.post("/decide", json=decide_body(), headers=AUTH)
    assert response.status_code == 500
    message = "the model's answer to call 0 cannot be read: the answer lacks 'timing'"
    assert response.json()["error"] == {"code": "scoring_failed", "message": message}


# --- Orderings --------------------------------------------------------------------------------------------------

async def test_rotations_cancel_a_position_bias_exactly():
    base = {"a": 0.3, "b": 1.1, "c": -0.4, "d": 0.2}
    model = FakeModel(base=base, position_bias=[2.0, 0.5, -1.0, 0.1] + [0.0] * 12)
    async with client_for(model) as client:
        body = decide_body(options=options("a", "b", "c", "d"), orderings="rotations")
        result = (await client.post("/decide", json=body, headers=AUTH)).json()
    unbiased = [math.exp(base[k]) for k in "abcd"]
    assert result["combined"]["probabilities"] == pytest.approx([u / sum(unbiased) for u in unbiased], abs=1e-12)
    assert result["combined"]["top"] == "b"
    assert [r["id"] for r in result["orderings"]] == ["refund-1#o0", "refund-1#o1", "refund-1#o2", "refund-1#o3"]
    assert [r["option_ids"] for r in result["orderings"]] == [list("abcd"), list("bcda"), list("cdab"), list("dabc")]
    assert len(model.calls) == 4 and all(list(call["questions"]) == ["q"] for call in model.calls)


async def test_agreement_and_spread_come_from_the_orderings():
    model = FakeModel(base={"a": 0.0, "b": 0.0}, position_bias=[1.0, 0.0] + [0.0] * 14)
    async with client_for(model) as client:
        body = decide_body(options=options("a", "b"), orderings="rotations")
        result = (await client.post("/decide", json=body, headers=AUTH)).json()
    high, low = 1 / (1 + math.exp(-1)), 1 / (1 + math.exp(1))
    assert [r["top"] for r in result["orderings"]] == ["a", "b"]
    assert result["combined"]["top"] == "a"  # an exact tie goes to the first in the caller's order
    assert result["combined"]["agreement"] == 0.5
    assert result["combined"]["spread"]["a"] == pytest.approx([low, high])
    assert result["combined"]["spread"]["b"] == pytest.approx([low, high])


async def test_all_sends_n_factorial_orderings_and_is_422_above_4_options(client, model):
    body = decide_body(options=options("a", "b", "c", "d"), orderings="all")
    result = (await client.post("/decide", json=body, headers=AUTH)).json()
    assert result["combined"]["orderings"] == 24 and len(model.calls) == 24
    body = decide_body(options=options("a", "b", "c", "d", "e"), orderings="all")
    response = await client.post("/decide", json=body, headers=AUTH)
    assert response.status_code == 422 and "orderings 'all'" in response.json()["error"]["message"]


async def test_mixed_request_keeps_plain_results_and_wave_0_equals_the_plain_request(model):
    plain_model = FakeModel(base=model.base)
    mixed = shared_body(3)
    mixed["decisions"][1]["orderings"] = "rotations"
    mixed["decisions"][1]["options"] = options("approve", "reject", "hold")
    plain = json.loads(json.dumps(mixed))
    del plain["decisions"][1]["orderings"]
    async with client_for(model) as client:
        mixed_results = (await client.post("/decide/shared", json=mixed, headers=AUTH)).json()["results"]
    async with client_for(plain_model) as client:
        plain_results = (await client.post("/decide/shared", json=plain, headers=AUTH)).json()["results"]
    assert model.calls[0] == plain_model.calls[0]
    assert [len(call["questions"]) for call in model.calls] == [3, 1, 1]
    for index in (0, 2):
        assert mixed_results[index] == {**plain_results[index], "prompt_sha256": mixed_results[index]["prompt_sha256"]}
    assert mixed_results[1]["orderings"][0]["probabilities"] == plain_results[1]["probabilities"]


async def test_orderings_count_toward_max_decisions(model):
    async with client_for(model, max_decisions="4") as client:
        body = shared_body(2, orderings="rotations")
        body["decisions"][0]["options"] = options("a", "b", "c")
        response = await client.post("/decide/shared", json=body, headers=AUTH)
    assert response.status_code == 422
    assert "scores 5 orderings" in response.json()["error"]["message"]
    assert model.calls == []


# --- Validation -------------------------------------------------------------------------------------------------

def _with(body: dict, path: list, value) -> dict:
    body = json.loads(json.dumps(body))
    target = body
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return body


@pytest.mark.parametrize("path, value, field", [
    (["options"], options("a"), "options"),
    (["options"], options(*[f"o{n}" for n in range(17)]), "options"),
    (["options"], options("a", "a"), "options[1].id"),
    (["options"], [{"id": 1, "description": "x"}, {"id": "b", "description": "y"}], "options[0].id"),
    (["options"], [{"id": "a", "description": None}, {"id": "b", "description": "y"}], "options[0].description"),
    (["options"], "a,b", "options"),
    (["id"], "", "id"), (["id"], KeyError, "id"), (["id"], 7, "id"),
    (["question"], "", "question"), (["question"], None, "question"),
    (["state"], "", "state"), (["state"], {}, "state"), (["state"], [], "state"), (["state"], 3, "state"),
    (["state"], KeyError, "state"), (["state"], None, "state"),
    (["workload"], "triage", "workload"), (["workload"], {}, "workload"),
    (["orderings"], "some", "orderings"),
])
async def test_decide_violations_are_422_naming_the_field(client, model, path, value, field):
    response = await client.post("/decide", json=_with(decide_body(), path, value), headers=AUTH)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"
    assert response.json()["error"]["message"].startswith(field)
    assert model.calls == []


async def test_a_null_workload_is_accepted(client):
    assert (await client.post("/decide", json=decide_body(workload=None), headers=AUTH)).status_code == 200


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b["decisions"].append(dict(b["decisions"][0])), "decisions[2].id 'd0' is not unique"),
    (lambda b: b.update(decisions=[]), "decisions must be a nonempty array"),
    (lambda b: b.update(decisions={"d": 1}), "decisions must be a nonempty array"),
    (lambda b: b["decisions"][1].update(question=""), "decisions[1].question must be a nonempty string"),
    (lambda b: b["decisions"][0].update(options=[]), "decisions[0].options must hold 2..16 options"),
])
async def test_shared_violations_are_422_naming_the_field(client, model, mutate, message):
    body = shared_body(2)
    mutate(body)
    response = await client.post("/decide/shared", json=body, headers=AUTH)
    assert response.status_code == 422
    assert message in response.json()["error"]["message"]


@pytest.mark.parametrize("first, second", [
    ({"id": "a", "orderings": "rotations"}, {"id": "a#o0"}),
    ({"id": "a#o1"}, {"id": "a", "orderings": "all"}),
    ({"id": "a", "orderings": "rotations"}, {"id": "a#o1", "orderings": "rotations"}),
])
async def test_result_ids_that_would_collide_in_the_response_are_422(client, model, first, second):
    body = {"state": "s", "decisions": [{"question": "q?", "options": options("x", "y"), **first},
                                        {"question": "q?", "options": options("x", "y"), **second}]}
    response = await client.post("/decide/shared", json=body, headers=AUTH)
    assert response.status_code == 422
    assert "result ids must be unique within the response" in response.json()["error"]["message"]
    assert model.calls == []


async def test_ids_that_only_look_like_ordering_ids_are_fine(client):
    body = {"state": "s", "decisions": [
        {"id": "a", "question": "q?", "options": options("x", "y"), "orderings": "rotations"},
        {"id": "a#o2", "question": "q?", "options": options("x", "y")},  # a has orderings 0 and 1 only
        {"id": "b#o0", "question": "q?", "options": options("x", "y")}]}
    response = await client.post("/decide/shared", json=body, headers=AUTH)
    assert response.status_code == 200
    assert [result["id"] for result in response.json()["results"]] == ["a", "a#o2", "b#o0"]


async def test_a_row_count_above_max_decisions_is_422(model):
    async with client_for(model, max_decisions="3") as client:
        response = await client.post("/decide/shared", json=shared_body(4), headers=AUTH)
    assert response.status_code == 422 and "1..3 are allowed" in response.json()["error"]["message"]


@pytest.mark.parametrize("raw, message", [
    (b'{"id": "x", ', "the body is not JSON"),
    (b'{"id": "x", "state": NaN}', "not finite JSON: NaN"),
    (b'{"id": "x", "state": {"v": 1e999}}', "not finite JSON: 1e999"),
    (b'{"id": "x", "state": [Infinity]}', "not finite JSON: Infinity"),
    (b"[1, 2]", "the body must be a JSON object"),
    (b"\xff\xfe", "the body is not UTF-8"),
    (b'{"id": "x", "state": 1' + b"1" * 5000 + b"}", "the body is not usable JSON"),
    (b'{"id": "\\ud800", "state": "s"}', "lone UTF-16 surrogate"),
    (b'{"id": "x", "id": "y", "state": "s"}', "the key 'id' appears twice in one object"),
    (b'{"id": "x", "state": ' + b"[" * 64 + b"]" * 64 + b"}", "nested too deeply: more than 64 levels"),
    (b'{"id": "x", "state": ' + b"[" * 100000 + b"]" * 100000 + b"}", "nested too deeply: more than 64 levels"),
])
async def test_malformed_or_non_finite_json_is_422(client, model, raw, message):
    response = await client.post("/decide", content=raw, headers={**AUTH, "Content-Type": "application/json"})
    assert response.status_code == 422
    assert message in response.json()["error"]["message"]
    assert model.calls == []


async def test_a_model_value_error_is_422_with_the_models_message(client, model):
    model.fail_with = ModelFailure(Failure.INVALID, "Example has 9000 tokens, above 8192; truncation is forbidden")
    response = await client.post("/decide", json=decide_body(), headers=AUTH)
    assert response.status_code == 422
    assert response.json() == {"error": {"code": "invalid_request",
                                         "message": "Example has 9000 tokens, above 8192; truncation is forbidden"}}


# --- Engine failures and Triton -----------------------------------------------------------------------------------

@pytest.mark.parametrize("error, status", [
    (ModelFailure(Failure.OUT_OF_MEMORY, "OutOfMemoryError: CUDA out of memory"), 503),
    (ModelFailure(Failure.FAILED, "RuntimeError: boom"), 500),
    (ModelFailure(Failure.TRANSPORT, "Triton did not answer: ClientConnectorError"), 502),
])
async def test_engine_failures_keep_their_status_and_code(client, model, error, status):
    model.fail_with = error
    response = await client.post("/decide", json=decide_body(), headers=AUTH)
    assert response.status_code == status
    assert response.json() == {"error": {"code": error.code, "message": error.public_message}}


@pytest.mark.parametrize("failure, detail, words", [
    (unreachable, "Triton did not answer: OSError: [Errno 111] Connect call failed ('10.1.2.3', 8000)",
     "triton unreachable"),
    (lambda detail: from_triton(500, detail), "Stub process 'intern_decision_0_0' is not healthy.",
     "triton answered an error"),
])
async def test_a_502_says_fixed_words_and_logs_the_detail(client, model, caplog, failure, detail, words):
    model.fail_with = failure(detail)
    with caplog.at_level(logging.WARNING, logger="intern_decision.shim"):
        response = await client.post("/decide", json=decide_body(), headers=AUTH)
    assert response.status_code == 502
    assert response.json() == {"error": {"code": "model_unavailable", "message": words}}
    assert detail in caplog.text


async def test_one_callers_failure_text_never_reaches_another_caller(model, caplog):
    """The first caller's inference fails with a text of its own; the model is then down, and the next caller is
    refused at once: in fixed words, the first caller's text in the log only."""
    service = build_service(make_settings(probe_seconds="3600"), model)
    app = service.app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim") as client:
        model.fail_with = from_triton(500, "the first caller's own words")
        with caplog.at_level(logging.WARNING):
            first = await client.post("/decide", json=decide_body(), headers=AUTH)
            model.fail_with = None
            second = await client.post("/decide", json=decide_body(), headers=AUTH)
            health = await client.get("/health")
    assert first.status_code == second.status_code == 502 and health.status_code == 503
    assert service.watch.down is not None  # the second was refused by the watch, not by Triton
    for answer in (first, second, health):
        assert "first caller" not in answer.text
    assert second.json()["error"]["message"] == "triton answered an error"
    assert health.json()["error"]["message"] == "triton answered an error"
    assert "the first caller's own words" in caplog.text


async def test_one_failing_call_fails_the_whole_request(client, model):
    model.fail_with = ModelFailure(Failure.OUT_OF_MEMORY, "CUDA out of memory")
    model.fail_on_call = 1
    response = await client.post("/decide/shared", json=shared_body(40), headers=AUTH)
    assert response.status_code == 503 and response.json()["error"]["code"] == "out_of_memory"
    assert len(model.calls) == 2  # the third call is never made


@pytest.mark.parametrize("method, path, status, code", [
    ("GET", "/nowhere", 404, "not_found"), ("GET", "/decide", 405, "method_not_allowed"),
    ("PUT", "/decide/shared", 405, "method_not_allowed"), ("POST", "/health", 405, "method_not_allowed"),
])
async def test_404_and_405_use_the_envelope(client, method, path, status, code):
    response = await client.request(method, path, headers=AUTH)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


@pytest.mark.parametrize("method, path", [("GET", "/health/"), ("POST", "/decide/"), ("POST", "/decide/shared/")])
async def test_a_trailing_slash_is_404_never_a_redirect(client, model, method, path):
    response = await client.request(method, path, headers=AUTH, json=decide_body())
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert model.calls == []


async def test_an_unexpected_exception_is_500_in_the_envelope_with_the_request_id(model):
    model.fail_with = ZeroDivisionError("a bug, not an ApiError")
    app = create_app(make_settings(), model)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://shim") as client:
        response = await client.post("/decide", json=decide_body(), headers={**AUTH, "X-Request-Id": "bug-1"})
    assert response.status_code == 500
    assert response.headers["x-request-id"] == "bug-1"
    assert response.json() == {"error": {"code": "scoring_failed", "message": UNEXPECTED_FAILURE}}


async def test_the_last_resort_500_names_no_exception_and_logs_it(model, caplog):
    """What failed (the exception's type and text) is the log's, with the request id; the caller learns only that
    something failed."""
    model.fail_with = ZeroDivisionError("a bug at 0x7f3a, not an ApiError")
    app = create_app(make_settings(), model)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    with caplog.at_level(logging.ERROR, logger="intern_decision.shim"):
        async with httpx.AsyncClient(transport=transport, base_url="http://shim") as client:
            response = await client.post("/decide", json=decide_body(), headers={**AUTH, "X-Request-Id": "bug-2"})
    assert response.status_code == 500
    assert "ZeroDivisionError" not in response.text and "0x7f3a" not in response.text
    assert "ZeroDivisionError: a bug at 0x7f3a" in caplog.text


CUDA_FIRST_LINE = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
                   "139.72 GiB of which 1.25 GiB is free. Process 48213 has 138.40 GiB memory in use.")


SYSTEM_ONE_BODY = {"model": "Intern-Decision-4B", "state": "charged twice",
                   "questions": {"refund": {"type": "noul", "instructions": "refund?"}}}


@pytest.mark.parametrize("path, body", [("/decide", decide_body), ("/v1/systemone", lambda: SYSTEM_ONE_BODY)])
async def test_an_out_of_memory_tells_no_card_and_no_process(client, model, caplog, path, body):
    """Triton's 503 carries CUDA's first line (capacity, free memory, process ids): the caller is told fixed words,
    the log keeps the line."""
    model.fail_with = from_triton(503, f"out_of_memory: call 0: {CUDA_FIRST_LINE}")
    with caplog.at_level(logging.WARNING, logger="intern_decision.shim"):
        response = await client.post(path, json=body(), headers=AUTH)
    assert response.status_code == 503 and response.json()["error"]["code"] == "out_of_memory"
    assert OUT_OF_MEMORY_WORDS in response.json()["error"]["message"]
    for secret in ("GiB", "48213", "capacity", "OutOfMemoryError"):
        assert secret not in response.text
    assert CUDA_FIRST_LINE in caplog.text


async def test_the_openapi_document_is_served_without_auth(client):
    from shim.app import openapi_document

    response = await client.get("/openapi.json")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    assert response.json() == openapi_document()
    assert "x-request-id" in response.headers


# --- Concurrency ------------------------------------------------------------------------------------------------

async def test_requests_are_serialised_and_chunks_never_interleave(client, model):
    first, second = shared_body(40), shared_body(20)
    first["state"], second["state"] = "first", "second"
    responses = await asyncio.gather(client.post("/decide/shared", json=first, headers=AUTH),
                                     client.post("/decide/shared", json=second, headers=AUTH),
                                     client.post("/decide", json=decide_body(state="third"), headers=AUTH))
    assert [response.status_code for response in responses] == [200, 200, 200]
    assert model.max_active == 1
    owners = [call["state"] for call in model.calls]
    assert len(owners) == 3 + 2 + 1
    # each request's calls form one unbroken run
    runs = [owner for index, owner in enumerate(owners) if index == 0 or owners[index - 1] != owner]
    assert sorted(runs) == ["first", "second", "third"]


async def test_health_answers_while_a_call_is_blocked(client, model):
    model.gate = asyncio.Event()
    blocked = asyncio.create_task(client.post("/decide", json=decide_body(), headers=AUTH))
    while not model.calls:
        await asyncio.sleep(0.001)
    health = await asyncio.wait_for(client.get("/health"), timeout=30)  # the call stays blocked until the gate
    assert health.status_code == 200
    assert not blocked.done()
    model.gate.set()
    assert (await blocked).status_code == 200


@pytest.mark.parametrize("path, body", [("/decide", decide_body()), ("/decide/shared", shared_body(1))])
async def test_total_seconds_excludes_the_wait_for_the_lock_which_is_queue_seconds(model, path, body):
    metrics = ShimMetrics()
    app = create_app(make_settings(), model, metrics)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim") as client:
        model.gate = asyncio.Event()
        first = asyncio.create_task(client.post("/decide", json=decide_body(state="first"), headers=AUTH))
        while not model.calls:
            await asyncio.sleep(0.001)
        queued = asyncio.create_task(client.post(path, json=body, headers=AUTH))
        # timed from the moment the queued request waits for the lock (the shim's own gauge), however slow the machine
        for _ in range(10_000):
            if metrics.registry.get_sample_value("intern_decision_shim_requests_queued") == 1:
                break
            await asyncio.sleep(0.001)
        assert metrics.registry.get_sample_value("intern_decision_shim_requests_queued") == 1
        await asyncio.sleep(0.3)  # the queued request waits this long behind the first
        model.gate.set()
        held, waited = (await first).json(), (await queued).json()
    waited_timing = waited if path == "/decide" else waited["timing"]
    assert held["total_seconds"] >= 0.25 and waited_timing["queue_seconds"] >= 0.25
    assert held["queue_seconds"] < waited_timing["queue_seconds"]  # the first found the lock free
    # the wait is in queue_seconds and not in total_seconds, which would otherwise be the larger
    assert waited_timing["total_seconds"] < waited_timing["queue_seconds"]
