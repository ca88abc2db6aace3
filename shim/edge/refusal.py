"""What the edge's middlewares share: which requests they guard, and a refusal (the envelope, its status and headers,
sent before the app is reached)."""
from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from ..errors import PublicError, envelope


def is_post(scope: Scope) -> bool:
    """An HTTP POST: what auth, the drain, the encoding, admission, the body reader and the disconnect watch guard;
    the one place the edge asks."""
    return scope["type"] == "http" and scope["method"] == "POST"


async def refuse(scope: Scope, receive: Receive, send: Send, error: PublicError, message: str,
                 headers: dict[str, str] | None = None) -> None:
    await JSONResponse(envelope(error.code, message), status_code=error.status, headers=headers)(scope, receive, send)
