"""Observability end to end: a real Prometheus scrapes the test tritonserver and the shim, and what it stores for
known traffic equals that traffic; promtool lints both metrics pages; the shim's log is JSON with the request id."""
from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import httpx
import pytest

from tests.tools import required_tool

from .helpers import AUTH, SHIM_TOKEN

pytestmark = pytest.mark.triton
OPTIONS = [{"id": "yes", "description": "It holds."}, {"id": "no", "description": "It does not."}]


def deltas(after: dict[tuple, float], before: dict[tuple, float]) -> dict[tuple, float]:
    return {key: value - before.get(key, 0.0) for key, value in after.items() if value != before.get(key, 0.0)}


def test_prometheus_stores_exactly_the_traffic_sent(prometheus, shim):
    jobs = ("triton", "shim")
    # Let updates queued by earlier tests land, then take a baseline from a scrape after that.
    time.sleep(0.5)
    prometheus.wait_for_scrapes_after(time.time(), jobs)
    baseline_at = time.time()
    shim_before = prometheus.values("intern_decision_shim_requests_total", ("route", "status"), baseline_at)
    calls_before = prometheus.values('intern_decision_calls_total{model="intern_decision"}', ("outcome",), baseline_at)
    errors_before = prometheus.values("intern_decision_shim_triton_errors_total", ("kind",), baseline_at)

    plain = {"id": "p", "state": "The parcel arrived broken.", "question": "Refund it?", "options": OPTIONS}
    shared = {"state": "One state.", "decisions": [{"id": f"d{n}", "question": f"Step {n}?", "options": OPTIONS}
                                                   for n in range(17)]}
    with httpx.Client(base_url=shim.url, timeout=60) as http:
        sent = [
            http.post("/decide", json=plain, headers=AUTH),
            http.post("/decide", json=plain, headers=AUTH),
            http.post("/decide/shared", json=shared, headers=AUTH),                                 # 2 calls
            http.post("/decide", json=plain, headers={"Authorization": "Bearer wrong"}),
            http.post("/decide", json={**plain, "options": OPTIONS[:1]}, headers=AUTH),
            http.post("/decide", json={**plain, "state": {"__fixture_fault__": "oom"}}, headers=AUTH),
            http.get("/health"),
            http.get("/no/such/path"),
        ]
    assert [response.status_code for response in sent] == [200, 200, 200, 401, 422, 503, 200, 404]
    sent_at = time.time()

    expected_shim = {("/decide", "200"): 2, ("/decide/shared", "200"): 1, ("/decide", "401"): 1,
                     ("/decide", "422"): 1, ("/decide", "503"): 1, ("/health", "200"): 1, ("other", "404"): 1}
    expected_calls = {("ok",): 4, ("out_of_memory",): 1}
    deadline = time.monotonic() + 15
    while True:  # the model applies its metric updates off the response path: a scrape may precede them
        prometheus.wait_for_scrapes_after(sent_at, jobs)
        shim_counted = deltas(prometheus.values("intern_decision_shim_requests_total", ("route", "status")),
                              shim_before)
        calls_counted = deltas(prometheus.values('intern_decision_calls_total{model="intern_decision"}',
                                                 ("outcome",)), calls_before)
        if (shim_counted, calls_counted) == (expected_shim, expected_calls) or time.monotonic() > deadline:
            break
        sent_at = time.time()
    assert shim_counted == expected_shim
    assert calls_counted == expected_calls
    errors = deltas(prometheus.values("intern_decision_shim_triton_errors_total", ("kind",)), errors_before)
    assert errors == {("out_of_memory",): 1}
    assert prometheus.values("intern_decision_shim_model_up", ()) == {(): 1.0}
    assert prometheus.values("intern_decision_shim_requests_in_flight", ()) == {(): 0.0}


def promtool_check(page: bytes) -> tuple[int, list[str]]:
    checked = subprocess.run([required_tool("promtool"), "check", "metrics"], input=page, capture_output=True,
                             timeout=30)
    return checked.returncode, (checked.stdout + checked.stderr).decode().splitlines()


def page(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


def test_promtool_accepts_the_shims_metrics_and_the_models_series_on_tritons(shim, triton):
    code, problems = promtool_check(page(shim.metrics_url))
    assert (code, problems) == (0, [])
    triton_page = page(triton.metrics_url)
    assert b"intern_decision_calls_total" in triton_page and b"intern_decision_model_info" in triton_page
    code, problems = promtool_check(triton_page)
    # Triton's own nv_* series break promtool's naming lint (no _total, _us units), which Triton decides; the page
    # must parse (exit 3 is lint only, 1 would be an unreadable page) and the model's series must lint clean.
    assert code in (0, 3), problems
    assert [line for line in problems if not line.startswith("nv_")] == []


def test_the_shims_log_is_json_with_the_request_id_on_every_request_line(shim):
    with httpx.Client(base_url=shim.url, timeout=60) as http:
        http.post("/decide", json={"id": "x", "state": "secret state words", "question": "q?", "options": OPTIONS},
                  headers={**AUTH, "X-Request-Id": "log-check-1"})
    deadline = time.monotonic() + 5
    while '"log-check-1"' not in shim.log_text():
        assert time.monotonic() < deadline, shim.log_text()[-2000:]
        time.sleep(0.05)
    lines = [json.loads(line) for line in shim.log_text().splitlines() if line.strip()]  # every line is JSON
    access = [line for line in lines if line.get("request_id") == "log-check-1"]
    assert [(line["logger"], line["route"], line["status"], line["calls"]) for line in access] == \
        [("intern_decision.shim.access", "/decide", 200, 1)]
    assert access[0]["input_tokens"] > 0 and access[0]["duration_ms"] > 0
    assert any(line["logger"].startswith("uvicorn") for line in lines)
    text = shim.log_text()
    assert "secret state words" not in text and SHIM_TOKEN not in text
