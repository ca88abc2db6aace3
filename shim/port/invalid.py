"""The one type of a request either surface refuses before any model work: 422 invalid_request."""
from __future__ import annotations


class InvalidRequest(ValueError):
    """422 invalid_request; the message names the field. A surface that answers with a structured detail (System
    One's FastAPI-shaped list) overrides `detail`."""

    @property
    def detail(self) -> list[dict] | None:
        return None
