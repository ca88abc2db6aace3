"""Which requests the edge's guards guard: an HTTP POST, asked in this one place."""
from __future__ import annotations

from starlette.types import Scope


def is_post(scope: Scope) -> bool:
    """An HTTP POST: what auth, the drain, the encoding, admission, the body reader and the disconnect watch guard."""
    return scope["type"] == "http" and scope["method"] == "POST"
