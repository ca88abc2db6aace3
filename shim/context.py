"""What the shim knows about the request being handled, in ContextVars: its id (set by the RequestId middleware,
read by the log filter and the service) and its usage (set by the access line, noted by the service).

The request id is never reset: uvicorn runs each request in a task of its own, and its "Exception in ASGI
application" line, written after the app has returned, must still carry the id.
"""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

request_id: ContextVar[str | None] = ContextVar("intern_decision_request_id", default=None)


@dataclass
class Usage:
    calls: int | None = None
    input_tokens: int | None = None


usage: ContextVar[Usage | None] = ContextVar("intern_decision_usage", default=None)


def note_usage(calls: int | None = None, input_tokens: int | None = None) -> None:
    """What the request being handled sends the model; a no-op outside a request."""
    noted = usage.get()
    if noted is None:
        return
    if calls is not None:
        noted.calls = calls
    if input_tokens is not None:
        noted.input_tokens = input_tokens
