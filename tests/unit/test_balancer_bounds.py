"""The balancer's bounds on one client, through a real HAProxy rendered from the production template
(docker/haproxy/haproxy.cfg.template) in front of the real shim server over the fake model (tests/unit/fake_shim.py):
one source address holds no more than its share of connections and requests while another address is still served;
a POST without Authorization and a POST declaring a body above MAX_BODY_BYTES are answered by HAProxy in the
envelope, the connection closed, and never reach the shim; HAProxy's log names the path, never the query string.

Every address of 127.0.0.0/8 is loopback on Linux: each test calls from an address of its own, so that one source's
counters never touch another's. HAProxy comes from Debian's package (scripts/install-haproxy.sh)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from devstack.haproxy import HAProxyServer
from devstack.process import free_port
from tests.unit.shim_helpers import AUTH, TOKEN, decide_body

REPO = Path(__file__).resolve().parents[2]
CONNECTIONS = 4  # per source address
REQUESTS = 20  # per source address and RATE_PERIOD
RATE_PERIOD = "10s"
MAX_BODY_BYTES = 64 * 1024
SECRET = "pasted-into-a-url-0123456789"
# The shim's access lines (logger intern_decision.shim.access) on its stderr, to count what reached it.
SHIM = ("import logging, sys; logging.basicConfig(level=logging.INFO, format='%(name)s %(message)s'); "
        "from tests.unit.fake_shim import main; sys.argv[1:] = ['--port', sys.argv[1]]; main()")


class Stack:
    def __init__(self, shim_log: Path, haproxy: HAProxyServer):
        self.shim_log, self.haproxy = shim_log, haproxy

    def posts_seen_by_the_shim(self) -> int:
        return sum(line.startswith("intern_decision.shim.access POST ")
                   for line in self.shim_log.read_text(errors="replace").splitlines())

    def client(self, source: str, **options) -> httpx.Client:
        transport = httpx.HTTPTransport(local_address=source)
        return httpx.Client(base_url=self.haproxy.url, transport=transport, timeout=10, **options)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    folder = tmp_path_factory.mktemp("balancer")
    port = free_port()
    env = {**os.environ, "INTERN_DECISION_API_TOKEN": TOKEN, "INTERN_DECISION_TRITON_API_KEY": "k" * 32,
           "INTERN_DECISION_MAX_BODY_BYTES": str(MAX_BODY_BYTES), "INTERN_DECISION_PROBE_SECONDS": "3600",
           "INTERN_DECISION_DRAIN_SECONDS": "0.2", "INTERN_DECISION_MAX_CONNECTIONS_PER_PEER": "0"}
    shim_log = folder / "shim.log"
    with shim_log.open("wb") as log:
        shim = subprocess.Popen([sys.executable, "-c", SHIM, str(port)], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    haproxy = HAProxyServer([("shim", f"127.0.0.1:{port}")], folder / "haproxy", check_inter="200ms",
                            per_source_connections=CONNECTIONS, per_source_requests=REQUESTS,
                            rate_period=RATE_PERIOD, max_body_bytes=MAX_BODY_BYTES)
    try:
        haproxy.start().wait_ready(timeout=30)
        yield Stack(shim_log, haproxy)
    finally:
        haproxy.stop()
        shim.terminate()
        shim.wait(30)


def connect(stack: Stack, source: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", stack.haproxy.port))
    return sock


def answer_and_close(sock: socket.socket) -> bytes:
    """Everything HAProxy sends until it closes the connection (a timeout fails the test)."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def until(condition, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
    return result


def test_one_address_holds_no_more_than_its_share_of_connections_and_another_is_still_served(stack):
    # CONNECTIONS clients from one address trickle half a request line each: every one is held open.
    holders = [connect(stack, "127.0.0.2") for _ in range(CONNECTIONS)]
    try:
        for sock in holders:
            sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: balancer\r\n")
        extra = connect(stack, "127.0.0.2")
        extra.sendall(b"GET /health HTTP/1.1\r\nHost: balancer\r\n\r\n")
        refused = answer_and_close(extra)  # closed after the answer
        extra.close()
        assert refused.startswith(b"HTTP/1.1 429"), refused
        assert b"\r\nretry-after: 1\r\n" in refused.lower() and b'{"error":{"code":"busy","message":' in refused
        with stack.client("127.0.0.3") as other:  # another address is served meanwhile
            assert other.get("/health").status_code == 200
            assert other.post("/decide", json=decide_body(), headers=AUTH).status_code == 200
    finally:
        for sock in holders:
            sock.close()


def test_one_address_is_held_to_its_request_rate_and_another_is_still_served(stack):
    with stack.client("127.0.0.4") as busy, stack.client("127.0.0.5") as other:
        statuses = [busy.get("/health").status_code for _ in range(REQUESTS + 5)]
        assert statuses[:REQUESTS] == [200] * REQUESTS and statuses[REQUESTS:] == [429] * 5, statuses
        refused = busy.get("/health")
        assert refused.headers["retry-after"] == "1" and refused.headers["connection"] == "close"
        assert refused.json()["error"]["code"] == "busy"
        assert other.get("/health").status_code == 200


def test_a_post_without_authorization_is_answered_by_the_balancer_and_never_reaches_the_shim(stack):
    seen = stack.posts_seen_by_the_shim()
    # It declares a body it never sends: the answer comes at once, not after the body wait.
    sock = connect(stack, "127.0.0.6")
    sock.sendall(f"POST /decide?token={SECRET} HTTP/1.1\r\nHost: balancer\r\nContent-Type: application/json\r\n"
                 f"Content-Length: 1000\r\n\r\n".encode())
    answer = answer_and_close(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 401"), answer
    assert b"\r\nwww-authenticate: Bearer\r\n" in answer.lower().replace(b"bearer", b"Bearer")
    assert b'{"error":{"code":"unauthorized","message":' in answer
    with stack.client("127.0.0.6") as http:  # the same POST with its token reaches the shim
        assert http.post("/decide", json=decide_body(), headers=AUTH).status_code == 200
    until(lambda: stack.posts_seen_by_the_shim() == seen + 1)
    # HAProxy's log: the refused POST answered by no server, its path without the query string.
    line = until(lambda: next((line for line in stack.haproxy.log_text().splitlines()
                               if " 401 " in line and "POST" in line), None))
    assert "<NOSRV>" in line and '"/decide"' in line
    assert SECRET not in stack.haproxy.log_text()


def test_a_body_declared_above_max_body_bytes_is_refused_by_the_balancer_and_never_reaches_the_shim(stack):
    seen = stack.posts_seen_by_the_shim()
    sock = connect(stack, "127.0.0.7")
    sock.sendall(f"POST /decide HTTP/1.1\r\nHost: balancer\r\nAuthorization: Bearer {TOKEN}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode())
    answer = answer_and_close(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert b'{"error":{"code":"request_too_large","message":' in answer
    with stack.client("127.0.0.7") as http:  # at the limit it reaches the shim, which answers it
        at_limit = http.post("/decide", content=b" " * MAX_BODY_BYTES,
                             headers={**AUTH, "Content-Type": "application/json"})
        assert at_limit.status_code == 422
    until(lambda: stack.posts_seen_by_the_shim() == seen + 1)
