"""Reliability against the real CPU stack: schemathesis, faults (a client gone mid-call, slow bodies, an OOM in a later
call, deep JSON on both sides), unauthenticated variants that must never reach the model, the token kept out of every
log and answer, and a short bounded load."""
from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
import schemathesis
from schemathesis.generation import GenerationMode

from bench.load import run_load
from shim.errors import OUT_OF_MEMORY_WORDS
from tests.fuzzing import Tally, fuzz

from .helpers import (
    AUTH,
    SHIM_BODY_TIMEOUT_SECONDS,
    SHIM_MAX_QUEUE,
    SHIM_TOKEN,
    decide,
    infer_error,
    model_log_lines,
    options,
    past_a_full_queue,
    quiet_metrics,
    read_until_closed,
    settled_call_counts,
    slow,
)

pytestmark = pytest.mark.triton
NO_CALLS = {"ok": 0, "invalid": 0, "out_of_memory": 0, "failed": 0}


def nested(levels: int) -> object:
    value: object = "bottom"
    for _ in range(levels):
        value = [value]
    return value


@pytest.fixture(scope="module")
def http(shim):
    with httpx.Client(base_url=shim.url, timeout=120) as client:
        yield client


def raw_request(port: int, method: str, target: str, headers: list[tuple[str, str]], body: bytes = b"",
                version: str = "HTTP/1.1") -> tuple[int, dict[str, str], bytes]:
    """One request on its own connection, closed by the server after the answer."""
    lines = [f"{method} {target} {version}", "Host: 127.0.0.1", "Connection: close",
             *(f"{name}: {value}" for name, value in headers)]
    if body and not any(name.lower() == "transfer-encoding" for name, _ in headers):
        lines.append(f"Content-Length: {len(body)}")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        answer = read_until_closed(sock)
    head, _, payload = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers_back = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines)}
    return int(status_line.split()[1]), headers_back, payload


def assert_queue_is_free(shim) -> None:
    """MAX_QUEUE slow requests are all admitted and scored, and the next one is 429: no slot is held by anyone."""
    statuses, refused = past_a_full_queue(shim, slow(1.0), decide())
    assert statuses == [200] * SHIM_MAX_QUEUE
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"


# --- schemathesis -------------------------------------------------------------------------------------------------

def test_schemathesis_against_the_real_stack(shim):
    schema = schemathesis.openapi.from_url(f"{shim.url}/openapi.json")
    tally = Tally()
    for path in ("/decide", "/decide/shared"):
        fuzz(schema, path, "POST", GenerationMode.POSITIVE, 30, tally, headers=AUTH)
        fuzz(schema, path, "POST", GenerationMode.NEGATIVE, 15, tally, headers=AUTH)
        fuzz(schema, path, "POST", GenerationMode.POSITIVE, 10, tally)
    fuzz(schema, "/health", "GET", GenerationMode.POSITIVE, 3, tally)
    assert tally.total >= 110 and tally.statuses[200] > 0 and tally.statuses[401] >= 20


# --- faults -------------------------------------------------------------------------------------------------------

def test_clients_gone_mid_call_and_while_queued_release_their_slots_and_the_lock(shim, triton):
    before = quiet_metrics(triton)

    def gone(seconds: float, timeout: float) -> None:
        with httpx.Client(base_url=shim.url, timeout=timeout) as client:
            with pytest.raises(httpx.ReadTimeout):
                client.post("/decide", json=slow(seconds), headers=AUTH)

    mid_call = threading.Thread(target=gone, args=(1.5, 0.6))
    mid_call.start()
    time.sleep(0.3)
    gone(0.0, 0.3)  # queued behind the first one's lock when it leaves
    mid_call.join()
    # The one already scoring finishes; the one queued is never scored (shim/cycle.py); both slots are freed.
    settled_call_counts(triton, before, {**NO_CALLS, "ok": 1}, timeout=30)
    assert_queue_is_free(shim)


