"""The two exceptions the app raises to answer an error."""
from __future__ import annotations

from .codes import PublicError


class ApiError(Exception):
    def __init__(self, error: PublicError, message: str, headers: dict[str, str] | None = None,
                 detail: list[dict] | None = None):
        super().__init__(error.status, error.code, message)
        self.error = error
        self.status = error.status
        self.code = error.code
        self.message = message
        self.headers = headers
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"

    @property
    def public_message(self) -> str:
        """`message` goes to the log."""
        return self.message


class UnprocessableRequest(ValueError):
    """Refused before any model work."""

    @property
    def detail(self) -> list[dict] | None:
        return None
