"""One trace per request with OpenTelemetry's SDK: spans go over OTLP/HTTP to INTERN_DECISION_OTLP_ENDPOINT, and
nowhere when it is unset (the API's no-op tracer then: no span is recorded, nothing is sent).

The spans are the request's (shim/edge/trace.py), the body's read and parse, the wait for the model's lock and each
inference request to Triton, which carries the context on as a W3C traceparent header (shim/port/triton.py)."""
from __future__ import annotations

import contextlib
from typing import ContextManager

from opentelemetry import trace

SERVICE_NAME = "intern-decision-shim"

tracer = trace.get_tracer("intern_decision.shim")  # a proxy: the provider start() sets, else the no-op one
_OFF = contextlib.nullcontext()
_on = False  # set once by start(), in python -m shim's process


def start(endpoint: str):
    """The process's tracer provider, exporting to endpoint in batches; shut it down to send what is left."""
    # The SDK and the exporter (protobuf, requests) are loaded only when tracing is on: off, the process holds none
    # of their objects, which its garbage collector would walk.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    global _on
    _on = True
    return provider


def span(name: str, attributes: dict | None = None) -> ContextManager:
    """A span of the request's trace, the current one inside it; while tracing is off, a context that does nothing
    (the API's no-op span costs about 4.5 µs, this about 0.3)."""
    return tracer.start_as_current_span(name, attributes=attributes) if _on else _OFF


def current_trace_id() -> str | None:
    """The trace id of the span in force, 32 lowercase hex digits, or None outside a recorded trace."""
    context = trace.get_current_span().get_span_context()
    return trace.format_trace_id(context.trace_id) if context.is_valid else None
