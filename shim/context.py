"""The request being handled, in ContextVars: its id and its usage. The id is never reset: uvicorn's "Exception in
ASGI application" line, written after the app returned, must still carry it."""
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
