"""The bearer token (401), from the headers alone, so an unauthenticated request never takes a queue slot: every POST
needs it, and so do the paths the app names (the GETs shim/openapi.json secures, and /mcp)."""
from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import cycle
from ..errors.answer import refuse
from ..errors.codes import UNAUTHORIZED
from .posts import is_post
from .tokens import AcceptedTokens, bearer_caller


class BearerAuth:
    def __init__(self, app: ASGIApp, tokens: AcceptedTokens, authenticated_paths: frozenset[str] = frozenset()):
        self.app = app
        self._tokens = tokens
        self._authenticated_paths = authenticated_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guarded = is_post(scope) or (scope["type"] == "http" and scope["path"] in self._authenticated_paths)
        if guarded:
            caller = bearer_caller(Headers(scope=scope), self._tokens)
            if caller is None:
                await refuse(scope, receive, send, UNAUTHORIZED)
                return
            cycle.of_scope(scope).key = caller
        await self.app(scope, receive, send)
