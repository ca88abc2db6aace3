"""A kept-alive HTTP/1.1 connection to Triton, parsed with httptools; one request at a time, since the calls are
serialised anyway (INV-2) and a pool would only add work."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httptools


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class _Collector:
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    complete: bool = False
    keep_alive: bool = False
    received: int = 0
    parser: "httptools.HttpResponseParser | None" = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        # llhttp answers it for this message only inside this callback
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True


class ClosedBeforeAnswer(ConnectionError):
    """Before any of the answer arrived."""


class Http1Connection:
    def __init__(self, host: str, port: int):
        self.host = host
        self.port = port
        self._host_header = f"{host}:{port}".encode("latin-1")
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def request(self, method: str, target: str, timeout: float, body: bytes = b"",
                      headers: dict[str, str] | None = None) -> Response:
        async with self._lock:
            try:
                async with asyncio.timeout(timeout):
                    reused = self._writer is not None and not self._writer.is_closing()
                    try:
                        return await self._exchange(method, target, body, headers)
                    except ClosedBeforeAnswer:
                        if not reused:
                            raise
                        self._drop()
                        return await self._exchange(method, target, body, headers)
            except BaseException:
                self._drop()
                raise

    async def _exchange(self, method: str, target: str, body: bytes, headers: dict[str, str] | None) -> Response:
        if self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        head = [f"{method} {target} HTTP/1.1".encode("latin-1"), b"Host: " + self._host_header,
                b"Content-Length: " + str(len(body)).encode("ascii")]
        head += [f"{name}: {value}".encode("latin-1") for name, value in (headers or {}).items()]
        self._writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        await self._writer.drain()
        collector = _Collector()
        parser = collector.parser = httptools.HttpResponseParser(collector)
        while not collector.complete:
            data = await self._reader.read(262144)
            if not data:
                if collector.received == 0:
                    raise ClosedBeforeAnswer(f"{self.host}:{self.port} closed the connection before answering")
                raise ConnectionError(f"{self.host}:{self.port} closed the connection in the middle of an answer")
            collector.received += len(data)
            parser.feed_data(data)
        if not collector.keep_alive:
            self._drop()
        return Response(parser.get_status_code(), collector.headers, b"".join(collector.chunks))

    def _drop(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def close(self) -> None:
        writer = self._writer
        self._drop()
        if writer is not None:
            try:
                await writer.wait_closed()
            except OSError:
                pass
