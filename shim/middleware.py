"""Pure ASGI middleware: the request id, then auth, admission and the body limit in the contract's order for a POST:

1. auth (401) from the headers alone, so an unauthenticated request never takes a queue slot; exactly one
   Authorization header, scheme `Bearer` in any case;
2. admission (429, with Retry-After) before a byte of the body is read: at most MAX_QUEUE POSTs queued or scoring;
3. the body (413), counted as it arrives, chunked bodies included; a declared Content-Length is trusted only
   when it is ASCII digits, and then refuses early. The whole body must arrive within BODY_TIMEOUT_SECONDS of
   admission, else 408 and the connection is closed: a slow client cannot hold a queue slot;
4. the app (validation and scoring) gets the counted body replayed.
"""
from __future__ import annotations

import asyncio
import hmac
import re
import uuid

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import context
from .errors import BUSY, REQUEST_TIMEOUT, RETRY_AFTER_SECONDS, TOO_LARGE, UNAUTHORIZED, envelope

_ASCII_DIGITS = re.compile(rb"[0-9]+")
_REQUEST_ID = re.compile(rb"[\x21-\x7e]{1,128}")
REQUEST_ID_HEADER = b"x-request-id"


def bearer_matches(headers: list[tuple[bytes, bytes]], token: bytes) -> bool:
    """One Authorization header, `Bearer <token>` (scheme in any case); two of them are never guessed between."""
    values = [value for name, value in headers if name == b"authorization"]
    if len(values) != 1:
        return False
    scheme, _, credentials = values[0].strip().partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(), token)


def declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            return int(value) if _ASCII_DIGITS.fullmatch(value) else None
    return None


async def refuse(scope: Scope, receive: Receive, send: Send, error: tuple[int, str], message: str,
                 headers: dict[str, str] | None = None) -> None:
    status, code = error
    await JSONResponse(envelope(code, message), status_code=status, headers=headers)(scope, receive, send)


class _TooLarge(Exception):
    """The body is over MAX_BODY_BYTES, declared or counted."""


class PostGuard:
    def __init__(self, app: ASGIApp, api_token: str, max_queue: int, max_body_bytes: int,
                 body_timeout_seconds: float = 5.0):
        self.app = app
        self._token = api_token.encode("ascii")
        self._max_queue = max_queue
        self._max_body = max_body_bytes
        self._body_timeout = body_timeout_seconds
        self.in_progress = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        if not bearer_matches(scope["headers"], self._token):
            await refuse(scope, receive, send, UNAUTHORIZED, "missing or wrong bearer token",
                         {"WWW-Authenticate": "Bearer"})
            return
        if self.in_progress >= self._max_queue:
            await refuse(scope, receive, send, BUSY,
                         f"{self._max_queue} requests are already queued or scoring; retry later",
                         {"Retry-After": str(RETRY_AFTER_SECONDS)})
            return
        self.in_progress += 1
        try:
            try:
                async with asyncio.timeout(self._body_timeout):
                    body = await self._read_body(scope, receive)
            except TimeoutError:
                await refuse(scope, receive, send, REQUEST_TIMEOUT,
                             f"the body did not arrive within {self._body_timeout:g} s (BODY_TIMEOUT_SECONDS)",
                             {"Connection": "close"})
                return
            except _TooLarge:
                await refuse(scope, receive, send, TOO_LARGE,
                             f"the body is larger than {self._max_body} bytes (MAX_BODY_BYTES)")
                return
            if body is not None:
                await self.app(scope, _replay(body, receive), send)
        finally:
            self.in_progress -= 1

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, or None when the client went away; _TooLarge past MAX_BODY_BYTES."""
        declared = declared_length(scope["headers"])
        if declared is not None and declared > self._max_body:
            raise _TooLarge
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max_body:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class RequestId:
    """Every response carries X-Request-Id: the caller's (visible ASCII, up to 128 characters) or a new one.

    The id is put in scope["state"] (request.state.request_id) so the Triton calls can carry it, and in the
    request's ContextVar (shim/context.py) so every log line written while the request is handled carries it.
    """

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((value for name, value in scope["headers"] if name == REQUEST_ID_HEADER), b"")
        request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex.encode()
        scope.setdefault("state", {})["request_id"] = request_id.decode("ascii")
        context.request_id.set(scope["state"]["request_id"])

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (REQUEST_ID_HEADER, request_id)]}
            await send(message)

        await self.app(scope, receive, send_with_id)
