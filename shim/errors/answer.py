"""The one writer of an error's answer, for the edge, the app's handlers, MCP and the server: the envelope in the
answering surface's shape, with the headers of its policy."""
from __future__ import annotations

import json
import uuid

from starlette.datastructures import MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from .codes import PublicError
from .envelope import envelope, is_system_one, policy_headers


def response(error: PublicError, message: str | None = None, *, path: str = "", own: dict[str, str] | None = None,
             detail: list[dict] | None = None) -> JSONResponse:
    """The envelope and its policy's headers in the shape of the surface `path` is on, then the answer's own."""
    system_one = is_system_one(path)
    return JSONResponse(envelope(error, message, system_one=system_one, detail=detail),
                        status_code=error.status,
                        headers=policy_headers(error, system_one, own))


async def refuse(scope: Scope, receive: Receive, send: Send, error: PublicError, message: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
    """A refusal sent before the app is reached (the edge's, MCP's)."""
    await response(error, message, path=scope.get("path", ""), own=headers)(scope, receive, send)


def closing(start: Message) -> Message:
    """A response's start, with Connection: close: uvicorn closes the connection once that response is sent."""
    start.setdefault("headers", [])  # optional in ASGI
    MutableHeaders(scope=start)["Connection"] = "close"
    return start


def _server_body(error: PublicError, message: str) -> bytes:
    """The envelope as the server writes it, before there is a request to route (on every path alike)."""
    return json.dumps(envelope(error, message)).encode("ascii")


def closing_answer(error: PublicError, message: str) -> bytes:
    """Closes the connection whatever the code's policy elsewhere."""
    body = _server_body(error, message)
    closing = {**error.headers(), "Connection": "close"}
    policy = "".join(f"{name.lower()}: {value}\r\n" for name, value in closing.items())
    return (f"HTTP/1.1 {error.status} {error.phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{policy}x-request-id: {uuid.uuid4().hex}\r\n\r\n").encode("ascii") + body


def server_answer(error: PublicError, message: str):
    """The ASGI app the server hands a request it refuses once its head is read."""
    body = _server_body(error, message)
    policy = [(name.lower().encode("ascii"), value.encode("ascii")) for name, value in error.headers().items()]

    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": error.status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode("ascii")), *policy,
            (b"x-request-id", uuid.uuid4().hex.encode("ascii"))]})
        await send({"type": "http.response.body", "body": body})

    return answer
