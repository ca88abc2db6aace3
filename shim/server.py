"""The HTTP server python -m shim runs: uvicorn with httptools, one worker, and the request headers bounded.

uvicorn bounds the idle time between requests on a kept-alive connection (timeout_keep_alive) but, with httptools,
neither how long a request's line and headers may take to arrive nor how large they may grow: a client could hold
a connection open forever, or make the server buffer megabytes, before the app ever sees a request. This protocol
adds both bounds. Once the headers are complete the app's own limits apply (shim/middleware.py: auth, admission,
BODY_TIMEOUT_SECONDS, MAX_BODY_BYTES).
"""
from __future__ import annotations

import asyncio
import json
import logging
import signal
import uuid
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .drain import Drain
from .errors import HEADERS_TOO_LARGE, envelope

KEEP_ALIVE_SECONDS = 5  # idle time allowed between requests on one connection (uvicorn's timeout_keep_alive)
HEADER_TIMEOUT_SECONDS = 10.0  # from a connection's opening, or a request's first byte, to the end of its headers
MAX_HEADER_BYTES = 64 * 1024  # the request line and headers together


def _headers_too_large_response() -> bytes:
    status, code = HEADERS_TOO_LARGE
    body = json.dumps(envelope(code, f"the request line and headers are larger than {MAX_HEADER_BYTES} bytes"))
    return (f"HTTP/1.1 {status} Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\nx-request-id: {uuid.uuid4().hex}\r\n\r\n"
            f"{body}").encode("ascii")


class BoundedHeadersProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol; a request's line and headers must arrive within HEADER_TIMEOUT_SECONDS (else the
    connection is closed) and within MAX_HEADER_BYTES (else 431 request_header_too_large, and closed)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._refused = False
        self._header_deadline: asyncio.TimerHandle | None = None
        self._await_headers()

    def _await_headers(self) -> None:
        self._awaiting_headers = True
        self._header_bytes = 0
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(HEADER_TIMEOUT_SECONDS, self._headers_too_slow)

    def _headers_arrived(self) -> None:
        self._awaiting_headers = False
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if self._awaiting_headers and not self.transport.is_closing():
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
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
        super().connection_lost(exc)


def config(app: Any, host: str, port: int, log_config: dict | None = None) -> uvicorn.Config:
    """uvicorn's access log is off: it would record query strings (a token pasted into a URL among them); the shim
    writes its own access line (shim/access.py), with the route and never the query."""
    logging = {} if log_config is None else {"log_config": log_config}
    return uvicorn.Config(app, host=host, port=port, workers=1, log_level="info", http=BoundedHeadersProtocol,
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
        if self._drain is not None and self._drain.done and not self.should_exit:
            logging.getLogger("intern_decision.shim.drain").warning("drained: no admitted request left; exiting")
            self.should_exit = True
        return await super().on_tick(counter)


def run(app: Any, host: str, port: int, log_config: dict | None = None) -> None:
    drain = getattr(getattr(app, "state", None), "drain", None)
    DrainingServer(config(app, host, port, log_config), drain).run()
