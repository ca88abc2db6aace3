"""End to end over HTTP: a real uvicorn shim in front of a real tritonserver with the fixture checkpoint."""
from __future__ import annotations

import math
import os
import sys
import threading
import time

import httpx
import pytest

from .helpers import AUTH, SHIM_MAX_BODY_BYTES, SHIM_MAX_QUEUE, SHIM_TOKEN, TEST_MAX_TOKENS, past_a_full_queue

pytestmark = pytest.mark.triton
STATE = {"ticket": 4512, "customer": "charged twice for one order", "channel": "email"}


def options(*ids: str) -> list[dict]:
    return [{"id": option_id, "description": f"The {option_id} path."} for option_id in ids]


def decisions(count: int) -> list[dict]:
    return [{"id": f"d{n}", "question": f"Is step {n} needed?", "options": options("yes", "no")}
            for n in range(count)]


@pytest.fixture(scope="module")
def http(shim):
    with httpx.Client(base_url=shim.url, timeout=120) as client:
        yield client


def post(http: httpx.Client, path: str, body: dict, **kwargs) -> httpx.Response:
    return http.post(path, json=body, headers=AUTH, **kwargs)


@pytest.mark.parametrize("count, calls", [(17, [16, 1]), (40, [16, 16, 8])])
def test_shared_questions_are_chunked_and_equal_the_same_questions_asked_chunk_by_chunk(http, count, calls):
    response = post(http, "/decide/shared", {"state": STATE, "decisions": decisions(count)})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["timing"]["calls"] == len(calls) and body["timing"]["questions_per_call"] == calls
    results = body["results"]
    assert [result["id"] for result in results] == [f"d{n}" for n in range(count)]
    start = 0
    for index, size in enumerate(calls):
        alone = post(http, "/decide/shared", {"state": STATE, "decisions": decisions(count)[start:start + size]})
        assert alone.status_code == 200, alone.text
        for chunked, asked_alone in zip(results[start:start + size], alone.json()["results"]):
            assert chunked["call"]["index"] == index
            for key in ("probabilities", "top", "confidence", "native", "input_tokens", "prompt_sha256"):
                assert chunked[key] == asked_alone[key], key
        start += size


def test_plain_decide_is_scored_by_the_model(http):
    response = post(http, "/decide", {"id": "r1", "state": "The parcel arrived broken.",
                                      "question": "What should we do?", "options": options("refund", "replace")})
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["option_ids"] == ["refund", "replace"]
    assert math.isclose(sum(result["probabilities"]), 1.0, rel_tol=1e-6)
    assert result["top"] in ("refund", "replace") and result["call"] == {"index": 0, "field": "q", "questions": 1}
    assert result["calibration"]["method"] == "temperature-scaling"
    assert result["model"]["name"] == "Intern-Decision-4B-tiny-fixture"
    assert result["forward_seconds"] > 0 and result["total_seconds"] >= result["forward_seconds"]
    assert 0 <= result["queue_seconds"] < result["total_seconds"]  # alone: the lock was free
    assert len(result["prompt_sha256"]) == 64


@pytest.mark.parametrize("orderings, count", [("rotations", 3), ("all", 6)])
def test_orderings_are_scored_and_averaged(http, orderings, count):
    body = {"id": "o", "state": STATE, "question": "Which team?", "options": options("billing", "support", "sales")}
    plain = post(http, "/decide", body).json()
    averaged = post(http, "/decide", {**body, "orderings": orderings}).json()
    assert averaged["combined"]["orderings"] == count and len(averaged["orderings"]) == count
    assert [r["id"] for r in averaged["orderings"]] == [f"o#o{k}" for k in range(count)]
    assert averaged["orderings"][0]["probabilities"] == plain["probabilities"]
    per = [dict(zip(r["option_ids"], r["probabilities"])) for r in averaged["orderings"]]
    means = [sum(math.log(p[o]) for p in per) / count for o in ("billing", "support", "sales")]
    expected = [math.exp(m) / sum(math.exp(x) for x in means) for m in means]
    assert averaged["combined"]["probabilities"] == pytest.approx(expected, rel=1e-12)


def test_wrong_or_missing_bearer_is_401(http):
    body = {"id": "r", "state": "s", "question": "q?", "options": options("a", "b")}
    assert http.post("/decide", json=body).status_code == 401
    response = http.post("/decide", json=body, headers={"Authorization": "Bearer " + "x" * 40})
    assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"