def test_slow_bodies_hold_their_slots_only_until_the_body_deadline(shim, http):
    head = (f"POST /decide HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {SHIM_TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n").encode()
    slow_clients = [socket.create_connection(("127.0.0.1", shim.port), timeout=30) for _ in range(SHIM_MAX_QUEUE)]
    try:
        sent_at = time.monotonic()
        for sock in slow_clients:
            sock.sendall(head + b'{"id": "slow", ')  # and nothing more
        time.sleep(0.5)
        refused = http.post("/decide", json=decide(), headers=AUTH)
        assert refused.status_code == 429, "the slow bodies must hold every slot until their deadline"
        for sock in slow_clients:
            answer = read_until_closed(sock)
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
            assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
        waited = time.monotonic() - sent_at
        assert SHIM_BODY_TIMEOUT_SECONDS - 0.1 <= waited < SHIM_BODY_TIMEOUT_SECONDS + 3
    finally:
        for sock in slow_clients:
            sock.close()
    assert http.post("/decide", json=decide(), headers=AUTH).status_code == 200


def test_an_oom_in_a_later_call_fails_the_request_and_the_service_answers_after(http, triton):
    fatal = "Does this question run out of memory?"
    decisions = [{"id": f"d{n}", "question": f"Is step {n} needed?", "options": options("yes", "no")}
                 for n in range(17)]
    decisions[16]["question"] = fatal  # the 17th question: call 1
    before = quiet_metrics(triton)
    response = http.post("/decide/shared", headers={**AUTH, "X-Request-Id": "oom-later"},
                         json={"state": {"__fixture_fault__": {"oom_when_asked": fatal}}, "decisions": decisions})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "out_of_memory"
    assert response.json()["error"]["message"] == OUT_OF_MEMORY_WORDS  # CUDA's own line: the logs' only
    assert "CUDA" not in response.text
    settled_call_counts(triton, before, {**NO_CALLS, "ok": 1, "out_of_memory": 1})
    assert any("oom-later.1" in line and "out_of_memory: call 1: OutOfMemoryError" in line
               for line in model_log_lines(triton, "oom-later.1"))
    after = http.post("/decide/shared", headers=AUTH, json={"state": {"fine": True}, "decisions": decisions})
    assert after.status_code == 200 and after.json()["timing"]["questions_per_call"] == [16, 1]


def test_deep_json_is_422_from_the_shim_and_64_levels_reach_the_model(http):
    refused = http.post("/decide", json=decide(state=nested(64)), headers=AUTH)  # 65 levels with the body
    assert refused.status_code == 422
    assert refused.json()["error"] == {"code": "invalid_request", "message": "the body is nested too deeply: more "
                                                                             "than 64 levels of arrays and objects"}
    # 64 levels pass both decoders and the checkpoint's own code; rendered with its indentation they are more
    # tokens than the test stack's MAX_TOKENS, so the model itself refuses them.
    deepest = http.post("/decide", json=decide(state=nested(63)), headers=AUTH)
    assert deepest.status_code == 422, deepest.text
    assert deepest.json()["error"]["message"].startswith("Example has ")
    assert http.post("/decide", json=decide(state=nested(40)), headers=AUTH).status_code == 200


@pytest.mark.parametrize("levels", [65, 900, 100_000])
def test_deep_json_sent_straight_to_triton_is_invalid_request_without_a_traceback(triton, levels):
    log_before = len(triton.log_text())
    call = b'{"state": ' + b"[" * levels + b"]" * levels + b', "questions": {}}'
    error = infer_error(triton, call)
    assert error.status() == "400"
    assert error.message() == ("invalid_request: call 0: the request is nested too deeply: more than 64 levels of "
                               "arrays and objects")
    time.sleep(0.2)
    assert "Traceback" not in triton.log_text()[log_before:]


# --- security -----------------------------------------------------------------------------------------------------

BODY = json.dumps(decide()).encode()
WRONG = "Bearer wrong-token-0123456789-abcdefghijklmno"


