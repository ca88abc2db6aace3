"""The bearer tokens a shim accepts (docs/operations.md, "Rotating the API token"): all compared in constant time,
and all always, so the time a refusal takes does not say which token came close."""
from __future__ import annotations

import hmac

from starlette.datastructures import Headers

from ..callers import DEFAULT_CALLER, ApiKey, token_digest

_WHITESPACE = " \t\n\r\x0b\x0c"  # bytes.strip()'s: str.strip() strips more (\x85, \xa0)


class AcceptedTokens:
    def __init__(self, current: str, upcoming: str | None = None, keys: tuple[ApiKey, ...] = ()):
        self._tokens = tuple(token.encode("ascii") for token in (current, upcoming) if token)
        self._keys = keys

    def caller(self, credentials: bytes) -> str | None:
        matches = [hmac.compare_digest(credentials, token) for token in self._tokens]
        digest = token_digest(credentials) if self._keys else b""
        named = [key.name for key in self._keys if hmac.compare_digest(digest, key.sha256)]
        return DEFAULT_CALLER if any(matches) else next(iter(named), None)

    def match(self, credentials: bytes) -> bool:
        return self.caller(credentials) is not None


def bearer_credentials(headers: Headers) -> bytes | None:
    """Exactly one Authorization header: two are never guessed between."""
    values = headers.getlist("authorization")
    if len(values) != 1:
        return None
    scheme, _, credentials = values[0].strip(_WHITESPACE).partition(" ")
    # Headers decode as latin-1: encoding back gives the bytes sent.
    return credentials.strip(_WHITESPACE).encode("latin-1") if scheme.lower() == "bearer" else None


def bearer_caller(headers: Headers, tokens: AcceptedTokens) -> str | None:
    credentials = bearer_credentials(headers)
    return None if credentials is None else tokens.caller(credentials)


def bearer_matches(headers: Headers, tokens: AcceptedTokens) -> bool:
    return bearer_caller(headers, tokens) is not None
