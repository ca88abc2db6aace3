"""A POST's body, read at the edge so the app gets it whole, decoded and within the limits; two middlewares, since
admission stands between the encoding's check and the reading."""
from __future__ import annotations

import asyncio
import re

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors.answer import refuse
from ..errors.codes import INVALID, REQUEST_TIMEOUT, TOO_LARGE, UNSUPPORTED_MEDIA_TYPE
from ..tracing import span
from .encoding import IDENTITY, BodyDecoder, BodyTooLarge, UndecodableBody, UnsupportedEncoding, content_encoding
from .posts import is_post

_ASCII_DIGITS = re.compile(r"[0-9]+")


def declared_length(headers: Headers) -> int | None:
    value = headers.get("content-length")
    return int(value) if value is not None and _ASCII_DIGITS.fullmatch(value) else None


class KnownEncoding:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if is_post(scope):
            try:
                content_encoding(Headers(scope=scope).getlist("content-encoding"))
            except UnsupportedEncoding as exc:
                await refuse(scope, receive, send, UNSUPPORTED_MEDIA_TYPE, str(exc))
                return
        await self.app(scope, receive, send)


class BodyReader:
    def __init__(self, app: ASGIApp, max_body_bytes: int, body_timeout_seconds: float, max_decode_ratio: int):
        self.app = app
        self._max_body = max_body_bytes
        self._body_timeout = body_timeout_seconds
        self._max_ratio = max_decode_ratio

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_post(scope):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        encoding = content_encoding(headers.getlist("content-encoding"))  # KnownEncoding refused the others
        try:
            with span("read body"):
                async with asyncio.timeout(self._body_timeout):
                    body = await self._read(receive, encoding, declared_length(headers))
        except TimeoutError:
            await refuse(scope, receive, send, REQUEST_TIMEOUT,
                         f"the body did not arrive within {self._body_timeout:g} s (BODY_TIMEOUT_SECONDS)",
                         {"Connection": "close"})
            return
        except BodyTooLarge as exc:
            await refuse(scope, receive, send, TOO_LARGE, self._too_large(encoding, exc))
            return
        except UndecodableBody as exc:
            await refuse(scope, receive, send, INVALID, str(exc))
            return
        if body is not None:
            await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive, encoding: str, declared: int | None) -> bytes | None:
        """None when the client went away."""
        if declared is not None and declared > self._max_body:
            raise BodyTooLarge(sent=True)
        decoder = BodyDecoder(encoding, self._max_body, max_ratio=self._max_ratio)
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
                await asyncio.sleep(0)
            if not message.get("more_body", False):
                return decoder.body()


    def _too_large(self, encoding: str, exc: BodyTooLarge) -> str:
        if exc.ratio:
            return (f"the body's {encoding} decodes to more than {self._max_ratio} times the bytes sent "
                    f"(MAX_DECODE_RATIO)")
        return f"the body is larger than {self._max_body} bytes{_how(encoding, exc)} (MAX_BODY_BYTES)"


def _how(encoding: str, exc: BodyTooLarge) -> str:
    if encoding == IDENTITY:
        return ""
    return f" as sent, before its {encoding} is decoded" if exc.sent else f" once its {encoding} is decoded"


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
