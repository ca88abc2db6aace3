"""The shim's Prometheus series, on a registry of their own, served on a port of their own (never the public one).

intern_decision_shim_requests_total{route,status}     HTTP requests answered, by route template and status
intern_decision_shim_request_seconds{route}           histogram of the time to answer, 5 ms to 30 s
intern_decision_shim_requests_in_flight               HTTP requests being handled now, any route
intern_decision_shim_requests_queued                  admitted POSTs waiting for the inference lock (INV-2)
intern_decision_shim_busy_total                       requests refused with 429 busy
intern_decision_shim_client_gone_total                admitted requests not scored: their client went away first
intern_decision_shim_triton_errors_total{kind}        failed inference requests to Triton, by kind (TRITON_ERROR_KINDS)
intern_decision_shim_calls_per_request                histogram of the calls a planned request sends the model
intern_decision_shim_model_up                         1 when the last health check found the model usable, else 0

route is one of ROUTES or "other", never the raw path; no label carries a token, an id or body text.
"""
from __future__ import annotations

from typing import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, start_http_server
from wire.env import port_number

from .errors import Failure

ROUTES = frozenset({"/health", "/decide", "/decide/shared", "/v1/models", "/v1/systemone", "/v1/systemone/batch"})
OTHER_ROUTE = "other"
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 7.5, 10.0,
                   15.0, 30.0)
CALLS_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
# The model's own kinds (the wire protocol's words), Triton answering an error of its own or not ready
# (model_unavailable), no answer at all (transport), an answer that cannot be read (unreadable_answer).
TRITON_ERROR_KINDS = tuple(failure.label for failure in Failure if failure.label is not None)
DEFAULT_PORT = 9464


def route_of(path: str) -> str:
    return path if path in ROUTES else OTHER_ROUTE


class ShimMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        ProcessCollector(registry=self.registry)
        prefix = "intern_decision_shim_"
        self._requests = Counter(prefix + "requests", "HTTP requests answered, by route template and status",
                                 ["route", "status"], registry=self.registry)
        self._seconds = Histogram(prefix + "request_seconds", "Seconds to answer an HTTP request, by route template",
                                  ["route"], buckets=SECONDS_BUCKETS, registry=self.registry)
        self.in_flight = Gauge(prefix + "requests_in_flight", "HTTP requests being handled now",
                               registry=self.registry)
        self.queued = Gauge(prefix + "requests_queued", "Admitted requests waiting for the inference lock",
                            registry=self.registry)
        self._busy = Counter(prefix + "busy", "Requests refused with 429 busy", registry=self.registry)
        self.client_gone = Counter(prefix + "client_gone", "Admitted requests not scored: their client went away "
                                   "before they reached the model", registry=self.registry)
        triton_errors = Counter(prefix + "triton_errors", "Failed inference requests to Triton, by kind", ["kind"],
                                registry=self.registry)
        self.calls_per_request = Histogram(prefix + "calls_per_request", "Calls a planned request sends the model",
                                           buckets=CALLS_BUCKETS, registry=self.registry)
        self.model_up = Gauge(prefix + "model_up", "1 when the last health check found the model usable, else 0",
                              registry=self.registry)
        # Children bound once: labels() takes a lock and builds a key on every call.
        self._triton_errors = {kind: triton_errors.labels(kind) for kind in TRITON_ERROR_KINDS}
        self._seconds_by_route = {route: self._seconds.labels(route) for route in (*ROUTES, OTHER_ROUTE)}
        self._requests_by_label: dict[tuple[str, int], Counter] = {}

    def answered(self, route: str, status: int, seconds: float) -> None:
        counter = self._requests_by_label.get((route, status))
        if counter is None:
            counter = self._requests_by_label[(route, status)] = self._requests.labels(route, str(status))
        counter.inc()
        self._seconds_by_route[route].observe(seconds)
        if status == 429:
            self._busy.inc()

    def triton_error(self, failure: Failure) -> None:
        if failure.label is not None:
            self._triton_errors[failure.label].inc()


def listen_address(env: Mapping[str, str], shim_host: str) -> tuple[str, int] | None:
    """Where the metrics are served: INTERN_DECISION_METRICS_HOST (default: the shim's host) and
    INTERN_DECISION_METRICS_PORT (default 9464); port 0 turns them off. A bad value is a ValueError naming it."""
    raw = env.get("INTERN_DECISION_METRICS_PORT", "") or str(DEFAULT_PORT)
    port = port_number(raw, lowest=0)
    if port is None:
        raise ValueError(f"INTERN_DECISION_METRICS_PORT must be a port number 1..65535, or 0 for no metrics, "
                         f"got {raw!r}")
    if port == 0:
        return None
    return env.get("INTERN_DECISION_METRICS_HOST", "") or shim_host, port


def serve(registry: CollectorRegistry, host: str, port: int):
    """prometheus-client's own HTTP server on a daemon thread; OSError when the port cannot be bound."""
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server
