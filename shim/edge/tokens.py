"""The bearer tokens a shim accepts: API_TOKEN and, during a rotation, API_TOKEN_NEXT (docs/operations.md,
"Rotating the API token"). Both are compared in constant time, and both always, so the time a refusal takes does
not say which token came close."""
from __future__ import annotations

import hmac

from starlette.datastructures import Headers

_WHITESPACE = " \t\n\r\x0b\x0c"  # what bytes.strip() strips: str.strip() would strip more (\x85, \xa0)


class AcceptedTokens:
    def __init__(self, current: str, upcoming: str | None = None):
        self._tokens = tuple(token.encode("ascii") for token in (current, upcoming) if token)

    def match(self, credentials: bytes) -> bool:
        matches = [hmac.compare_digest(credentials, token) for token in self._tokens]
        return any(matches)


def bearer_credentials(headers: Headers) -> bytes | None:
    """Exactly one Authorization header of scheme Bearer (in any case): two are never guessed between."""
    values = headers.getlist("authorization")
    if len(values) != 1:
        return None
    scheme, _, credentials = values[0].strip(_WHITESPACE).partition(" ")
    # Headers decode as latin-1: encoding back gives the bytes sent, which compare_digest takes whatever they are.
    return credentials.strip(_WHITESPACE).encode("latin-1") if scheme.lower() == "bearer" else None


def bearer_matches(headers: Headers, tokens: AcceptedTokens) -> bool:
    credentials = bearer_credentials(headers)
    return credentials is not None and tokens.match(credentials)
