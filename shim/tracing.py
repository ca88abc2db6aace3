"""One trace per request with OpenTelemetry's SDK: spans go over OTLP/HTTP to INTERN_DECISION_OTLP_ENDPOINT, and
nowhere when it is unset. Off, OpenTelemetry is not even imported: every helper here is then a no-op.

The spans are the request's (shim/edge/trace.py), the body's read and parse, the wait for the model's lock and each
inference request to Triton, which carries the context on as a W3C traceparent header (shim/port/triton.py)."""
from __future__ import annotations

import contextlib
from typing import ContextManager, MutableMapping

SERVICE_NAME = "intern-decision-shim"
_OFF = contextlib.nullcontext()


class _On:
    """What tracing needs once it is on: the tracer, the trace API and the W3C propagator."""

    def __init__(self, endpoint: str):
        # Imported here: the SDK and the exporter (protobuf, requests) are loaded only when tracing is on, so that
        # a process without tracing holds none of their objects, which its garbage collector would walk.
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        self.tracer = self.provider.get_tracer("intern_decision.shim")
        self.trace = trace
        self.propagator = TraceContextTextMapPropagator()


_on: _On | None = None  # set once by start(), in python -m shim's process


def start(endpoint: str):
    """Tracing on for this process, exporting to endpoint in batches; returns the tracer provider, whose
    shutdown() sends what is left."""
    global _on
    _on = _On(endpoint)
    return _on.provider


def span(name: str, attributes: dict | None = None) -> ContextManager:
    """A span of the request's trace, the current one inside it; while tracing is off, a shared context that does
    nothing (about 0.3 µs; OpenTelemetry's own no-op span costs about 4.5)."""
    return _OFF if _on is None else _on.tracer.start_as_current_span(name, attributes=attributes)


def request_span(name: str, headers: dict[str, str], attributes: dict) -> ContextManager:
    """The request's server span, a child of the caller's traceparent among headers (lowercase names) when it is a
    valid one, else the root of a new trace."""
    if _on is None:
        return _OFF
    return _on.tracer.start_as_current_span(name, context=_on.propagator.extract(headers),
                                            kind=_on.trace.SpanKind.SERVER, attributes=attributes)


def current_trace_id() -> str | None:
    """The trace id of the span in force, 32 lowercase hex digits, or None outside a trace (or tracing off)."""
    if _on is None:
        return None
    context = _on.trace.get_current_span().get_span_context()
    return _on.trace.format_trace_id(context.trace_id) if context.is_valid else None


def inject(headers: MutableMapping[str, str]) -> None:
    """Adds the traceparent of the span in force to headers (nothing while tracing is off)."""
    if _on is not None:
        _on.propagator.inject(headers)
