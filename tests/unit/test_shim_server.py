"""The server python -m shim runs, over real sockets in this process: the request line and headers bounded in time and
size, kept-alive connections still served, and no access log."""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest
import uvicorn

from devstack.process import free_port
from shim import server
from shim.app import create_app
from shim.settings import ShimSettings

from .fake_model import FakeModel

TOKEN = "s3cret-token-for-tests-0123456789abcdef"


@pytest.fixture(scope="module")
def address():
    port = free_port()
    settings = ShimSettings.from_env({"INTERN_DECISION_API_TOKEN": TOKEN,
                                      "INTERN_DECISION_TRITON_API_KEY": "k" * 32})
    config = server.config(create_app(settings, FakeModel()), "127.0.0.1", port)
    assert config.access_log is False and config.timeout_keep_alive == server.KEEP_ALIVE_SECONDS
    instance = uvicorn.Server(config)
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not instance.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    yield "127.0.0.1", port
    instance.should_exit = True
    thread.join(10)


def connect(address) -> socket.socket:
    sock = socket.create_connection(address, timeout=10)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def read_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_headers_slower_than_the_deadline_close_the_connection(address, monkeypatch):
    monkeypatch.setattr(server, "HEADER_TIMEOUT_SECONDS", 0.5)
    with connect(address) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.2)
        sock.sendall(b"X-Slow: 1\r\n")  # bytes keep coming, the headers never end
        assert read_until_closed(sock) == b""
        assert 0.45 <= time.monotonic() - started < 3


def test_a_connection_that_sends_nothing_is_closed_at_the_deadline(address, monkeypatch):
    monkeypatch.setattr(server, "HEADER_TIMEOUT_SECONDS", 0.5)
    with connect(address) as sock:
        started = time.monotonic()
        assert read_until_closed(sock) == b""
        assert 0.45 <= time.monotonic() - started < 3


def test_headers_over_the_limit_are_431_in_the_envelope_and_closed(address):
    with connect(address) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        try:
            for _ in range(server.MAX_HEADER_BYTES // 1000 + 2):
                sock.sendall(b"X-Filler: " + b"f" * 1000 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while still sending: the answer is already in the receive buffer
        answer = read_until_closed(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ")
    assert b"x-request-id: " in head and b"connection: close" in head
    assert json.loads(body)["error"]["code"] == "request_header_too_large"


def test_a_kept_alive_connection_serves_request_after_request(address, monkeypatch):
    monkeypatch.setattr(server, "HEADER_TIMEOUT_SECONDS", 0.5)
    with connect(address) as sock:
        for _ in range(3):
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200 ")
            time.sleep(0.3)  # the deadlines of the earlier requests never fire on the later ones
        sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")


def test_ports_handed_out_together_are_distinct():
    from devstack.process import free_ports

    for _ in range(50):
        ports = free_ports(3)
        assert len(set(ports)) == 3 and all(1024 <= port <= 65535 for port in ports)
