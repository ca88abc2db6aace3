"""Every public error code, defined once, with its answer's policy and the routes that answer it."""
from __future__ import annotations

from enum import Enum
from http import HTTPStatus
from typing import NamedTuple

RETRY_AFTER_SECONDS = 1


class Routes(Enum):
    """The OpenAPI operations that can answer an error."""

    EVERY = "every"  # before routing
    TOKEN = "token"  # every POST and GET /v1/models
    POST = "post"


class PublicError(NamedTuple):
    """words: a fixed message (None: it names what was refused); sent: False when only logged and counted;
    error_type: System One's word (a 422 carries FastAPI's detail instead); routes: a Routes rule, or the OpenAPI
    paths of the only routes that answer it."""

    status: int
    code: str
    words: str | None = None
    retry_after: bool = False
    retry_after_on_system_one: bool = False
    closes: bool = False
    by_shim: bool = True
    by_balancer: bool = False
    sent: bool = True
    error_type: str = "invalid_request_error"
    routes: Routes | tuple[str, ...] | None = Routes.POST
    challenges: bool = False  # WWW-Authenticate: Bearer

    @property
    def phrase(self) -> str:
        return HTTPStatus(self.status).phrase

    def headers(self, system_one: bool = False) -> dict[str, str]:
        headers = {}
        if self.retry_after or (system_one and self.retry_after_on_system_one):
            headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        if self.challenges:
            headers["WWW-Authenticate"] = "Bearer"
        if self.closes:
            headers["Connection"] = "close"
        return headers


TOO_MANY_PIPELINED = PublicError(400, "too_many_pipelined_requests", closes=True, routes=Routes.EVERY)
MALFORMED = PublicError(400, "malformed_request", "the request is not valid HTTP/1.1", closes=True,
                        routes=Routes.EVERY)
HEADERS_TOO_LARGE = PublicError(431, "request_header_too_large", closes=True, routes=Routes.EVERY)
TOO_MANY_CONNECTIONS = PublicError(503, "too_many_connections", retry_after=True, closes=True,
                                   error_type="overloaded_error", routes=Routes.EVERY)
# The edge's, in the order a POST meets them.
UNSUPPORTED_TRANSFER_ENCODING = PublicError(501, "unsupported_transfer_encoding", closes=True)
UNAUTHORIZED = PublicError(401, "unauthorized", "missing or wrong bearer token", by_balancer=True,
                           error_type="authentication_error", routes=Routes.TOKEN, challenges=True)
DRAINING = PublicError(503, "draining",
                       "this replica is shutting down and had not started this request; retry (another replica)",
                       retry_after=True, closes=True, error_type="overloaded_error")
UNSUPPORTED_MEDIA_TYPE = PublicError(415, "unsupported_media_type")
BUSY = PublicError(429, "busy", retry_after=True, by_balancer=True, error_type="rate_limit_error")
REQUEST_TIMEOUT = PublicError(408, "request_timeout", by_balancer=True, error_type="timeout_error")
TOO_LARGE = PublicError(413, "request_too_large", by_balancer=True, error_type="request_too_large")
INVALID = PublicError(422, "invalid_request")
SCORING_FAILED = PublicError(500, "scoring_failed", error_type="api_error")
NOT_FOUND = PublicError(404, "not_found", error_type="not_found_error", routes=None)
METHOD_NOT_ALLOWED = PublicError(405, "method_not_allowed", routes=None)
UNAVAILABLE = PublicError(502, "model_unavailable", "model unavailable", error_type="api_error", routes=Routes.TOKEN)
OUT_OF_MEMORY = PublicError(503, "out_of_memory",
                            "the model ran out of GPU memory for this request; the service keeps answering",
                            retry_after_on_system_one=True, error_type="overloaded_error")
CLIENT_GONE = PublicError(499, "client_gone", "the client went away before its request reached the model",
                          sent=False, routes=None)
NO_REPLICA = PublicError(503, "no_replica", "no replica could take the request in time; retry later",
                         retry_after=True, by_shim=False, by_balancer=True, error_type="overloaded_error",
                         routes=None)

REGISTRY = (TOO_MANY_PIPELINED, MALFORMED, UNAUTHORIZED, NOT_FOUND, METHOD_NOT_ALLOWED, REQUEST_TIMEOUT, TOO_LARGE,
            UNSUPPORTED_MEDIA_TYPE, INVALID, BUSY, HEADERS_TOO_LARGE, CLIENT_GONE, SCORING_FAILED,
            UNSUPPORTED_TRANSFER_ENCODING, UNAVAILABLE, OUT_OF_MEMORY, DRAINING, TOO_MANY_CONNECTIONS, NO_REPLICA)
BY_CODE = {error.code: error for error in REGISTRY}


class ProbeAnswer(NamedTuple):
    """GET /health's answer when this replica cannot serve: a probe's 503 whatever the error's own status."""

    status: int
    body_status: str
    error: PublicError


HEALTH_UNAVAILABLE = ProbeAnswer(503, "unavailable", UNAVAILABLE)
HEALTH_DRAINING = ProbeAnswer(503, "draining", DRAINING)
HEALTH_ANSWERS = (HEALTH_UNAVAILABLE, HEALTH_DRAINING)
HTTP_CODES = {error.status: error for error in (NOT_FOUND, METHOD_NOT_ALLOWED)}
