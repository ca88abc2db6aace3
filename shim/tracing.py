"""One trace per request with OpenTelemetry's SDK, over OTLP/HTTP to INTERN_DECISION_OTLP_ENDPOINT (the spans:
docs/operations.md). Unset, OpenTelemetry is not even imported, and every helper here is a no-op."""
from __future__ import annotations

import contextlib
from typing import ContextManager, MutableMapping

SERVICE_NAME = "intern-decision-shim"
_OFF = contextlib.nullcontext()


class _On:
    """What tracing needs once it is on: the tracer, the trace API and the W3C propagator."""

    def __init__(self, endpoint: str):
        # Imported here: without tracing, the process holds none of their objects for its garbage collector to walk.
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
    """Returns the tracer provider, whose shutdown() sends what is left."""
    global _on
    _on = _On(endpoint)
    return _on.provider


def span(name: str, attributes: dict | None = None) -> ContextManager:
    """A span of the request's trace, the current one inside it; while tracing is off, a shared context that does
    nothing (about 0.3 µs; OpenTelemetry's own no-op span costs about 4.5)."""
    return _OFF if _on is None else _on.tracer.start_as_current_span(name, attributes=attributes)


def request_span(name: str, headers: dict[str, str], attributes: dict) -> ContextManager:
    """A child of the caller's traceparent (lowercase header names) when it is valid, else a new trace's root."""
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
