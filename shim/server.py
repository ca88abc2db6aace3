"""The HTTP server python -m shim runs: uvicorn with httptools, one worker, and the connections bounded.

uvicorn bounds the idle time between requests on a kept-alive connection (timeout_keep_alive) but, with httptools,
neither how long a request's line and headers may take to arrive nor how large they may grow, nor how long its body
may trickle in (each byte restarts no deadline of ours but cancels the keep-alive timer), nor how many connections
are open: a client could hold connections open forever, or make the server buffer megabytes, before the app ever
sees a request. This protocol adds those bounds (settings: HEADER_TIMEOUT_SECONDS, BODY_TIMEOUT_SECONDS,
MAX_CONNECTIONS), each an overall deadline or count, never one per byte. A GET /health on a connection beyond
MAX_CONNECTIONS is still answered, then the connection is closed: a flood of connections must not make the balancer's
health checks (and Kubernetes' probes) fail and take every replica out at once; /health answers from what the shim
already knows, so it costs no Triton call. Once the headers are complete the app's
own limits apply (shim/edge/: auth, admission, BODY_TIMEOUT_SECONDS, MAX_BODY_BYTES), and a response sent
before the body was read closes the connection (shim/edge/framing.py).
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import signal
import uuid
from dataclasses import dataclass
from types import FrameType
from typing import Any

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .drain import Drain
from .edge.framing import closing
from .errors import HEADERS_TOO_LARGE, RETRY_AFTER_SECONDS, TOO_MANY_CONNECTIONS, envelope
from .health import HEALTH_PATH
from .settings import ShimSettings

KEEP_ALIVE_SECONDS = 5  # idle time allowed between requests on one connection (uvicorn's timeout_keep_alive)
MAX_HEADER_BYTES = 64 * 1024  # the request line and headers together
# The server's deadline for a body comes this long after BODY_TIMEOUT_SECONDS, so that an admitted POST's own 408
# (shim/edge/body.py, counted from admission) is answered first; the server's cuts what the app does not read.
BODY_GRACE_SECONDS = 1.0


@dataclass(frozen=True)
class ConnectionLimits:
    header_seconds: float = 10.0  # from a connection's opening, or a request's first byte, to the end of its headers
    body_seconds: float = 5.0 + BODY_GRACE_SECONDS  # from the end of a request's headers to the end of its body
    max_connections: int | None = None  # open at once; a request on one more is 503 too_many_connections, closed

    @classmethod
    def of(cls, settings: ShimSettings) -> "ConnectionLimits":
        return cls(header_seconds=settings.header_timeout_seconds,
                   body_seconds=settings.body_timeout_seconds + BODY_GRACE_SECONDS,
                   max_connections=settings.max_connections)


def _headers_too_large_response() -> bytes:
    status, code = HEADERS_TOO_LARGE
    body = json.dumps(envelope(code, f"the request line and headers are larger than {MAX_HEADER_BYTES} bytes"))
    return (f"HTTP/1.1 {status} Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\nx-request-id: {uuid.uuid4().hex}\r\n\r\n"
            f"{body}").encode("ascii")


def _too_many_connections_message(max_connections: int) -> bytes:
    return json.dumps(envelope(TOO_MANY_CONNECTIONS.code, f"this replica has {max_connections} connections open "
                               f"(MAX_CONNECTIONS); retry later")).encode("ascii")


def too_many_connections(max_connections: int):
    """The ASGI app a request gets on a connection beyond MAX_CONNECTIONS: 503 in the envelope, then closed."""
    body = _too_many_connections_message(max_connections)

    async def answer(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": TOO_MANY_CONNECTIONS.status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode("ascii")),
            (b"retry-after", str(RETRY_AFTER_SECONDS).encode("ascii")), (b"connection", b"close"),
            (b"x-request-id", uuid.uuid4().hex.encode("ascii"))]})
        await send({"type": "http.response.body", "body": body})

    return answer


def closing_after(app):
    """The app, its response carrying Connection: close (uvicorn then closes the connection once it is sent)."""

    async def answer(scope, receive, send) -> None:
        async def send_closing(message) -> None:
            await send(closing(message) if message["type"] == "http.response.start" else message)

        await app(scope, receive, send_closing)

    return answer


class BoundedHeadersProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with ConnectionLimits: a request's line and headers must arrive within
    header_seconds (else the connection is closed) and within MAX_HEADER_BYTES (else 431 request_header_too_large,
    and closed); its body within body_seconds of its headers (else closed); a request on a connection beyond
    max_connections is 503 too_many_connections, and closed, unless it is a GET /health, which is answered and then
    closed."""

    def __init__(self, *args: Any, limits: ConnectionLimits = ConnectionLimits(), **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._limits = limits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._refused = False
        self._header_deadline: asyncio.TimerHandle | None = None
        self._body_deadline: asyncio.TimerHandle | None = None
        self._await_headers()

    def _await_headers(self) -> None:
        self._awaiting_headers = True
        self._header_bytes = 0
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(self._limits.header_seconds, self._too_slow)

    def _headers_arrived(self) -> None:
        self._awaiting_headers = False
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _body_arrived(self) -> None:
        if self._body_deadline is not None:
            self._body_deadline.cancel()
            self._body_deadline = None

    def _too_slow(self) -> None:
        self._header_deadline = None
        self._body_deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        if self._awaiting_headers and not self.transport.is_closing():
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES:
                self._refused = True
                self._headers_arrived()
                self.transport.write(_headers_too_large_response())
                self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._await_headers()

    def on_headers_complete(self) -> None:
        self._headers_arrived()
        limit = self._limits.max_connections
        if limit is not None and len(self.connections) > limit:  # this connection ends with the answer
            self.app = closing_after(self.app) if self._is_health_check() else too_many_connections(limit)
        self._body_deadline = self.loop.call_later(self._limits.body_seconds, self._too_slow)
        super().on_headers_complete()

    def _is_health_check(self) -> bool:
        return self.parser.get_method() == b"GET" and httptools.parse_url(self.url).path == HEALTH_PATH.encode()

    def on_message_complete(self) -> None:
        self._body_arrived()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
        self._body_arrived()
        super().connection_lost(exc)


def config(app: Any, host: str, port: int, log_config: dict | None = None) -> uvicorn.Config:
    """uvicorn's access log is off: it would record query strings (a token pasted into a URL among them); the shim
    writes its own access line (shim/edge/access.py), with the route and never the query. The connections' limits are
    the app's settings' (ConnectionLimits.of)."""
    logging = {} if log_config is None else {"log_config": log_config}
    settings = getattr(getattr(app, "state", None), "settings", None)
    limits = ConnectionLimits.of(settings) if isinstance(settings, ShimSettings) else ConnectionLimits()
    return uvicorn.Config(app, host=host, port=port, workers=1, log_level="info",
                          http=functools.partial(BoundedHeadersProtocol, limits=limits),  # type: ignore[arg-type]
                          timeout_keep_alive=KEEP_ALIVE_SECONDS, access_log=False, **logging)


class DrainingServer(uvicorn.Server):
    """uvicorn's server; the first SIGTERM drains the app (shim/drain.py) before uvicorn's own graceful shutdown
    starts, and the process then exits 0. A second SIGTERM, or SIGINT, is uvicorn's own."""

    def __init__(self, config: uvicorn.Config, drain: Drain | None):
        super().__init__(config)
        self._drain = drain

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and self._drain is not None and not self._drain.draining and not self.should_exit:
            self._drain.begin()
            logging.getLogger("intern_decision.shim.drain").warning(
                "SIGTERM: draining (health 503 now; admitting no more after the announcement)")
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self._drain is not None:
            self._drain.tick()  # the requests still waiting for the lock are answered 503 once it refuses
        if self._drain is not None and self._drain.done and not self.should_exit:
            logging.getLogger("intern_decision.shim.drain").warning("drained: no admitted request left; exiting")
            self.should_exit = True
        return await super().on_tick(counter)


def run(app: Any, host: str, port: int, log_config: dict | None = None) -> None:
    drain = getattr(getattr(app, "state", None), "drain", None)
    DrainingServer(config(app, host, port, log_config), drain).run()
