"""Request bodies sent with a Content-Encoding (gzip or zstd), decoded as they arrive, never past a limit.

The limit applies to the decoded bytes, and no decoder is ever asked for more than what is left of it plus one
byte, so a small body that inflates past the limit costs no more memory than the limit. zstd is the standard
library's compression.zstd from Python 3.14, its backport (backports.zstd) before.
"""
from __future__ import annotations

import sys
import zlib
from typing import Callable, Protocol

if sys.version_info >= (3, 14):
    from compression.zstd import ZstdDecompressor, ZstdError
else:
    from backports.zstd import ZstdDecompressor, ZstdError

IDENTITY = "identity"
ENCODINGS = ("gzip", "zstd")


class UnsupportedEncoding(ValueError):
    """A Content-Encoding other than identity, gzip or zstd (415)."""


class BodyTooLarge(Exception):
    """The body, decoded, is over the limit (413)."""


class UndecodableBody(ValueError):
    """The body is not a whole stream of its Content-Encoding (422)."""


class _Decompressor(Protocol):
    eof: bool
    unused_data: bytes  # what follows the end of the stream, once eof

    def decompress(self, data: bytes, max_length: int = ...) -> bytes: ...


def _gzip() -> _Decompressor:
    return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)


_DECOMPRESSORS: dict[str, Callable[[], _Decompressor]] = {"gzip": _gzip, "zstd": ZstdDecompressor}


def content_encoding(values: list[str]) -> str:
    """The one encoding named by the Content-Encoding headers (identity when none); UnsupportedEncoding else."""
    named = [token.strip().lower() for value in values for token in value.split(",") if token.strip()]
    named = [token for token in named if token != IDENTITY]
    if not named:
        return IDENTITY
    if len(named) == 1 and named[0] in _DECOMPRESSORS:
        return named[0]
    raise UnsupportedEncoding(f"Content-Encoding {', '.join(named)!s} is not supported; send identity, "
                              f"{' or '.join(ENCODINGS)}")


class BodyDecoder:
    """Feeds the chunks of one body; counts the decoded bytes against `limit`. Identity passes the chunks on."""

    def __init__(self, encoding: str, limit: int):
        self._encoding = encoding
        self._limit = limit
        self._decompressor = None if encoding == IDENTITY else _DECOMPRESSORS[encoding]()
        self._chunks: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        if self._decompressor is None:
            self._keep(chunk)
            return
        try:
            self._inflate(chunk)
        except (zlib.error, ZstdError) as exc:
            raise UndecodableBody(f"the body is not valid {self._encoding}: {exc}") from None

    def _inflate(self, data: bytes) -> None:
        # Output short of room + 1 bytes means the decompressor took all it could of `data`; output of room + 1
        # bytes is over the limit. So the only input left over is what follows the end of a gzip member or a
        # zstd frame: a stream may hold several, each decoded by a fresh decompressor.
        while data:
            if self._decompressor.eof:
                self._decompressor = _DECOMPRESSORS[self._encoding]()
            self._keep(self._decompressor.decompress(data, self._room() + 1))
            data = self._decompressor.unused_data if self._decompressor.eof else b""

    def _room(self) -> int:
        return self._limit - self._size

    def _keep(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size > self._limit:
            raise BodyTooLarge
        if chunk:
            self._chunks.append(chunk)

    def body(self) -> bytes:
        """The decoded body once the last chunk was fed; UndecodableBody when the stream stopped short."""
        if self._decompressor is not None and not self._decompressor.eof:
            raise UndecodableBody(f"the body is not a whole {self._encoding} stream: it stops short")
        return b"".join(self._chunks)
