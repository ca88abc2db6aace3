"""The shim's metrics and JSON logs over a fake model: what each series counts, that labels never carry the raw
path, an id or a token, that every log line is JSON with the request id, and that promtool accepts the page."""
from __future__ import annotations

import asyncio
import contextvars
import io
import json
import logging
import socket
import subprocess
import sys

import httpx
import pytest
from prometheus_client import generate_latest

import shim.__main__ as shim_main
from shim import cycle, logs
from shim import health as shim_health
from shim.app import create_app
from shim.errors import MODEL_NOT_READY, TRITON_NOT_READY, Failure, IncompleteAnswer, ModelFailure, Problem, unreachable
from shim.metrics import TRITON_ERROR_KINDS, ShimMetrics
from shim.settings import ShimSettings
from tests.tools import required_tool

from .fake_model import FakeModel
from .shim_helpers import AUTH, TOKEN, decide_body, make_settings, shared_body

pytestmark = pytest.mark.anyio


@pytest.fixture
def model():
    return FakeModel(base={"approve": 1.0, "reject": 0.0})


@pytest.fixture
def metrics():
    return ShimMetrics()


@pytest.fixture
async def client(model, metrics):
    app = create_app(make_settings(max_queue="2", max_queue_per_peer="2"), model, metrics)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim") as client:
        yield client


@pytest.fixture
def log_lines():
    """What the shim's handler (JSON formatter, request-id filter) writes, one parsed object per line."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    handler.addFilter(logs.RequestIdFilter())
    logger = logging.getLogger("intern_decision")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def sample(metrics: ShimMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


# --- Metrics ----------------------------------------------------------------------------------------------------

async def test_requests_are_counted_by_route_template_and_status(client, metrics):
    await client.get("/health")
    await client.post("/decide", json=decide_body(), headers=AUTH)
    await client.post("/decide", json=decide_body(), headers=AUTH)
    await client.post("/decide/shared", json=shared_body(3), headers=AUTH)
    await client.post("/decide", json=decide_body(), headers={"Authorization": "Bearer wrong"})
    await client.post("/decide", json={"id": ""}, headers=AUTH)
    await client.get("/secret-path-with-" + TOKEN)
    counted = {(s.labels["route"], s.labels["status"]): s.value
               for s in metrics.registry.collect() if s.name == "intern_decision_shim_requests"
               for s in s.samples if s.name.endswith("_total")}
    assert counted == {("/health", "200"): 1, ("/decide", "200"): 2, ("/decide/shared", "200"): 1,
                       ("/decide", "401"): 1, ("/decide", "422"): 1, ("other", "404"): 1}
    assert sample(metrics, "intern_decision_shim_request_seconds_count", route="/decide") == 4
    assert sample(metrics, "intern_decision_shim_request_seconds_count", route="other") == 1
    assert sample(metrics, "intern_decision_shim_requests_in_flight") == 0
    assert TOKEN not in generate_latest(metrics.registry).decode()


async def test_calls_per_request_counts_the_planned_calls(client, metrics):
    await client.post("/decide", json=decide_body(), headers=AUTH)
    await client.post("/decide/shared", json=shared_body(40), headers=AUTH)  # 16 + 16 + 8
    assert sample(metrics, "intern_decision_shim_calls_per_request_count") == 2
    assert sample(metrics, "intern_decision_shim_calls_per_request_sum") == 4
    assert sample(metrics, "intern_decision_shim_calls_per_request_bucket", le="1.0") == 1


async def test_queued_counts_requests_waiting_for_the_lock_and_429_counts_as_busy(client, model, metrics):
    model.gate = asyncio.Event()
    first = asyncio.create_task(client.post("/decide", json=decide_body(), headers=AUTH))
    second = asyncio.create_task(client.post("/decide", json=decide_body(), headers=AUTH))
    for _ in range(200):
        if model.active == 1 and sample(metrics, "intern_decision_shim_requests_queued") == 1:
            break
        await asyncio.sleep(0.005)
    assert sample(metrics, "intern_decision_shim_requests_queued") == 1
    assert sample(metrics, "intern_decision_shim_requests_in_flight") == 2
    refused = await client.post("/decide", json=decide_body(), headers=AUTH)
    assert refused.status_code == 429
    model.gate.set()
    assert [(await first).status_code, (await second).status_code] == [200, 200]
    assert sample(metrics, "intern_decision_shim_requests_queued") == 0
    assert sample(metrics, "intern_decision_shim_requests_in_flight") == 0
    assert sample(metrics, "intern_decision_shim_busy_total") == 1
    assert sample(metrics, "intern_decision_shim_requests_total", route="/decide", status="429") == 1


@pytest.mark.parametrize("error, kind, status", [
    (ModelFailure(Failure.INVALID, "too many tokens"), "invalid_request", 422),
    (ModelFailure(Failure.OUT_OF_MEMORY, "CUDA out of memory"), "out_of_memory", 503),
    (ModelFailure(Failure.FAILED, "RuntimeError"), "scoring_failed", 500),
    (ModelFailure(Failure.TRITON, "Triton answered 500: stub not healthy"), "model_unavailable", 502),
    (unreachable("Triton did not answer: ConnectionRefusedError"), "transport", 502),
    (IncompleteAnswer("the model's answer cannot be read"), "unreadable_answer", 500),
])
async def test_triton_errors_are_counted_by_kind(client, model, metrics, error, kind, status):
    model.fail_with = error
    assert (await client.post("/decide", json=decide_body(), headers=AUTH)).status_code == status
    counts = {k: sample(metrics, "intern_decision_shim_triton_errors_total", kind=k) for k in TRITON_ERROR_KINDS}
    assert counts == {k: float(k == kind) for k in TRITON_ERROR_KINDS}
    assert sample(metrics, "intern_decision_shim_requests_queued") == 0


async def test_health_sets_model_up(client, model, metrics):
    await client.get("/health")
    assert sample(metrics, "intern_decision_shim_model_up") == 1
    model.is_ready = Problem(TRITON_NOT_READY, "Triton is not ready")
    assert (await client.get("/health")).status_code == 503
    assert sample(metrics, "intern_decision_shim_model_up") == 0


async def test_model_up_is_refreshed_in_the_background_without_health_calls(model, metrics, monkeypatch):
    monkeypatch.setattr(shim_health, "MODEL_CHECK_SECONDS", 0.01)
    app = create_app(make_settings(), model, metrics)
    async with app.router.lifespan_context(app):
        await asyncio.sleep(0.05)
        assert sample(metrics, "intern_decision_shim_model_up") == 1
        model.is_ready = Problem(MODEL_NOT_READY, "the model 'intern_decision' is not ready")
        await asyncio.sleep(0.05)
        assert sample(metrics, "intern_decision_shim_model_up") == 0
        model.is_ready = None
        await asyncio.sleep(0.05)
        assert sample(metrics, "intern_decision_shim_model_up") == 1
    assert not model.opened


def test_route_is_the_template_never_the_raw_path():
    """The labels are the paths of the API's routes as the app binds them; anything else is "other"."""
    metrics = ShimMetrics()
    create_app(make_settings(), FakeModel(), metrics)
    paths = ("/decide", "/decide/shared", "/health", "/v1/models", "/v1/systemone", "/v1/systemone/batch",
             "/decide/", "/openapi.json", "/x/" + TOKEN)
    assert [metrics.route_of(path) for path in paths] == [*paths[:6], "other", "other", "other"]


