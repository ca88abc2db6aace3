"""The HTTP server python -m shim runs: uvicorn with httptools, one worker, and the connections bounded.

uvicorn bounds the idle time between requests on a kept-alive connection (timeout_keep_alive) but, with httptools,
neither how long a request's line and headers may take to arrive nor how large they may grow, nor how long its body
may trickle in (each byte restarts no deadline of ours but cancels the keep-alive timer), nor how many connections
are open, nor how many requests one connection may queue by pipelining them: a client could hold connections open
forever, or make the server buffer megabytes, before the app ever sees a request. This protocol adds those bounds,
each an overall deadline or count, never one per byte:

* HEADER_TIMEOUT_SECONDS for a request's line and headers, BODY_TIMEOUT_SECONDS (plus a grace) for its body;
* MAX_HEADER_BYTES for one request's line and headers, counted per request (never per read): 431, closed;
* MAX_PIPELINED_REQUESTS waiting behind the request being answered: the next is 400, closed once those are answered;
* MAX_CONNECTIONS open, MAX_CONNECTIONS_PER_PEER from one client address (BALANCER_ADDRESSES exempt): a request
  over either first closes idle connections, oldest idle first (shim/connections.py), and is 503
  too_many_connections, closed, only when the busy ones hold every slot. A GET /health refused so is still
  answered, then closed: a flood of connections must not make the balancer's health checks (and Kubernetes' probes)
  fail and take every replica out at once; /health answers from what the shim already knows, so it costs no Triton
  call.

Once the headers are complete the app's own limits apply (shim/edge/: auth, admission, BODY_TIMEOUT_SECONDS,
MAX_BODY_BYTES), and a response sent before the body was read closes the connection (shim/edge/framing.py).
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import signal
import uuid
import weakref
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from .connections import Roster, address_matcher
from .drain import Drain
from .edge.framing import closing
from .errors import HEADERS_TOO_LARGE, RETRY_AFTER_SECONDS, TOO_MANY_CONNECTIONS, PublicError, envelope
from .health import HEALTH_PATH
from .settings import ShimSettings

if TYPE_CHECKING:
    from .app import Service

KEEP_ALIVE_SECONDS = 5  # idle time allowed between requests on one connection (uvicorn's timeout_keep_alive)
MAX_HEADER_BYTES = 64 * 1024  # one request's line and headers together
MAX_PIPELINED_REQUESTS = 16  # requests one connection may queue behind the one being answered
# A request pipelined beyond MAX_PIPELINED_REQUESTS, answered once those before it are, and the connection closed.
TOO_MANY_PIPELINED = PublicError(400, "too_many_pipelined_requests")
# The server's deadline for a body comes this long after BODY_TIMEOUT_SECONDS, so that an admitted POST's own 408
# (shim/edge/body.py, counted from admission) is answered first; the server's cuts what the app does not read.
BODY_GRACE_SECONDS = 1.0
# After a refusal the server writes (431, the pipeline's 400), how long it still reads and drops what the client sends.
LINGER_SECONDS = 2.0
# What a request line adds to its target, and the headers' end: " HTTP/1.1\r\n" and "\r\n"; a header adds ": " and
# "\r\n" to its name and value.
_REQUEST_LINE_BYTES = 13
_HEADER_SEPARATOR_BYTES = 4


@dataclass(frozen=True)
class ConnectionLimits:
    header_seconds: float = 10.0  # from a connection's opening, or a request's first byte, to the end of its headers
    body_seconds: float = 5.0 + BODY_GRACE_SECONDS  # from the end of a request's headers to the end of its body
    max_connections: int | None = None  # open at once (idle ones give way first); beyond: 503 too_many_connections
    max_per_peer: int | None = None  # open from one client address; beyond: the same
    balancer_addresses: tuple[str, ...] = ()  # addresses or networks exempt from max_per_peer
    max_pipelined: int = MAX_PIPELINED_REQUESTS

    @classmethod
    def of(cls, settings: ShimSettings) -> "ConnectionLimits":
        return cls(header_seconds=settings.header_timeout_seconds,
                   body_seconds=settings.body_timeout_seconds + BODY_GRACE_SECONDS,
                   max_connections=settings.max_connections,
                   max_per_peer=settings.max_connections_per_peer or None,
                   balancer_addresses=settings.balancer_addresses)

    def roster(self) -> Roster:
        return Roster(total=self.max_connections, per_peer=self.max_per_peer,
                      exempt=address_matcher(self.balancer_addresses))


# One roster per server: every connection of a server shares it.
_rosters: "weakref.WeakKeyDictionary[ServerState, Roster]" = weakref.WeakKeyDictionary()


def _roster_of(server_state: ServerState, limits: ConnectionLimits) -> Roster:
    roster = _rosters.get(server_state)
    if roster is None:
        roster = _rosters[server_state] = limits.roster()
    return roster


def _closing_answer(status: PublicError, reason: str, message: str) -> bytes:
    """A whole response in the envelope, with Connection: close, for what the server refuses before the app."""
    body = json.dumps(envelope(status.code, message))
    return (f"HTTP/1.1 {status.status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\nx-request-id: {uuid.uuid4().hex}\r\n\r\n"
            f"{body}").encode("ascii")


def _headers_too_large_response() -> bytes:
    return _closing_answer(HEADERS_TOO_LARGE, "Request Header Fields Too Large",
                           f"the request line and headers are larger than {MAX_HEADER_BYTES} bytes")


def _too_many_pipelined_response(max_pipelined: int) -> bytes:
    return _closing_answer(TOO_MANY_PIPELINED, "Bad Request",
                           f"more than {max_pipelined} requests pipelined on one connection; send them on more "
                           f"connections, or wait for the answers")


def _too_many_connections_message(limits: ConnectionLimits, over: str | None) -> bytes:
    if over == "peer":
        text = (f"this client has {limits.max_per_peer} connections open, all busy (MAX_CONNECTIONS_PER_PEER); "
                f"retry later")
    else:
        text = f"this replica has {limits.max_connections} connections open, all busy (MAX_CONNECTIONS); retry later"
    return json.dumps(envelope(TOO_MANY_CONNECTIONS.code, text)).encode("ascii")


def too_many_connections(limits: ConnectionLimits, over: str | None = None):
    """The ASGI app a request gets on a connection over MAX_CONNECTIONS or its peer's share, when no idle connection
    can give way: 503 in the envelope, then closed."""
    body = _too_many_connections_message(limits, over)

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
    and closed); its body within body_seconds of its headers (else closed); at most max_pipelined requests wait
    behind the one being answered (the next is 400 too_many_pipelined_requests, and closed); a request on a
    connection over max_connections or its peer's max_per_peer closes idle connections to make room, oldest idle
    first, and when there are not enough it is 503 too_many_connections, and closed, unless it is a GET /health,
    which is answered and then closed.

    A refusal is written in its turn: after the answers to the requests before it on the connection; nothing after
    it is parsed."""

    def __init__(self, *args: Any, limits: ConnectionLimits = ConnectionLimits(), **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._limits = limits
        self._roster = _roster_of(self.server_state, limits)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._refused = False  # a refusal is written, or waits for its turn: nothing more is read or parsed
        self._refusal: bytes | None = None  # the refusal waiting for the answers before it
        self._linger: asyncio.TimerHandle | None = None
        self._header_deadline: asyncio.TimerHandle | None = None
        self._body_deadline: asyncio.TimerHandle | None = None
        self._in_head = False  # a request's first byte arrived, its headers are not complete
        self._head_bytes = 0  # its line and headers so far, as the parser hands them over
        self._head_read_bytes = 0  # the reads that held nothing but its headers
        self._began_in_this_read = False
        self._roster.opened(self, self.client[0] if self.client else None)
        self._await_headers()

    # --- deadlines

    def _await_headers(self) -> None:
        self._awaiting_headers = True
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

    # --- refusals, each in its turn

    def _answering(self) -> bool:
        """A request before this point is still being answered (or waits in the pipeline to be)."""
        return self.cycle is not None and not self.cycle.response_complete

    def _refuse(self, answer: bytes) -> None:
        self._refused = True
        self._in_head = False
        self._headers_arrived()
        self._body_arrived()
        if not self.transport.is_closing():
            self.transport.pause_reading()
        if self._answering():
            self._refusal = answer
        else:
            self._write_and_close(answer)

    def _write_and_close(self, answer: bytes) -> None:
        """The answer, then the connection closed: our side at once, theirs after LINGER_SECONDS at most, meanwhile
        reading and dropping what the client still sends (closing with it unread would send a reset, and the
        client's system may drop the answer it has not read yet)."""
        if self.transport.is_closing():
            return
        self.transport.write(answer)
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self.transport.resume_reading()
        self._linger = self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def on_response_complete(self) -> None:
        self._roster.request_answered(self)
        super().on_response_complete()
        if self._refused and self._linger is None and not self.transport.is_closing():
            self.transport.pause_reading()  # uvicorn resumes reading after an answer; nothing more is parsed here
        if self._refusal is not None and not self._answering():
            answer, self._refusal = self._refusal, None
            self._write_and_close(answer)

    def _evict(self) -> None:
        """Closed to make room for a request on another connection (this one is idle: nothing is lost)."""
        if not self.transport.is_closing():
            self.transport.close()

    # --- the parser's callbacks; after a refusal the rest of the read is parsed but nothing is kept

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self._began_in_this_read = False
        super().data_received(data)
        if self._in_head and not self._began_in_this_read and not self._refused:  # the whole read is its headers
            self._head_read_bytes += len(data)
            if self._head_read_bytes > MAX_HEADER_BYTES:
                self._refuse(_headers_too_large_response())

    def on_message_begin(self) -> None:
        if self._refused:
            return
        self._in_head = True
        self._began_in_this_read = True
        self._head_bytes = _REQUEST_LINE_BYTES
        self._head_read_bytes = 0
        self._roster.request_began(self)
        super().on_message_begin()
        self._await_headers()

    def _count_head(self, size: int) -> bool:
        """False once the request's line and headers are over MAX_HEADER_BYTES (refused)."""
        self._head_bytes += size
        if self._head_bytes > MAX_HEADER_BYTES:
            self._refuse(_headers_too_large_response())
            return False
        return True

    def on_url(self, url: bytes) -> None:
        if not self._refused and self._count_head(len(url)):
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._refused and self._count_head(len(name) + len(value) + _HEADER_SEPARATOR_BYTES):
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._in_head = False
        self._headers_arrived()
        if self._answering() and len(self.pipeline) >= self._limits.max_pipelined:
            self._refuse(_too_many_pipelined_response(self._limits.max_pipelined))
            return
        verdict = self._roster.admit(self)
        for connection in verdict.evict:
            connection._evict()
        if not verdict.admitted:  # this connection ends with the answer
            self.app = (closing_after(self.app) if self._is_health_check()
                        else too_many_connections(self._limits, verdict.over))
        self._body_deadline = self.loop.call_later(self._limits.body_seconds, self._too_slow)
        super().on_headers_complete()

    def _is_health_check(self) -> bool:
        return self.parser.get_method() == b"GET" and httptools.parse_url(self.url).path == HEALTH_PATH.encode()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._body_arrived()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._roster.closed(self)
        self._refusal = None
        if self._linger is not None:
            self._linger.cancel()
        self._headers_arrived()
        self._body_arrived()
        super().connection_lost(exc)


def config(app: Any, host: str, port: int, log_config: dict | None = None,
           limits: ConnectionLimits | None = None) -> uvicorn.Config:
    """uvicorn's access log is off: it would record query strings (a token pasted into a URL among them); the shim
    writes its own access line (shim/edge/access.py), with the route and never the query. limits: the connections'
    limits, from the shim's settings (ConnectionLimits.of); the defaults when None."""
    logging = {} if log_config is None else {"log_config": log_config}
    limits = limits if limits is not None else ConnectionLimits()
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


def run(service: Service, host: str, port: int, log_config: dict | None = None) -> None:
    """The service's app under uvicorn, its connections bounded by its settings, its drain begun on SIGTERM."""
    limits = ConnectionLimits.of(service.settings)
    DrainingServer(config(service.app, host, port, log_config, limits), service.drain).run()
