"""A real OTLP/HTTP traces receiver for the tests: POST /v1/traces, protobuf or OTLP's JSON, decoded with
OpenTelemetry's own protobuf package into one Span per span received."""
from __future__ import annotations

import base64
import gzip
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

TRACES_PATH = "/v1/traces"
# OTLP's JSON writes these ids in hex where protobuf's JSON mapping expects base64 (the OTLP specification).
_HEX_IDS = ("traceId", "spanId", "parentSpanId")


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str  # 32 hex digits
    span_id: str
    parent_span_id: str  # "" for a root
    attributes: dict


def decode(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    if content_type.startswith("application/json"):
        json_format.ParseDict(_ids_to_base64(json.loads(body)), request, ignore_unknown_fields=True)
    else:
        request.ParseFromString(body)
    return request


def _ids_to_base64(value):
    if isinstance(value, dict):
        return {key: base64.b64encode(bytes.fromhex(item)).decode() if key in _HEX_IDS and isinstance(item, str)
                else _ids_to_base64(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_ids_to_base64(item) for item in value]
    return value


def spans_of(request: ExportTraceServiceRequest) -> list[Span]:
    found = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attributes = {kv.key: json_format.MessageToDict(kv.value) for kv in span.attributes}
                found.append(Span(resource.get("service.name", ""), span.name, span.trace_id.hex(),
                                  span.span_id.hex(), span.parent_span_id.hex(), attributes))
    return found


class OtlpReceiver:
    """Serves on 127.0.0.1 in a thread of this process; spans() is every span received so far."""

    def __init__(self):
        self._spans: list[Span] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != TRACES_PATH:
                    self.send_error(404)
                    return
                decoded = spans_of(decode(body, self.headers.get("Content-Type", "")))
                with receiver._lock:
                    receiver._spans.extend(decoded)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{TRACES_PATH}"

    def __enter__(self) -> "OtlpReceiver":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def spans(self, trace_id: str | None = None) -> list[Span]:
        with self._lock:
            return [span for span in self._spans if trace_id is None or span.trace_id == trace_id]

    def wait_for(self, trace_id: str, expected: set[tuple[str, str]], timeout: float = 15.0) -> list[Span]:
        """The trace's spans, once every expected (service, span name) has come (or the timeout has passed)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans(trace_id)
            if expected <= {(span.service, span.name) for span in spans} or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)
