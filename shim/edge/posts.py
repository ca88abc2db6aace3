"""Which requests the edge's guards guard, asked in this one place."""
from __future__ import annotations

from starlette.types import Scope


def is_post(scope: Scope) -> bool:
    return scope["type"] == "http" and scope["method"] == "POST"
