"""uvicorn's httptools protocol with each connection bounded (docs/operations.md, "Reliability and limits"); on
uvicorn's private internals, held by tests/unit/test_uvicorn_internals.py."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from . import early_answers
from .limits import LINGER_SECONDS, MAX_BODY_CHUNKS, MAX_HEADER_BYTES, MAX_HEADERS, ConnectionLimits
from .roster import Roster

_REQUEST_LINE_BYTES = 13  # " HTTP/1.1\r\n" and the final "\r\n"
_HEADER_SEPARATOR_BYTES = 4  # ": " and "\r\n"


class _Stop(Exception):
    """Stops the parser once the connection is refused."""


class _QuietOnceRefused(logging.LoggerAdapter):
    """Without uvicorn's warning for a parser stopped by _Stop: the refusal is ours, not bad HTTP."""

    def __init__(self, logger: logging.Logger, connection: "BoundedConnectionProtocol"):
        super().__init__(logger, {})
        self._connection = connection

    @property
    def level(self) -> int:  # uvicorn reads it before its trace lines
        return self.logger.level

    def warning(self, msg: object, *args: Any, **kwargs: Any) -> None:
        if not self._connection._refused:
            self.logger.warning(msg, *args, **kwargs)


class BoundedConnectionProtocol(HttpToolsProtocol):
    """A refusal is written in its turn, after the answers before it; nothing after it is parsed."""

    def __init__(self, *args: Any, limits: ConnectionLimits, roster: Roster, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.logger = _QuietOnceRefused(self.logger, self)
        self._refused = False
        self._limits = limits
        self._roster = roster

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._refused = False
        self._refusal: bytes | None = None  # waits for the answers before it
        self._linger: asyncio.TimerHandle | None = None
        self._header_deadline: asyncio.TimerHandle | None = None
        self._silent_deadline: asyncio.TimerHandle | None = None
        if self._limits.silent_seconds < self._limits.header_seconds:
            self._silent_deadline = self.loop.call_later(self._limits.silent_seconds, self._too_slow)
        self._body_deadline: asyncio.TimerHandle | None = None
        self._in_head = False
        self._head_bytes = 0
        self._head_read_bytes = 0  # reads that held nothing but headers
        self._header_count = 0
        self._chunks = 0
        self._began_in_this_read = False
        self._roster.opened(self, self.client[0] if self.client else None)
        self._await_headers()

    def _await_headers(self) -> None:
        self._awaiting_headers = True
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(self._limits.header_seconds, self._too_slow)

    def _spoke(self) -> None:
        if self._silent_deadline is not None:
            self._silent_deadline.cancel()
            self._silent_deadline = None

    def _headers_arrived(self) -> None:
        self._spoke()
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

    def _answering(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _refuse(self, answer: bytes) -> None:
        self._refused = True
        self._roster.closed(self)  # its slot is free now, not once the lingering close ends
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
        """Closing with unread data would send a reset, which may drop the answer: what the client still sends is
        read and dropped for LINGER_SECONDS at most."""
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
            self.transport.pause_reading()  # uvicorn resumes reading after an answer
        if self._refusal is not None and not self._answering():
            answer, self._refusal = self._refusal, None
            self._write_and_close(answer)

    def _evict(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self._began_in_this_read = False
        super().data_received(data)
        if self._in_head and not self._began_in_this_read and not self._refused:
            self._head_read_bytes += len(data)
            if self._head_read_bytes > MAX_HEADER_BYTES:
                self._refuse(early_answers.headers_too_large())

    def on_message_begin(self) -> None:
        self._spoke()
        if self._refused:
            return
        self._in_head = True
        self._began_in_this_read = True
        self._head_bytes = _REQUEST_LINE_BYTES
        self._head_read_bytes = 0
        self._header_count = 0
        self._chunks = 0
        self._roster.request_began(self)
        peer = self._roster.admit_peer(self)
        for connection in peer.evict:
            connection._evict()
        if not peer.admitted:
            self._refuse(early_answers.over_peer_share(self._limits))
            return
        super().on_message_begin()
        self._await_headers()

    def _count_head(self, size: int) -> bool:
        self._head_bytes += size
        if self._head_bytes > MAX_HEADER_BYTES:
            self._refuse(early_answers.headers_too_large())
            return False
        return True

    def on_url(self, url: bytes) -> None:
        if not self._refused and self._count_head(len(url)):
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            raise _Stop  # thousands of headers in one read cost nothing more once refused
        self._header_count += 1
        if self._header_count > MAX_HEADERS:
            self._refuse(early_answers.too_many_headers())
            raise _Stop
        if self._count_head(len(name) + len(value) + _HEADER_SEPARATOR_BYTES):
            super().on_header(name, value)

    def on_chunk_header(self) -> None:
        """Called by httptools only when the protocol has it."""
        if self._refused:
            raise _Stop
        self._chunks += 1
        if self._chunks > MAX_BODY_CHUNKS + 1:  # the last chunk, empty, is free
            self._refuse_body(early_answers.too_many_chunks())
            raise _Stop

    def _refuse_body(self, answer: bytes) -> None:
        """The app is told the client left and the refusal takes its answer's place; once the app has begun
        answering, or while the request waits in the pipeline, the connection is only closed."""
        cycle = self.cycle
        waiting = any(queued is cycle for queued, _ in self.pipeline)
        if cycle is None or cycle.response_started or waiting:
            self._refused = True
            self._roster.closed(self)
            self._headers_arrived()
            self._body_arrived()
            if not self.transport.is_closing():
                self.transport.close()
            return
        cycle.disconnected = True
        cycle.message_event.set()
        self._refused = True
        self._roster.closed(self)
        self._body_arrived()
        self.transport.pause_reading()
        self._write_and_close(answer)

    def send_400_response(self, msg: str) -> None:
        if not self._refused:
            self._refuse(early_answers.malformed())

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._in_head = False
        self._headers_arrived()
        if self._answering() and len(self.pipeline) >= self._limits.max_pipelined:
            self._refuse(early_answers.too_many_pipelined(self._limits.max_pipelined))
            return
        verdict = self._roster.admit(self)
        for connection in verdict.evict:
            connection._evict()
        if not verdict.admitted:
            self.app = (early_answers.closing_after(self.app) if self._is_health_check()
                        else early_answers.too_many_connections(self._limits, verdict.over))
        self._body_deadline = self.loop.call_later(self._limits.body_seconds, self._too_slow)
        super().on_headers_complete()

    def _is_health_check(self) -> bool:
        path = self._limits.health_path
        return path is not None and self.parser.get_method() == b"GET" \
            and httptools.parse_url(self.url).path == path.encode()

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
