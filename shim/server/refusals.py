"""What the server answers itself, before or instead of the app: each in the error envelope, each closing the
connection, each as shim/error_codes.py defines it (its status and reason phrase, its Retry-After)."""
from __future__ import annotations

import json
import uuid

from ..edge.framing import closing
from ..error_codes import (HEADERS_TOO_LARGE, MALFORMED, TOO_LARGE, TOO_MANY_CONNECTIONS, TOO_MANY_PIPELINED,
                           PublicError)
from ..errors import envelope
from .limits import MAX_BODY_CHUNKS, MAX_HEADER_BYTES, MAX_HEADERS, ConnectionLimits


def _closing_answer(error: PublicError, message: str) -> bytes:
    """A whole response written to the transport, for what the server refuses before there is a request."""
    body = json.dumps(envelope(error, message))
    headers = {**error.headers(), "Connection": "close"}  # whatever the code's policy elsewhere: this one closes
    policy = "".join(f"{name.lower()}: {value}\r\n" for name, value in headers.items())
    return (f"HTTP/1.1 {error.status} {error.phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{policy}x-request-id: {uuid.uuid4().hex}\r\n\r\n"
            f"{body}").encode("ascii")


def headers_too_large() -> bytes:
    return _closing_answer(HEADERS_TOO_LARGE,
                           f"the request line and headers are larger than {MAX_HEADER_BYTES} bytes")


def too_many_headers() -> bytes:
    return _closing_answer(HEADERS_TOO_LARGE, f"the request has more than {MAX_HEADERS} headers (MAX_HEADERS)")


def too_many_chunks() -> bytes:
    return _closing_answer(TOO_LARGE, f"the body arrives in more than {MAX_BODY_CHUNKS} chunks (MAX_BODY_CHUNKS); "
                                      f"send larger chunks, or a Content-Length")


def malformed() -> bytes:
    """uvicorn's own 400 for a request its parser cannot read, in the envelope."""
    return _closing_answer(MALFORMED, MALFORMED.words or "")


def too_many_pipelined(max_pipelined: int) -> bytes:
    return _closing_answer(TOO_MANY_PIPELINED,
                           f"more than {max_pipelined} requests pipelined on one connection; send them on more "
                           f"connections, or wait for the answers")


def _too_many_connections_text(limits: ConnectionLimits, over: str | None) -> str:
    if over == "peer":
        return (f"this client has {limits.max_per_peer} connections open, all busy (MAX_CONNECTIONS_PER_PEER); "
                f"retry later")
    return f"this replica has {limits.max_connections} connections open, all busy (MAX_CONNECTIONS); retry later"


def _too_many_connections_body(limits: ConnectionLimits, over: str | None) -> bytes:
    return json.dumps(envelope(TOO_MANY_CONNECTIONS, _too_many_connections_text(limits, over))).encode("ascii")


def over_peer_share(limits: ConnectionLimits) -> bytes:
    """What a request gets at its first byte when its client already holds more than its share and every one of its
    connections is busy (a head still arriving counts as busy): refused before its head is read."""
    return _closing_answer(TOO_MANY_CONNECTIONS, _too_many_connections_text(limits, "peer"))


def too_many_connections(limits: ConnectionLimits, over: str | None = None):
    """The ASGI app a request gets on a connection over MAX_CONNECTIONS or its peer's share, when no idle connection
    can give way: 503 in the envelope, then closed."""
    body = _too_many_connections_body(limits, over)
    policy = [(name.lower().encode("ascii"), value.encode("ascii"))
              for name, value in TOO_MANY_CONNECTIONS.headers().items()]

    async def answer(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": TOO_MANY_CONNECTIONS.status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode("ascii")), *policy,
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