async def test_promtool_accepts_the_shims_metrics_page(client, model, metrics):
    await client.post("/decide", json=decide_body(), headers=AUTH)
    model.fail_with = ModelFailure(Failure.OUT_OF_MEMORY, "oom")
    await client.post("/decide", json=decide_body(), headers=AUTH)
    await client.get("/health")
    page = generate_latest(metrics.registry)
    checked = subprocess.run([required_tool("promtool"), "check", "metrics"], input=page, capture_output=True,
                             timeout=30)
    assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()
    assert b"intern_decision_shim_requests_total" in page


# --- Where the metrics are served --------------------------------------------------------------------------------

def listen_address(env: dict[str, str], shim_host: str) -> tuple[str, int] | None:
    """Where the shim's settings put the metrics, the shim on shim_host (python -m shim --host)."""
    secrets = {"INTERN_DECISION_API_TOKEN": TOKEN, "INTERN_DECISION_TRITON_API_KEY": "k" * 32}
    return ShimSettings.from_env({**secrets, **env}, host=shim_host).metrics_address


def test_metrics_listen_on_the_shims_host_and_9464_by_default_the_loopback_when_it_listens_on_every_address():
    assert listen_address({}, "0.0.0.0") == ("127.0.0.1", 9464)
    assert listen_address({}, "::") == ("::1", 9464)
    assert listen_address({"INTERN_DECISION_METRICS_HOST": "0.0.0.0"}, "0.0.0.0") == ("0.0.0.0", 9464)
    assert listen_address({"INTERN_DECISION_METRICS_PORT": "9100"}, "127.0.0.1") == ("127.0.0.1", 9100)
    assert listen_address({"INTERN_DECISION_METRICS_HOST": "10.1.2.3"}, "0.0.0.0") == ("10.1.2.3", 9464)
    assert listen_address({"INTERN_DECISION_METRICS_PORT": "0"}, "127.0.0.1") is None
    assert listen_address({"INTERN_DECISION_HOST": "10.9.9.9"}, None) == ("10.9.9.9", 9464)


