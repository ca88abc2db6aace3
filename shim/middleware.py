"""Pure ASGI middleware: the request id, then auth, admission and the body limit in the contract's order for a POST:

1. auth (401) from the headers alone, so an unauthenticated request never takes a queue slot; exactly one
   Authorization header, scheme `Bearer` in any case (the paths create_app names need it whatever the method, and
   no other GET); the token is API_TOKEN or, during a rotation, API_TOKEN_NEXT (shim/tokens.py);
   then, on a draining shim, 503 draining with Retry-After (shim/drain.py);
2. the Content-Encoding (415 unless identity, gzip or zstd), from the headers alone;
3. admission (429, with Retry-After) before a byte of the body is read: at most MAX_QUEUE POSTs queued or scoring;
4. the body (413), decoded (shim/encoding.py) and counted as it arrives, chunked bodies included; the limit is on
   the bytes sent and, for gzip and zstd, on the decoded bytes too. A declared Content-Length is trusted only when
   it is ASCII digits, and then refuses early, whatever the encoding. Decoding runs in bounded steps with the event
   loop free between them. The whole body must arrive within BODY_TIMEOUT_SECONDS of admission, else 408 and the
   connection is closed: a slow client cannot hold a queue slot; a body that is not a whole stream of its
   encoding (or holds more than MAX_MEMBERS members or frames) is 422;
5. the app (validation and scoring) gets the decoded body replayed.
"""
from __future__ import annotations

import asyncio
import re
import uuid

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import context
from .drain import Drain
from .encoding import IDENTITY, BodyDecoder, BodyTooLarge, UndecodableBody, UnsupportedEncoding, content_encoding
from .errors import (BUSY, DRAINING, INVALID, REQUEST_TIMEOUT, RETRY_AFTER_SECONDS, TOO_LARGE, UNAUTHORIZED,
                     UNSUPPORTED_MEDIA_TYPE, PublicError, envelope)
from .tokens import AcceptedTokens, bearer_matches

_ASCII_DIGITS = re.compile(rb"[0-9]+")
_REQUEST_ID = re.compile(rb"[\x21-\x7e]{1,128}")
REQUEST_ID_HEADER = b"x-request-id"


def declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            return int(value) if _ASCII_DIGITS.fullmatch(value) else None
    return None


async def refuse(scope: Scope, receive: Receive, send: Send, error: PublicError, message: str,
                 headers: dict[str, str] | None = None) -> None:
    await JSONResponse(envelope(error.code, message), status_code=error.status, headers=headers)(scope, receive, send)


class PostGuard:
    def __init__(self, app: ASGIApp, api_token: str, max_queue: int, max_body_bytes: int,
                 body_timeout_seconds: float = 5.0, api_token_next: str | None = None, drain: Drain | None = None,
                 authenticated_paths: frozenset[str] = frozenset()):
        self.app = app
        self._authenticated_paths = authenticated_paths  # need the token whatever the method
        self._tokens = AcceptedTokens(api_token, api_token_next)
        self._drain = drain if drain is not None else Drain(0.0)
        self._max_queue = max_queue
        self._max_body = max_body_bytes
        self._body_timeout = body_timeout_seconds
        self.in_progress = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] != "POST" and scope["path"] not in self._authenticated_paths):
            await self.app(scope, receive, send)
            return
        if not bearer_matches(scope["headers"], self._tokens):
            await refuse(scope, receive, send, UNAUTHORIZED, "missing or wrong bearer token",
                         {"WWW-Authenticate": "Bearer"})
            return
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        if self._drain.refusing:
            await refuse(scope, receive, send, DRAINING, "this replica is shutting down; retry (another replica)",
                         {"Retry-After": str(RETRY_AFTER_SECONDS), "Connection": "close"})
            return
        try:
            encoding = content_encoding(Headers(scope=scope).getlist("content-encoding"))
        except UnsupportedEncoding as exc:
            await refuse(scope, receive, send, UNSUPPORTED_MEDIA_TYPE, str(exc))
            return
        if self.in_progress >= self._max_queue:
            await refuse(scope, receive, send, BUSY,
                         f"{self._max_queue} requests are already queued or scoring; retry later",
                         {"Retry-After": str(RETRY_AFTER_SECONDS)})
            return
        self.in_progress += 1
        self._drain.admitted += 1
        try:
            try:
                async with asyncio.timeout(self._body_timeout):
                    body = await self._read_body(scope, receive, encoding)
            except TimeoutError:
                await refuse(scope, receive, send, REQUEST_TIMEOUT,
                             f"the body did not arrive within {self._body_timeout:g} s (BODY_TIMEOUT_SECONDS)",
                             {"Connection": "close"})
                return
            except BodyTooLarge as exc:
                if encoding == IDENTITY:
                    how = ""
                elif exc.sent:
                    how = f" as sent, before its {encoding} is decoded"
                else:
                    how = f" once its {encoding} is decoded"
                await refuse(scope, receive, send, TOO_LARGE,
                             f"the body is larger than {self._max_body} bytes{how} (MAX_BODY_BYTES)")
                return
            except UndecodableBody as exc:
                await refuse(scope, receive, send, INVALID, str(exc))
                return
            if body is not None:
                await self.app(scope, _replay(body, receive), send)
        finally:
            self.in_progress -= 1
            self._drain.admitted -= 1

    async def _read_body(self, scope: Scope, receive: Receive, encoding: str) -> bytes | None:
        """The whole body decoded, or None when the client went away; BodyTooLarge past MAX_BODY_BYTES, sent or
        decoded."""
        declared = declared_length(scope["headers"])
        if declared is not None and declared > self._max_body:
            raise BodyTooLarge(sent=True)
        decoder = BodyDecoder(encoding, self._max_body)
        sent = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            sent += len(chunk)
            if sent > self._max_body:
                raise BodyTooLarge(sent=True)
            for _ in decoder.steps(chunk):
                await asyncio.sleep(0)  # the event loop runs between the decoder's steps
            if not message.get("more_body", False):
                return decoder.body()


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
