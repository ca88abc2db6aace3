"""What the server answers itself, before or instead of the app: each in the error envelope, each closing the
connection. The reason phrases are the standard library's (http.HTTPStatus)."""
from __future__ import annotations

import json
import uuid
from http import HTTPStatus

from ..edge.framing import closing
from ..errors import HEADERS_TOO_LARGE, RETRY_AFTER_SECONDS, TOO_MANY_CONNECTIONS, PublicError, envelope
from .limits import MAX_HEADER_BYTES, ConnectionLimits

# A request pipelined beyond MAX_PIPELINED_REQUESTS, answered once those before it are, and the connection closed.
TOO_MANY_PIPELINED = PublicError(400, "too_many_pipelined_requests")


def _closing_answer(error: PublicError, message: str) -> bytes:
    """A whole response written to the transport, for what the server refuses before there is a request."""
    body = json.dumps(envelope(error.code, message))
    return (f"HTTP/1.1 {error.status} {HTTPStatus(error.status).phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\nx-request-id: {uuid.uuid4().hex}\r\n\r\n"
            f"{body}").encode("ascii")


def headers_too_large() -> bytes:
    return _closing_answer(HEADERS_TOO_LARGE,
                           f"the request line and headers are larger than {MAX_HEADER_BYTES} bytes")


def too_many_pipelined(max_pipelined: int) -> bytes:
    return _closing_answer(TOO_MANY_PIPELINED,
                           f"more than {max_pipelined} requests pipelined on one connection; send them on more "
                           f"connections, or wait for the answers")


def _too_many_connections_body(limits: ConnectionLimits, over: str | None) -> bytes:
    if over == "peer":
        text = (f"this client has {limits.max_per_peer} connections open, all busy (MAX_CONNECTIONS_PER_PEER); "
                f"retry later")
    else:
        text = f"this replica has {limits.max_connections} connections open, all busy (MAX_CONNECTIONS); retry later"
    return json.dumps(envelope(TOO_MANY_CONNECTIONS.code, text)).encode("ascii")


def too_many_connections(limits: ConnectionLimits, over: str | None = None):
    """The ASGI app a request gets on a connection over MAX_CONNECTIONS or its peer's share, when no idle connection
    can give way: 503 in the envelope, then closed."""
    body = _too_many_connections_body(limits, over)

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
