"""What the server answers itself, before or instead of the app, each closing the connection."""
from __future__ import annotations

from ..errors.answer import closing, closing_answer, server_answer
from ..errors.codes import HEADERS_TOO_LARGE, MALFORMED, TOO_LARGE, TOO_MANY_CONNECTIONS, TOO_MANY_PIPELINED
from .limits import MAX_BODY_CHUNKS, MAX_HEADER_BYTES, MAX_HEADERS, ConnectionLimits


def headers_too_large() -> bytes:
    return closing_answer(HEADERS_TOO_LARGE,
                          f"the request line and headers are larger than {MAX_HEADER_BYTES} bytes")


def too_many_headers() -> bytes:
    return closing_answer(HEADERS_TOO_LARGE, f"the request has more than {MAX_HEADERS} headers (MAX_HEADERS)")


def too_many_chunks() -> bytes:
    return closing_answer(TOO_LARGE, f"the body arrives in more than {MAX_BODY_CHUNKS} chunks (MAX_BODY_CHUNKS); "
                                     f"send larger chunks, or a Content-Length")


def malformed() -> bytes:
    return closing_answer(MALFORMED, MALFORMED.words or "")


def too_many_pipelined(max_pipelined: int) -> bytes:
    return closing_answer(TOO_MANY_PIPELINED,
                          f"more than {max_pipelined} requests pipelined on one connection; send them on more "
                          f"connections, or wait for the answers")


def _too_many_connections_text(limits: ConnectionLimits, over: str | None) -> str:
    if over == "peer":
        return (f"this client has {limits.max_per_peer} connections open, all busy (MAX_CONNECTIONS_PER_PEER); "
                f"retry later")
    return f"this replica has {limits.max_connections} connections open, all busy (MAX_CONNECTIONS); retry later"


def over_peer_share(limits: ConnectionLimits) -> bytes:
    """When its client holds more than its share and every one of them is busy."""
    return closing_answer(TOO_MANY_CONNECTIONS, _too_many_connections_text(limits, "peer"))


def too_many_connections(limits: ConnectionLimits, over: str | None = None):
    return server_answer(TOO_MANY_CONNECTIONS, _too_many_connections_text(limits, over))


def closing_after(app):
    """The app, its response carrying Connection: close."""

    async def answer(scope, receive, send) -> None:
        async def send_closing(message) -> None:
            await send(closing(message) if message["type"] == "http.response.start" else message)

        await app(scope, receive, send_closing)

    return answer