def unauthenticated_variants(token: str) -> list[tuple[str, str, list, str, int]]:
    """(method, target, headers, HTTP version, expected status): none of them may reach the model."""
    post = [
        [], [("Authorization", WRONG)], [("Authorization", f"Bearer{token}")], [("Authorization", "Bearer")],
        [("Authorization", f"Basic {token}")], [("Authorization", token)], [("Authorization", f"Bearer {token}x")],
        [("Authorization", f"Bearer {token[:-1]}")], [("Authorization", f"Bearer {token} {token}")],
        [("Authorization", f"Bearer\t{token}")], [("AUTHORIZATION", WRONG)],
        [("Authorization", WRONG), ("Authorization", f"Bearer {token}")],
        [("Authorization", f"Bearer {token}"), ("Authorization", WRONG)],
        [("Authorization", f"Bearer {token}"), ("Authorization", f"Bearer {token}")],
        [("Proxy-Authorization", f"Bearer {token}")], [("X-Api-Key", token)], [("Cookie", f"token={token}")],
    ]
    variants = [("POST", "/decide", headers, "HTTP/1.1", 401) for headers in post]
    variants += [("POST", target, [], "HTTP/1.1", 401) for target in (
        f"/decide?token={token}", f"/decide?access_token={token}", f"/decide?authorization=Bearer%20{token}",
        "/decide/", "/decide/shared/", "//decide", "/dec%69de", "/decide%2Fshared", "/DECIDE", "/health",
        "/decide/shared?x=1")]
    variants += [("POST", "/decide", [], "HTTP/1.0", 401),
                 ("POST", "/decide", [("Transfer-Encoding", "chunked")], "HTTP/1.1", 401)]
    for auth in ([], [("Authorization", f"Bearer {token}")]):
        for method in ("HEAD", "OPTIONS", "PUT", "PATCH", "DELETE", "GET"):
            for path in ("/decide", "/decide/shared"):
                variants.append((method, path, auth, "HTTP/1.1", 405))
    variants += [("POST", path, [("Authorization", f"Bearer {token}")], "HTTP/1.1", 404)
                 for path in ("/decide/", "//decide", "/DECIDE", "/decide/shared/")]
    return variants


def test_no_unauthenticated_variant_reaches_the_model(shim, triton, http):
    before = quiet_metrics(triton)
    for method, target, headers, version, expected in unauthenticated_variants(SHIM_TOKEN):
        body = BODY if method not in ("HEAD", "GET", "OPTIONS") else b""
        if ("Transfer-Encoding", "chunked") in headers:
            body = f"{len(BODY):x}\r\n".encode() + BODY + b"\r\n0\r\n\r\n"
        status, answer_headers, payload = raw_request(shim.port, method, target, headers, body, version)
        where = f"{method} {target} {version} {headers}"
        assert status == expected, where
        assert answer_headers.get("x-request-id"), where
        if expected == 401:
            assert answer_headers["www-authenticate"] == "Bearer", where
        if method != "HEAD":
            assert set(json.loads(payload)["error"]) == {"code", "message"}, where
        assert SHIM_TOKEN.encode() not in payload, where
    # One scored request after them all: the model's calls moved by exactly that one.
    assert http.post("/decide", json=decide(), headers=AUTH).status_code == 200
    settled_call_counts(triton, before, {**NO_CALLS, "ok": 1})


def test_the_token_is_in_no_log_and_no_answer(shim, triton, http):
    answers = [http.post(f"/decide?token={SHIM_TOKEN}", json=decide(), headers=AUTH),
               http.post(f"/decide/shared?access_token={SHIM_TOKEN}", json={"state": "s", "decisions": "x"},
                         headers=AUTH),
               http.get(f"/health?token={SHIM_TOKEN}"),
               http.get(f"/nowhere?token={SHIM_TOKEN}", headers=AUTH),
               http.post("/decide", json=decide(state={"__fixture_fault__": "runtime"}), headers=AUTH)]
    assert [answer.status_code for answer in answers] == [200, 422, 200, 404, 500]
    for answer in answers:
        assert SHIM_TOKEN not in answer.text
    time.sleep(0.3)
    assert SHIM_TOKEN not in shim.log_text()
    assert SHIM_TOKEN not in triton.log_text()


# --- load ---------------------------------------------------------------------------------------------------------

def test_a_bounded_load_past_the_queue_loses_nothing(shim):
    report = run_load(shim.url, SHIM_TOKEN, clients=8, seconds=4, shim_pid=shim.pid)
    assert report["errors"] == 0, report["error_samples"]
    assert report["mismatches"] == 0 and report["health_failures"] == []
    assert report["ok"] > 0 and report["busy"] > 0  # past MAX_QUEUE, and still answering
    assert report["health_samples"] > 20 and report["health_ms"]["max"] < 1000
    assert report["shim_rss_mib"]["after"] - report["shim_rss_mib"]["before"] < 64
