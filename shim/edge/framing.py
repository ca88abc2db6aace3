"""Transfer-Encoding other than chunked is 501; an answer sent before the body's end closes the connection."""
from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors.answer import closing, refuse
from ..errors.codes import UNSUPPORTED_TRANSFER_ENCODING

CHUNKED = "chunked"
_WHITESPACE = " \t\n\r\x0b\x0c"  # bytes.strip()'s: str.strip() would strip more (\x85, \xa0)


def transfer_codings(headers: Headers) -> list[str]:
    return [token.strip(_WHITESPACE).lower() for value in headers.getlist("transfer-encoding")
            for token in value.split(",") if token.strip(_WHITESPACE)]


def has_body(headers: Headers) -> bool:
    return "transfer-encoding" in headers or any(value.strip(_WHITESPACE) not in ("0", "")
                                                 for value in headers.getlist("content-length"))


class TransferEncodingGuard:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            codings = transfer_codings(Headers(scope=scope))
            if codings and codings != [CHUNKED]:
                await refuse(scope, receive, send, UNSUPPORTED_TRANSFER_ENCODING,
                             f"Transfer-Encoding {', '.join(codings)} is not supported; send chunked alone (a "
                             f"compressed body: Content-Encoding gzip or zstd)")
                return
        await self.app(scope, receive, send)


class CloseUnread:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not has_body(Headers(scope=scope)):
            await self.app(scope, receive, send)
            return
        read_whole = False

        async def receive_noting_the_end() -> Message:
            nonlocal read_whole
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                read_whole = True
            return message

        async def send_closing_unless_read(message: Message) -> None:
            if message["type"] == "http.response.start" and not read_whole:
                message = closing(message)
            await send(message)

        await self.app(scope, receive_noting_the_end, send_closing_unless_read)
