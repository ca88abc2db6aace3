"""The shim's Prometheus series, on a registry of their own, never on the public port (docs/operations.md, "The
shim's series"); no label carries a raw path, a token, an id or body text."""
from __future__ import annotations

from typing import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

from .callers import UNNAMED
from .errors import Failure

OTHER_ROUTE = "other"
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 7.5, 10.0,
                   15.0, 30.0)
CALLS_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
TRITON_ERROR_KINDS = tuple(failure.label for failure in Failure if failure.label is not None)


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
        self._by_caller = Counter(prefix + "caller_requests", "HTTP requests answered, by caller (API_KEYS_FILE's "
                                  "key name, default for API_TOKEN, none unauthenticated) and status",
                                  ["caller", "status"], registry=self.registry)
        self._busy = Counter(prefix + "busy", "Requests refused with 429 busy", registry=self.registry)
        self.client_gone = Counter(prefix + "client_gone", "Admitted requests not scored: their client went away "
                                   "before they reached the model", registry=self.registry)
        triton_errors = Counter(prefix + "triton_errors", "Failed inference requests to Triton, by kind", ["kind"],
                                registry=self.registry)
        self.calls_per_request = Histogram(prefix + "calls_per_request", "Calls a planned request sends the model",
                                           buckets=CALLS_BUCKETS, registry=self.registry)
        self.model_up = Gauge(prefix + "model_up", "1 when the last health check found the model usable, else 0",
                              registry=self.registry)
        # bound once: labels() takes a lock and builds a key on every call
        self._triton_errors = {kind: triton_errors.labels(kind) for kind in TRITON_ERROR_KINDS}
        self._routes: frozenset[str] = frozenset()
        self._seconds_by_route = {OTHER_ROUTE: self._seconds.labels(OTHER_ROUTE)}
        self._requests_by_label: dict[tuple, Counter] = {}
        self._by_caller_label: dict[tuple, Counter] = {}

    def watch_connections(self, roster, limit: int | None) -> None:
        prefix = "intern_decision_shim_"
        Gauge(prefix + "connections_open", "Connections open to the shim's API port",
              registry=self.registry).set_function(lambda: len(roster))
        Gauge(prefix + "connections_busy", "Connections with a request begun and not answered (a head still "
              "arriving included): what idle connections give way to", registry=self.registry
              ).set_function(lambda: roster.busy)
        if limit is not None:
            Gauge(prefix + "connections_max", "MAX_CONNECTIONS: the busy connections the shim serves at once",
                  registry=self.registry).set(limit)

    def name_routes(self, paths: Iterable[str]) -> None:
        self._routes = frozenset(paths)
        for route in self._routes:
            self._seconds_by_route.setdefault(route, self._seconds.labels(route))

    def route_of(self, path: str) -> str:
        return path if path in self._routes else OTHER_ROUTE

    def answered(self, route: str, status: int, seconds: float, caller: str = UNNAMED) -> None:
        _bound(self._requests_by_label, self._requests, route, status).inc()
        _bound(self._by_caller_label, self._by_caller, caller, status).inc()
        self._seconds_by_route[route].observe(seconds)
        if status == 429:
            self._busy.inc()

    def triton_error(self, failure: Failure) -> None:
        if failure.label is not None:
            self._triton_errors[failure.label].inc()


def _bound(children: dict[tuple, Counter], counter: Counter, *labels: object) -> Counter:
    child = children.get(labels)
    if child is None:
        child = children[labels] = counter.labels(*map(str, labels))
    return child
