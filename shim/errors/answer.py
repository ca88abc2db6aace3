"""The one writer of an error's answer: the envelope in the answering surface's shape, with its policy's headers."""
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
    system_one = is_system_one(path)
    return JSONResponse(envelope(error, message, system_one=system_one, detail=detail),
                        status_code=error.status,
                        headers=policy_headers(error, system_one, own))


async def refuse(scope: Scope, receive: Receive, send: Send, error: PublicError, message: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
    await response(error, message, path=scope.get("path", ""), own=headers)(scope, receive, send)


def closing(start: Message) -> Message:
    """uvicorn closes the connection once a response with Connection: close is sent."""
    start.setdefault("headers", [])  # optional in ASGI
    MutableHeaders(scope=start)["Connection"] = "close"
    return start


def _server_body(error: PublicError, message: str) -> bytes:
    return json.dumps(envelope(error, message)).encode("ascii")


def closing_answer(error: PublicError, message: str) -> bytes:
    body = _server_body(error, message)
    closing = {**error.headers(), "Connection": "close"}
    policy = "".join(f"{name.lower()}: {value}\r\n" for name, value in closing.items())
    return (f"HTTP/1.1 {error.status} {error.phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{policy}x-request-id: {uuid.uuid4().hex}\r\n\r\n").encode("ascii") + body


def server_answer(error: PublicError, message: str):
    body = _server_body(error, message)
    policy = [(name.lower().encode("ascii"), value.encode("ascii")) for name, value in error.headers().items()]

    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": error.status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode("ascii")), *policy,
            (b"x-request-id", uuid.uuid4().hex.encode("ascii"))]})
        await send({"type": "http.response.body", "body": body})

    return answer
