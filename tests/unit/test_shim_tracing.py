"""The shim's spans in process, exported by OpenTelemetry's SDK to a real OTLP/HTTP receiver: the request's span
continues a valid traceparent and starts a trace otherwise, with the body's, the lock's and the model's spans under
it; tracing off installs no layer and imports none of OpenTelemetry."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from shim import tracing
from shim.app import create_app
from shim.edge.access import AccessLog
from shim.edge.request_id import RequestId
from shim.edge.trace import TraceRequest
from tests.otlp_receiver import OtlpReceiver

from .fake_model import FakeModel
from .shim_helpers import AUTH, client_for, decide_body, make_settings

CALLER_TRACE, CALLER_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
CHILDREN = {"read body", "parse body", "wait for the model", "infer"}


class Exported:
    """A real OTLP/HTTP receiver and the tracer provider exporting to it; spans() flushes the provider first."""

    def __init__(self, receiver: OtlpReceiver, provider):
        self.receiver, self.provider = receiver, provider

    def spans(self):
        assert self.provider.force_flush(10_000)
        return self.receiver.spans()


@pytest.fixture
def exported(monkeypatch):
    monkeypatch.setattr(tracing, "_on", None)  # restored (off) after the test
    with OtlpReceiver() as receiver:
        provider = tracing.start(receiver.endpoint)
        yield Exported(receiver, provider)
        provider.shutdown()


def post(headers: dict[str, str]) -> int:
    async def send():
        # the setting installs the request's layer; the spans go where the fixture's start() sends them
        async with client_for(FakeModel(), otlp_endpoint="http://127.0.0.1:1/v1/traces") as client:
            return (await client.post("/decide", json=decide_body(), headers={**AUTH, **headers})).status_code

    return asyncio.run(send())


def test_a_valid_traceparent_is_continued_and_the_request_has_its_spans(exported):
    assert post({"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01", "X-Request-Id": "t-1"}) == 200
    spans = [span for span in exported.spans() if span.trace_id == CALLER_TRACE]
    assert {span.service for span in spans} == {tracing.SERVICE_NAME}
    (server,) = [span for span in spans if span.name == "POST /decide"]
    assert server.parent_span_id == CALLER_SPAN
    assert server.attributes["intern_decision.request_id"] == {"stringValue": "t-1"}
    assert server.attributes["http.response.status_code"] == {"intValue": "200"}
    children = {span.name: span for span in spans if span is not server}
    assert set(children) == CHILDREN and {span.parent_span_id for span in children.values()} == {server.span_id}
    assert children["infer"].attributes["intern_decision.calls"] == {"intValue": "1"}


@pytest.mark.parametrize("traceparent", ["", "00-zz-b7ad6b7169203331-01", f"00-{'0' * 32}-{CALLER_SPAN}-01",
                                         f"ff-{CALLER_TRACE}-{CALLER_SPAN}-01"])
def test_without_a_valid_traceparent_the_request_starts_its_own_trace(exported, traceparent):
    assert post({"traceparent": traceparent} if traceparent else {}) == 200
    (server,) = [span for span in exported.spans() if span.name == "POST /decide"]
    assert server.parent_span_id == "" and server.trace_id not in (CALLER_TRACE, "0" * 32)


def layers(**env: str) -> list[type]:
    found, layer = [], create_app(make_settings(**env), FakeModel()).build_middleware_stack()
    while layer is not None:
        found.append(type(layer))
        layer = getattr(layer, "app", None)
    return found


def test_tracing_off_installs_no_layer_and_imports_no_opentelemetry():
    off, on = layers(), layers(otlp_endpoint="http://collector:4318/v1/traces")
    assert TraceRequest not in off and {RequestId, AccessLog} <= set(off)
    assert on.index(TraceRequest) == on.index(RequestId) + 1  # the request id is on the span
    program = ("import sys, asyncio; from tests.unit.shim_helpers import AUTH, client_for, decide_body; "
               "from tests.unit.fake_model import FakeModel\n"
               "async def main():\n"
               "    async with client_for(FakeModel(), mcp='0') as client:\n"
               "        assert (await client.post('/decide', json=decide_body(), headers=AUTH)).status_code == 200\n"
               "asyncio.run(main()); import shim.__main__\n"
               "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr[-2000:]
