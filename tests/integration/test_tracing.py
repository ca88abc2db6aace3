"""One trace per request: a shim with tracing on and the session's tritonserver (OpenTelemetry mode) both export to a
real OTLP/HTTP receiver; a caller's traceparent is continued by the shim's spans and by Triton's, and the trace id is
in the shim's log lines and the model's call log."""
from __future__ import annotations

import json
import secrets
import time

import httpx
import pytest

from devstack.shim import ShimServer
from shim.tracing import SERVICE_NAME
from wire.tracing import TRITON_SERVICE_NAME

from .helpers import AUTH, SHIM_TOKEN, decide

pytestmark = pytest.mark.triton
SHIM_SPANS = {"POST /decide", "read body", "parse body", "wait for the model", "infer"}
# Triton's own spans of one inference request (OpenTelemetry mode, level TIMESTAMPS).
TRITON_SPANS = {"InferRequest", "compute"}


@pytest.fixture(scope="module")
def traced_shim(triton, otlp, tmp_path_factory):
    env = {"INTERN_DECISION_API_TOKEN": SHIM_TOKEN, "INTERN_DECISION_PROBE_SECONDS": "3600",
           "INTERN_DECISION_DRAIN_SECONDS": "0.1", "INTERN_DECISION_OTLP_ENDPOINT": otlp.endpoint,
           "OTEL_BSP_SCHEDULE_DELAY": "200"}  # the SDK's batches every 200 ms rather than 5 s
    with ShimServer(triton, env, tmp_path_factory.mktemp("traced-shim") / "shim.log").serving(60) as server:
        yield server


def expected(shim_spans=SHIM_SPANS) -> set[tuple[str, str]]:
    return {(SERVICE_NAME, name) for name in shim_spans} | {(TRITON_SERVICE_NAME, name) for name in TRITON_SPANS}


def test_the_callers_trace_holds_the_shims_spans_and_tritons(traced_shim, triton, otlp):
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    headers = {**AUTH, "traceparent": f"00-{trace_id}-{caller_span}-01", "X-Request-Id": "traced-1"}
    with httpx.Client(base_url=traced_shim.url, timeout=60) as http:
        assert http.post("/decide", json=decide(), headers=headers).status_code == 200
    spans = otlp.wait_for(trace_id, expected())
    found = {(span.service, span.name) for span in spans}
    assert expected() <= found, found
    by_name = {span.name: span for span in spans if span.service == SERVICE_NAME}
    server = by_name["POST /decide"]
    assert server.parent_span_id == caller_span  # the caller's span is the shim's parent
    assert server.attributes["intern_decision.request_id"] == {"stringValue": "traced-1"}
    assert server.attributes["http.response.status_code"] == {"intValue": "200"}
    for name in SHIM_SPANS - {"POST /decide"}:
        assert by_name[name].parent_span_id == server.span_id, name
    # Triton's request span hangs under the shim's span of the inference request that carried the context.
    (triton_request,) = [span for span in spans if (span.service, span.name) == (TRITON_SERVICE_NAME, "InferRequest")]
    assert triton_request.parent_span_id == by_name["infer"].span_id
    assert_logged(traced_shim, triton, trace_id, "traced-1")


def test_a_request_without_a_traceparent_starts_its_own_trace(traced_shim, triton, otlp):
    with httpx.Client(base_url=traced_shim.url, timeout=60) as http:
        answered = http.post("/decide", json=decide(), headers={**AUTH, "X-Request-Id": "traced-2"})
        refused = http.post("/decide", json={"id": "x"}, headers={**AUTH, "X-Request-Id": "traced-3"})
    assert (answered.status_code, refused.status_code) == (200, 422)
    trace_id = access_line(traced_shim, "traced-2")["trace_id"]
    spans = otlp.wait_for(trace_id, expected())
    server = next(span for span in spans if span.name == "POST /decide")
    assert server.parent_span_id == ""  # a root: the shim started the trace
    assert expected() <= {(span.service, span.name) for span in spans}
    assert_logged(traced_shim, triton, trace_id, "traced-2")
    # A request refused before the model still has its trace, without a model's span.
    refused_trace = access_line(traced_shim, "traced-3")["trace_id"]
    assert refused_trace != trace_id
    refused_spans = otlp.wait_for(refused_trace, {(SERVICE_NAME, "POST /decide")})
    assert {span.name for span in refused_spans} == {"POST /decide", "read body", "parse body"}


def test_the_shim_without_an_endpoint_traces_nothing(shim, otlp):
    """The session's shim has no OTLP_ENDPOINT: no span of the shim's, no trace id in its log lines, and Triton's
    own spans of its request, which carried no traceparent, in a trace of Triton's alone."""
    trace_id = secrets.token_hex(16)
    headers = {**AUTH, "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01", "X-Request-Id": "untraced-1"}
    with httpx.Client(base_url=shim.url, timeout=60) as http:
        assert http.post("/decide", json=decide(), headers=headers).status_code == 200
    line = access_line(shim, "untraced-1")
    assert "trace_id" not in line
    time.sleep(1)  # Triton's batches leave every 200 ms
    assert otlp.spans(trace_id) == []


def access_line(server: ShimServer, request_id: str, timeout: float = 5.0) -> dict:
    """The shim's access line of a request (the one with a status), once written."""
    deadline = time.monotonic() + timeout
    while True:
        for raw in server.log_text().splitlines():
            if f'"{request_id}"' in raw:
                line = json.loads(raw)
                if line.get("request_id") == request_id and "status" in line:
                    return line
        assert time.monotonic() < deadline, server.log_text()[-2000:]
        time.sleep(0.1)


def assert_logged(shim_server: ShimServer, triton, trace_id: str, request_id: str) -> None:
    assert access_line(shim_server, request_id)["trace_id"] == trace_id
    deadline = time.monotonic() + 5
    wanted = f'\\"request_id\\": \\"{request_id}.0\\"'  # Triton writes the call log's JSON as an escaped string
    while not [line for line in triton.log_text().splitlines() if wanted in line and trace_id in line]:
        assert time.monotonic() < deadline, triton.log_text()[-2000:]
        time.sleep(0.1)
