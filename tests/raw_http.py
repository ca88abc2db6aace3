"""HTTP/1.1 over a raw socket, for the tests that must control every byte a client sends and see every byte the
server sends back: pipelining, connections held open, what a refusal closes."""
from __future__ import annotations

import socket
import time

HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


def _content_length(head: bytes) -> int:
    return int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")))


def read_response(sock: socket.socket) -> bytes:
    """One whole response (head and a Content-Length body); ConnectionError when the server closes before its end."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data[:200]!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = _content_length(head)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed in the body")
        body += chunk
    return head + b"\r\n\r\n" + body


def read_until_closed_or(sock: socket.socket, most: int, seconds: float = 10.0) -> bytes:
    """What the server sent until it closed the connection, or until `most` bytes or `seconds` (then it is left
    open: the caller's assertions tell)."""
    deadline = time.monotonic() + seconds
    received = bytearray()
    while len(received) < most and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            break
        if not chunk:
            break
        received += chunk
    return bytes(received)


def status_lines(data: bytes) -> list[bytes]:
    """The status lines of the whole responses in `data`, in order."""
    found, at = [], 0
    while (end := data.find(b"\r\n\r\n", at)) >= 0:
        head = data[at:end]
        found.append(head.split(b"\r\n")[0])
        at = end + 4 + _content_length(head)
    return found


def closed_by_server(sock: socket.socket, seconds: float = 2.0) -> bool:
    """The server closed the connection within `seconds`, without our sending anything (well before the keep-alive
    timer, KEEP_ALIVE_SECONDS after the connection's last answer, would)."""
    previous = sock.gettimeout()
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
    finally:
        sock.settimeout(previous)


def serves_health(sock: socket.socket) -> bool:
    """The connection still serves a request (one the server closed reads as not serving)."""
    try:
        sock.sendall(HEALTH)
        return read_response(sock).startswith(b"HTTP/1.1 200 ")
    except OSError:
        return False


def pipelined(count: int, header_bytes: int = 0) -> bytes:
    """`count` GET /health requests in one run of bytes, each with `header_bytes` of filler in a header."""
    filler = b"X-Filler: " + b"f" * header_bytes + b"\r\n" if header_bytes else b""
    return b"".join(b"GET /health HTTP/1.1\r\nHost: x\r\n" + filler + b"\r\n" for _ in range(count))
