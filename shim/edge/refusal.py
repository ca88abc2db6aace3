"""What the edge's middlewares share: which requests they guard, and a refusal (the envelope, its status and headers,
sent before the app is reached)."""
from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from ..error_codes import PublicError
from ..errors import envelope


def is_post(scope: Scope) -> bool:
    """An HTTP POST: what auth, the drain, the encoding, admission, the body reader and the disconnect watch guard;
    the one place the edge asks."""
    return scope["type"] == "http" and scope["method"] == "POST"


async def refuse(scope: Scope, receive: Receive, send: Send, error: PublicError, message: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
    """The refusal in the envelope (its fixed words unless a message is given), with the headers its policy adds
    (Retry-After, Connection: close) and any of the refusal's own."""
    await JSONResponse(envelope(error, message), status_code=error.status,
                       headers={**error.headers(), **(headers or {})})(scope, receive, send)
