"""The metrics' own HTTP server: prometheus-client's WSGI app on wsgiref, each connection bounded in time and
number, per address too (docs/operations.md, "Reliability and limits")."""
from __future__ import annotations

import collections
import contextlib
import io
import socket
import sys
import threading
import time
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

from .server.roster import source_of

DEADLINE_SECONDS = 10.0  # Prometheus's default scrape_timeout
FIRST_BYTE_SECONDS = 2.0
MAX_CONNECTIONS = 8
MAX_PER_PEER = 2
_BUSY_ANSWER = (b"HTTP/1.0 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n"
                b"connection: close\r\n\r\nbusy\n")


class _DeadlineReader(io.RawIOBase):
    """The first read has until `first`, the others until the connection's deadline."""

    def __init__(self, sock: socket.socket, deadline: float, first: float):
        self._sock = sock
        self._whole = deadline
        self._deadline = min(first, deadline)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self._sock.settimeout(_left(self._deadline))
        read = self._sock.recv_into(buffer)
        self._deadline = self._whole
        return read


class _DeadlineWriter(io.RawIOBase):
    def __init__(self, sock: socket.socket, deadline: float):
        self._sock = sock
        self._deadline = deadline

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._sock.settimeout(_left(self._deadline))
        try:
            self._sock.sendall(data)
        except TimeoutError:  # as a reader gone, which wsgiref drops quietly
            raise ConnectionAbortedError("the metrics connection's deadline passed") from None
        return len(data)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise ConnectionAbortedError("the metrics connection's deadline passed")
    return left


class _Handler(WSGIRequestHandler):
    server: "BoundedMetricsServer"

    def setup(self) -> None:
        self.connection = self.request
        now = time.monotonic()
        deadline = now + self.server.deadline_seconds
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, deadline, now + FIRST_BYTE_SECONDS))
        self.wfile = _DeadlineWriter(self.connection, deadline)

    def parse_request(self) -> bool:
        whole = super().parse_request()
        if whole:
            self.server.request_read(self.request)
        return whole

    def log_message(self, format, *args) -> None:
        pass


@dataclass(eq=False)
class _Held:
    source: str
    sock: socket.socket
    opened_at: float
    read_whole: bool = False  # being answered: never gives way


class BoundedMetricsServer(ThreadingMixIn, WSGIServer):
    """When full, the heaviest source's oldest connection still sending its request gives way to a lighter source."""

    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 drops a burst's SYNs: a scrape then waits seconds

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily, deadline_seconds: float,
                 max_connections: int, max_per_peer: int = MAX_PER_PEER):
        self.address_family = family
        self.deadline_seconds = deadline_seconds
        self._max_connections = max_connections
        self._max_per_peer = max_per_peer
        self._held: dict[socket.socket, _Held] = {}
        self._per_source: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        super().__init__(address, _Handler)

    def _admit(self, request: socket.socket, source: str) -> bool:
        with self._lock:
            mine = self._per_source[source]
            if mine >= self._max_per_peer:
                return False
            if len(self._held) >= self._max_connections:
                giving = self._giving_way(mine)
                if giving is None:
                    return False
                del self._held[giving.sock]
                self._per_source[giving.source] -= 1
                with contextlib.suppress(OSError):
                    giving.sock.shutdown(socket.SHUT_RDWR)
            self._held[request] = _Held(source, request, time.monotonic())
            self._per_source[source] += 1
            return True

    def _giving_way(self, mine: int) -> _Held | None:
        waiting = [held for held in self._held.values() if not held.read_whole]
        if not waiting:
            return None
        heaviest = max(self._per_source[held.source] for held in waiting)
        if heaviest <= mine:
            return None
        return min((held for held in waiting if self._per_source[held.source] == heaviest),
                   key=lambda held: held.opened_at)

    def request_read(self, request: socket.socket) -> None:
        with self._lock:
            if (held := self._held.get(request)) is not None:
                held.read_whole = True

    def _release(self, request: socket.socket) -> None:
        with self._lock:
            held = self._held.pop(request, None)
            if held is not None:
                self._per_source[held.source] -= 1
                if not self._per_source[held.source]:
                    del self._per_source[held.source]

    def process_request(self, request, client_address) -> None:
        if not self._admit(request, source_of(str(client_address[0]))):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def _refuse(self, request) -> None:
        try:
            request.setblocking(False)
            request.send(_BUSY_ANSWER)
        except OSError:
            pass
        self.shutdown_request(request)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


def serve(registry: CollectorRegistry, host: str, port: int, deadline_seconds: float = DEADLINE_SECONDS,
          max_connections: int = MAX_CONNECTIONS, max_per_peer: int = MAX_PER_PEER) -> BoundedMetricsServer:
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    server = BoundedMetricsServer((host, port), family, deadline_seconds, max_connections, max_per_peer)
    server.set_app(make_wsgi_app(registry))
    threading.Thread(target=server.serve_forever, name="metrics-server", daemon=True).start()
    return server