def test_body_over_the_limit_is_413_declared_and_chunked(http):
    big = b"x" * (SHIM_MAX_BODY_BYTES + 1)
    declared = http.post("/decide", content=big, headers={**AUTH, "Content-Type": "application/json"})
    assert declared.status_code == 413 and declared.json()["error"]["code"] == "request_too_large"

    def chunks():
        for _ in range(SHIM_MAX_BODY_BYTES // 4096 + 2):
            yield b"x" * 4096

    chunked = http.post("/decide", content=chunks(), headers={**AUTH, "Content-Type": "application/json"})
    assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "request_too_large"


def test_model_value_error_is_422_with_the_models_message(http):
    body = {"id": "long", "state": "word " * (TEST_MAX_TOKENS * 2), "question": "q?", "options": options("a", "b")}
    response = post(http, "/decide", body)
    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert message.startswith("Example has ") and message.endswith(f"above {TEST_MAX_TOKENS}; truncation is forbidden")


def test_oom_is_503_and_the_service_answers_afterwards(http):
    body = {"id": "oom", "state": {"__fixture_fault__": "oom"}, "question": "q?", "options": options("a", "b")}
    response = post(http, "/decide", body)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "out_of_memory"
    after = post(http, "/decide", {**body, "state": {"fine": True}})
    assert after.status_code == 200


def test_other_model_failure_is_500_scoring_failed(http):
    body = {"id": "boom", "state": {"__fixture_fault__": "runtime"}, "question": "q?", "options": options("a", "b")}
    response = post(http, "/decide", body)
    assert response.status_code == 500
    assert response.json()["error"] == {"code": "scoring_failed",
                                        "message": "RuntimeError: fixture fault: simulated kernel failure"}


def test_a_tie_goes_to_the_smaller_option_id_per_ordering_and_to_the_first_in_the_combined_view(http):
    body = {"id": "tie", "state": {"__fixture_fault__": "tie"}, "question": "q?", "options": options("b", "a"),
            "orderings": "rotations"}
    result = post(http, "/decide", body).json()
    assert [ordering["top"] for ordering in result["orderings"]] == ["a", "a"]
    assert result["combined"]["probabilities"] == [0.5, 0.5]
    assert result["combined"]["top"] == "b"
    assert result["combined"]["agreement"] == 0.0


def slow_body(seconds: float) -> dict:
    return {"id": "slow", "state": {"__fixture_fault__": {"sleep_seconds": seconds}}, "question": "q?",
            "options": options("a", "b")}


def test_past_the_queue_a_post_is_429_busy(shim):
    results, refused = past_a_full_queue(shim, slow_body(1.5), slow_body(0))
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "busy"
    assert refused.headers["retry-after"] == "1"
    assert results == [200] * SHIM_MAX_QUEUE


def test_health_answers_within_100_ms_while_a_slow_call_holds_the_lock(shim, http):
    assert http.get("/health").json()["status"] == "ok"  # facts cached
    outcome: list[int] = []
    slow = threading.Thread(target=lambda: outcome.append(post(http, "/decide", slow_body(3)).status_code))
    slow.start()
    time.sleep(0.8)
    with httpx.Client(base_url=shim.url, timeout=5) as client:
        started = time.perf_counter()
        health = client.get("/health")
        elapsed = time.perf_counter() - started
    assert slow.is_alive(), "the slow call must still hold the lock while /health is asked"
    slow.join()
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert elapsed < 0.1, f"/health took {elapsed * 1000:.1f} ms"
    assert outcome == [200]


def test_health_reports_the_models_facts(http, fixture_pins):
    health = http.get("/health").json()
    assert health["status"] == "ok"
    assert health["model"]["revision"] == fixture_pins.revision
    assert health["model"]["inference_sha256"] == fixture_pins.inference_sha256
    assert health["max_tokens"] == TEST_MAX_TOKENS and health["vram_cap_gib"] is None
    assert health["model"]["pinned"] is False  # the fixture overrides the pins, with the opt-in
    assert health["max_questions_per_call"] == 16 and health["workloads"] == []


def test_triton_unreachable_is_502_and_health_503(tmp_path):
    from devstack.process import ManagedProcess, free_port

    dead = free_port()  # nothing listens here
    port = free_port()
    env = dict(os.environ, INTERN_DECISION_API_TOKEN=SHIM_TOKEN, INTERN_DECISION_TRITON_API_KEY="k" * 32,
               INTERN_DECISION_TRITON_URL=f"127.0.0.1:{dead}",
               INTERN_DECISION_TRITON_METRICS_URL=f"http://127.0.0.1:{dead}/metrics")
    shim = ManagedProcess("shim", [sys.executable, "-m", "shim", "--port", str(port)], env,
                          tmp_path / "shim.log", f"http://127.0.0.1:{port}/").start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    health = client.get("/health")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, shim.log_text()
                    time.sleep(0.1)
            assert health.status_code == 503
            assert health.json()["status"] == "unavailable"
            assert health.json()["error"]["code"] == "model_unavailable"
            body = {"id": "r", "state": "s", "question": "q?", "options": options("a", "b")}
            response = client.post("/decide", json=body, headers=AUTH)
            assert response.status_code == 502
            assert response.json()["error"]["code"] == "model_unavailable"
            assert response.json()["error"]["message"] == "triton unreachable"
    finally:
        shim.stop()
    assert "Triton did not answer" in shim.log_text()  # the detail is in the log
