"""The bearer tokens a shim accepts: API_TOKEN and, during a rotation, API_TOKEN_NEXT (docs/operations.md,
"Rotating the API token"). Both are compared in constant time, and both always, so the time a refusal takes does
not say which token came close."""
from __future__ import annotations

import hmac


class AcceptedTokens:
    def __init__(self, current: str, upcoming: str | None = None):
        self._tokens = tuple(token.encode("ascii") for token in (current, upcoming) if token)

    def __len__(self) -> int:
        return len(self._tokens)

    def match(self, credentials: bytes) -> bool:
        matches = [hmac.compare_digest(credentials, token) for token in self._tokens]
        return any(matches)


def bearer_credentials(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The credentials of exactly one Authorization header of scheme Bearer (in any case); two headers are never
    guessed between."""
    values = [value for name, value in headers if name == b"authorization"]
    if len(values) != 1:
        return None
    scheme, _, credentials = values[0].strip().partition(b" ")
    return credentials.strip() if scheme.lower() == b"bearer" else None


def bearer_matches(headers: list[tuple[bytes, bytes]], tokens: AcceptedTokens) -> bool:
    credentials = bearer_credentials(headers)
    return credentials is not None and tokens.match(credentials)
