"""Request bodies in gzip or zstd, decoded as they arrive within the body's limit and MAX_DECODE_RATIO, in bounded
steps (docs/operations.md, "Bodies and parsing")."""
from __future__ import annotations

import sys
import zlib
from typing import Callable, Iterator, Protocol

if sys.version_info >= (3, 14):
    from compression.zstd import ZstdDecompressor, ZstdError
else:
    from backports.zstd import ZstdDecompressor, ZstdError

from ..settings import ShimSettings

IDENTITY = "identity"
ENCODINGS = ("gzip", "zstd")
IN_SLICE = 64 * 1024
OUT_SLICE = 256 * 1024
MAX_MEMBERS = 64  # gzip members or zstd frames
RATIO_FLOOR = 8 * 1024  # json_body.ON_LOOP_BYTES: a body may always reach it, whatever the ratio
_MEMBER_WORD = {"gzip": "members", "zstd": "frames"}


class UnsupportedEncoding(ValueError):
    """415."""


class BodyTooLarge(Exception):
    """413."""

    def __init__(self, sent: bool = False, ratio: bool = False):
        super().__init__(sent, ratio)
        self.sent = sent
        self.ratio = ratio


class UndecodableBody(ValueError):
    """422."""


class _Decompressor(Protocol):
    eof: bool
    unused_data: bytes

    def decompress(self, data: bytes | memoryview, max_length: int = ...) -> bytes: ...


def _input_left(decompressor: _Decompressor) -> bytes:
    """zlib hands back the input it did not take; zstd keeps it and continues on empty input."""
    return getattr(decompressor, "unconsumed_tail", b"")


def _gzip() -> _Decompressor:
    return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)


_DECOMPRESSORS: dict[str, Callable[[], _Decompressor]] = {"gzip": _gzip, "zstd": ZstdDecompressor}


def content_encoding(values: list[str]) -> str:
    named = [token.strip().lower() for value in values for token in value.split(",") if token.strip()]
    named = [token for token in named if token != IDENTITY]
    if not named:
        return IDENTITY
    if len(named) == 1 and named[0] in _DECOMPRESSORS:
        return named[0]
    raise UnsupportedEncoding(f"Content-Encoding {', '.join(named)!s} is not supported; send identity, "
                              f"{' or '.join(ENCODINGS)}")


class BodyDecoder:
    def __init__(self, encoding: str, limit: int, max_members: int = MAX_MEMBERS,
                 max_ratio: int = ShimSettings.max_decode_ratio):
        self._encoding = encoding
        self._limit = limit
        self._max_ratio = max_ratio
        self._fed = 0
        self._max_members = max_members
        self._decompressor = None if encoding == IDENTITY else _DECOMPRESSORS[encoding]()
        self._members = 0 if self._decompressor is None else 1
        self._chunks: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        for _ in self.steps(chunk):
            pass

    def steps(self, chunk: bytes) -> Iterator[None]:
        if self._decompressor is None:
            self._keep(chunk)
            return
        self._fed += len(chunk)
        try:
            yield from self._inflate(memoryview(chunk))
        except (zlib.error, ZstdError) as exc:
            raise UndecodableBody(f"the body is not valid {self._encoding}: {exc}") from None

    def _inflate(self, data: memoryview) -> Iterator[None]:
        # Short output: the slice was all taken; room + 1 bytes: over the limit. Input left over follows a
        # member's end (unused_data), and its length says where the next one starts.
        offset = 0
        while offset < len(data):
            if self._decompressor.eof:
                self._next_member()
            piece = data[offset:offset + IN_SLICE]
            offset += len(piece)
            given: bytes | memoryview = piece
            while True:
                asked = min(self._room() + 1, OUT_SLICE)
                output = self._decompressor.decompress(given, asked)
                self._keep(output)
                if self._decompressor.eof:
                    offset -= len(self._decompressor.unused_data)
                    break
                if len(output) < asked:
                    break
                given = _input_left(self._decompressor)
                yield
            yield

    def _next_member(self) -> None:
        if self._members >= self._max_members:
            raise UndecodableBody(f"the body holds more than {self._max_members} {self._encoding} "
                                  f"{_MEMBER_WORD[self._encoding]}")
        self._members += 1
        self._decompressor = _DECOMPRESSORS[self._encoding]()

    def _allowed(self) -> int:
        if self._decompressor is None:
            return self._limit
        return min(self._limit, max(RATIO_FLOOR, self._max_ratio * self._fed))

    def _room(self) -> int:
        return self._allowed() - self._size

    def _keep(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size > self._limit:
            raise BodyTooLarge
        if self._size > self._allowed():
            raise BodyTooLarge(ratio=True)
        if chunk:
            self._chunks.append(chunk)

    def body(self) -> bytes:
        if self._decompressor is not None and not self._decompressor.eof:
            raise UndecodableBody(f"the body is not a whole {self._encoding} stream: it stops short")
        return b"".join(self._chunks)