@pytest.mark.parametrize("raw", ["-1", "65536", "80a", "９４６４", " 9464"])
def test_a_bad_metrics_port_is_refused_naming_the_variable(raw):
    with pytest.raises(ValueError, match="INTERN_DECISION_METRICS_PORT must be a port number 1..65535, or 0 for no"):
        listen_address({"INTERN_DECISION_METRICS_PORT": raw}, "127.0.0.1")


def test_a_taken_metrics_port_stops_the_shim_with_one_line(monkeypatch, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("INTERN_DECISION_API_TOKEN", TOKEN)
        monkeypatch.setenv("INTERN_DECISION_TRITON_API_KEY", "k" * 32)
        monkeypatch.setenv("INTERN_DECISION_METRICS_PORT", str(port))
        assert shim_main.main(["--port", "1"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"metrics port 127.0.0.1:{port} cannot be bound" in error


def test_the_metrics_port_must_differ_from_the_shims(monkeypatch, capsys):
    monkeypatch.setenv("INTERN_DECISION_API_TOKEN", TOKEN)
    monkeypatch.setenv("INTERN_DECISION_TRITON_API_KEY", "k" * 32)
    monkeypatch.setenv("INTERN_DECISION_METRICS_PORT", "8080")
    assert shim_main.main(["--port", "8080"]) == 2
    assert "INTERN_DECISION_METRICS_PORT must differ" in capsys.readouterr().err


# --- Logs -------------------------------------------------------------------------------------------------------

async def test_one_json_access_line_per_request_with_the_request_id(client, log_lines):
    await client.post("/decide/shared", json=shared_body(17), headers={**AUTH, "X-Request-Id": "req-7"})
    await client.get("/health", headers={"X-Request-Id": "req-8"})
    await client.post("/decide", json=decide_body(), headers={"X-Request-Id": "req-9"})
    access = [line for line in log_lines() if line["logger"] == "intern_decision.shim.access"]
    assert [(line["request_id"], line["route"], line["status"], line["calls"], line["input_tokens"])
            for line in access] == [("req-7", "/decide/shared", 200, 2, 260 + 110),
                                    ("req-8", "/health", 200, None, None),
                                    ("req-9", "/decide", 401, None, None)]
    assert all(line["duration_ms"] >= 0 and line["level"] == "info" and line["ts"].endswith("Z")
               for line in access)


async def test_lines_written_inside_a_request_carry_its_id_and_no_request_text(client, model, log_lines):
    model.fail_with = ModelFailure(Failure.TRITON, "Triton answered 500: stub not healthy")
    body = decide_body(state="secret state text", question="secret question text")
    await client.post("/decide", json=body, headers={**AUTH, "X-Request-Id": "req-502"})
    lines = log_lines()
    # the error, the watch marking the model down, the access line
    assert {line["logger"] for line in lines} == {"intern_decision.shim", "intern_decision.shim.watch",
                                                  "intern_decision.shim.access"}
    assert all(line["request_id"] == "req-502" for line in lines)
    text = json.dumps(lines)
    assert "secret" not in text and TOKEN not in text


def test_exceptions_are_one_json_line_with_the_traceback():
    record = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, "Exception in ASGI application", None,
                               None)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record.exc_info = sys.exc_info()
    def in_the_requests_context() -> None:
        cycle.enter(cycle.Cycle("req-exc"))
        logs.RequestIdFilter().filter(record)

    contextvars.copy_context().run(in_the_requests_context)
    line = logs.JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["request_id"] == "req-exc" and parsed["level"] == "error"
    assert "RuntimeError: boom" in parsed["exception"]


async def test_an_unexpected_failure_is_counted_and_logged_as_500_with_the_request_id(model, metrics, log_lines):
    model.fail_with = RuntimeError("boom")
    app = create_app(make_settings(), model, metrics)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://shim") as client:
        response = await client.post("/decide", json=decide_body(), headers={**AUTH, "X-Request-Id": "req-500"})
    assert response.status_code == 500
    assert sample(metrics, "intern_decision_shim_requests_total", route="/decide", status="500") == 1
    lines = log_lines()
    assert [line["status"] for line in lines if line["logger"] == "intern_decision.shim.access"] == [500]
    assert {line["request_id"] for line in lines} == {"req-500"}
    assert any("RuntimeError: boom" in line.get("exception", "") for line in lines)
