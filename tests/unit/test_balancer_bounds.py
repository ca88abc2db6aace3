"""The balancer's bounds on one client, through a real HAProxy rendered from the production template
(docker/haproxy/haproxy.cfg.template) in front of the real shim server over the fake model (tests/unit/fake_shim.py):
one source address holds no more than its share of connections (refused as they connect, so that silent sockets
never hold the balancer's maxconn), of requests and of POSTs in flight while another address is still served;
a POST without Authorization and a POST declaring a body above MAX_BODY_BYTES are answered by HAProxy in the
envelope, the connection closed, and never reach the shim; HAProxy's log names the path, never the query string.

Every address of 127.0.0.0/8 is loopback on Linux: each test calls from an address of its own, so that one source's
counters never touch another's. An IPv6 source is its /64: checked in a network namespace of its own (`unshare -rn`,
tests/unit/balancer_ipv6.py), whose loopback holds documentation addresses. HAProxy comes from Debian's package
(scripts/install-haproxy.sh)."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from devstack.haproxy import HAProxyServer
from devstack.process import free_port
from tests.raw_http import HEALTH, read_response
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


def shim_env(**settings: str) -> dict:
    return {**os.environ, "INTERN_DECISION_API_TOKEN": TOKEN, "INTERN_DECISION_TRITON_API_KEY": "k" * 32,
            "INTERN_DECISION_MAX_BODY_BYTES": str(MAX_BODY_BYTES), "INTERN_DECISION_PROBE_SECONDS": "3600",
            "INTERN_DECISION_DRAIN_SECONDS": "0.2", "INTERN_DECISION_MAX_CONNECTIONS_PER_PEER": "0",
            "INTERN_DECISION_MAX_QUEUE_PER_PEER": "0", **settings}


@contextmanager
def running_shim(log_path: Path, port: int, **settings: str):
    with log_path.open("wb") as log:
        shim = subprocess.Popen([sys.executable, "-c", SHIM, str(port)], cwd=REPO, env=shim_env(**settings),
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        # Up before HAProxy's readiness polls start: they come from 127.0.0.1 and count towards its request rate.
        until(lambda: shim_answers_health(port), timeout=60)
        yield shim
    finally:
        shim.terminate()
        shim.wait(30)


def shim_answers_health(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class Stack:
    def __init__(self, shim_log: Path, haproxy: HAProxyServer, shim_port: int):
        self.shim_log, self.haproxy, self.shim_port = shim_log, haproxy, shim_port

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
    shim_log = folder / "shim.log"
    with running_shim(shim_log, port):
        haproxy = HAProxyServer([("shim", f"127.0.0.1:{port}")], folder / "haproxy", check_inter="200ms",
                                per_source_connections=CONNECTIONS, per_source_requests=REQUESTS,
                                rate_period=RATE_PERIOD, max_body_bytes=MAX_BODY_BYTES)
        try:
            haproxy.start().wait_ready(timeout=30)
            yield Stack(shim_log, haproxy, port)
        finally:
            haproxy.stop()


def connect(stack: Stack, source: str) -> socket.socket:
    return connect_to(stack.haproxy, source)


def connect_to(haproxy: HAProxyServer, source: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", haproxy.port))
    return sock


def answer_to_a_new_connection(haproxy: HAProxyServer, source: str) -> bytes:
    """What HAProxy answers a GET /health on a new connection: b"" when it closes the connection (reset, or end of
    stream) without answering, refused as it connected."""
    try:
        sock = connect_to(haproxy, source)
    except ConnectionResetError:
        return b""
    with sock:
        try:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: balancer\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            return b""
        return answer_and_close(sock)


def answer_and_close(sock: socket.socket) -> bytes:
    """Everything HAProxy sends until it closes the connection (a timeout fails the test)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:  # closed without a byte read from us: reset, not a FIN
        pass
    return received


@contextlib.contextmanager
def running(target, count: int, stop: threading.Event, join_seconds: float):
    """`count` threads running `target` while the block runs; then `stop` is set and each is waited for."""
    threads = [threading.Thread(target=target) for _ in range(count)]
    try:
        for thread in threads:
            thread.start()
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(join_seconds)


def until(condition, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
    return result


def test_one_address_holds_no_more_than_its_share_of_connections_and_another_is_still_served(stack):
    # CONNECTIONS clients from one address, each answered once (so HAProxy has counted it), then trickling half a
    # request line: every one is held open.
    holders = [connect(stack, "127.0.0.2") for _ in range(CONNECTIONS)]
    try:
        for sock in holders:
            sock.sendall(HEALTH)
            assert read_response(sock).startswith(b"HTTP/1.1 200")
            sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: balancer\r\n")
        # The next one is refused as it connects: closed before any request is read, so nothing is answered.
        assert answer_to_a_new_connection(stack.haproxy, "127.0.0.2") == b""
        with stack.client("127.0.0.3") as other:  # another address is served meanwhile
            assert other.get("/health").status_code == 200
            assert other.post("/decide", json=decide_body(), headers=AUTH).status_code == 200
    finally:
        for sock in holders:
            sock.close()


def test_silent_sockets_from_one_address_never_starve_another_of_the_balancers_connections(stack, tmp_path):
    # A balancer whose maxconn one address could fill many times over if its excess connections were only refused
    # once they sent a request: each would hold a slot for `timeout http-request` and be replaced at once.
    haproxy = HAProxyServer([("shim", f"127.0.0.1:{stack.shim_port}")], tmp_path / "haproxy", maxconn=40,
                            check_inter="200ms", per_source_connections=CONNECTIONS,
                            per_source_requests=REQUESTS, rate_period=RATE_PERIOD, max_body_bytes=MAX_BODY_BYTES)
    haproxy.start().wait_ready(timeout=30)
    silent: list[socket.socket] = []
    try:
        for _ in range(200):
            try:
                silent.append(connect_to(haproxy, "127.0.0.20"))
            except OSError:  # refused or reset while connecting: that is the bound at work
                pass
        transport = httpx.HTTPTransport(local_address="127.0.0.21")
        with httpx.Client(base_url=haproxy.url, transport=transport, timeout=3) as other:
            statuses = []
            for _ in range(6):
                try:
                    statuses.append(other.get("/health", headers={"Connection": "close"}).status_code)
                except httpx.TimeoutException:
                    statuses.append("timeout")
        assert statuses == [200] * 6, statuses
    finally:
        for sock in silent:
            sock.close()
        haproxy.stop()


def test_an_ipv6_source_is_its_64_whole(tmp_path):
    # One holder of a /64 has a million addresses: a share per address would be no share. Run in a network namespace
    # of its own (a user namespace maps us to root there), whose loopback may hold any IPv6 address.
    probe = subprocess.run(["unshare", "-rn", "sh", "-c",
                            f"ip link set lo up && exec {sys.executable} -m tests.unit.balancer_ipv6"],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == {"same_64_refused": True, "other_64_refused": False}


@contextmanager
def small_queue_behind_haproxy(folder: Path, call_seconds: str):
    """A shim whose queue holds 4 requests, behind HAProxy with a share of 2 POSTs in flight per source."""
    port = free_port()
    with running_shim(folder / "shim.log", port, FAKE_CALL_SECONDS=call_seconds, INTERN_DECISION_MAX_QUEUE="4"):
        haproxy = HAProxyServer([("shim", f"127.0.0.1:{port}")], folder / "haproxy", check_inter="200ms",
                                per_source_connections=64, per_source_requests=10_000, rate_period=RATE_PERIOD,
                                per_source_posts=2, max_body_bytes=MAX_BODY_BYTES)
        try:
            yield haproxy.start().wait_ready(timeout=30)
        finally:
            haproxy.stop()


def victims_statuses(haproxy: HAProxyServer, source: str) -> list[int]:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(base_url=haproxy.url, transport=transport, timeout=30) as other:
        return [other.post("/decide", json=decide_body(), headers=AUTH).status_code for _ in range(3)]


def test_one_address_cannot_hold_the_shims_queue_with_its_posts_in_flight(tmp_path):
    # Each request scored in a second; one address keeps 12 POSTs in flight, each re-sent as soon as it is answered.
    # Without a share of POSTs per source it holds the whole queue and another address is answered 429 by the
    # shim; with it, the other address is queued and scored.
    stop = threading.Event()
    hog_statuses: list[int] = []
    with small_queue_behind_haproxy(tmp_path, call_seconds="1") as haproxy:
        def hog():
            transport = httpx.HTTPTransport(local_address="127.0.0.30")
            with httpx.Client(base_url=haproxy.url, transport=transport, timeout=30) as http:
                while not stop.is_set():
                    hog_statuses.append(http.post("/decide", json=decide_body(), headers=AUTH).status_code)
                    stop.wait(0.02)

        with running(hog, 12, stop, join_seconds=60):
            until(lambda: len(hog_statuses) >= 12)  # every hog has been answered once: the queue is as full as it gets
            victim = victims_statuses(haproxy, "127.0.0.31")
    assert victim == [200] * 3, victim
    refused = [status for status in hog_statuses if status == 429]
    assert refused and set(hog_statuses) == {200, 429}, hog_statuses


def test_one_address_cannot_hold_the_idle_shims_queue_with_trickled_bodies(tmp_path):
    # The model idle; one address sends 12 POSTs whose bodies pass HAProxy's first buffer (16 KiB), so each reaches
    # the shim, which admits it before reading its body, then trickles the rest a byte at a time. Without a share of
    # POSTs per source they hold the whole queue and another address is answered 429.
    stop = threading.Event()
    answers: list[bytes] = []
    with small_queue_behind_haproxy(tmp_path, call_seconds="0") as haproxy:
        def trickle():
            sock = connect_to(haproxy, "127.0.0.32")
            with sock:
                sock.sendall(f"POST /decide HTTP/1.1\r\nHost: balancer\r\nAuthorization: Bearer {TOKEN}\r\n"
                             f"Content-Type: application/json\r\nContent-Length: {MAX_BODY_BYTES}\r\n\r\n".encode()
                             + b" " * (17 * 1024))
                sock.settimeout(0.3)
                while not stop.is_set():
                    try:
                        if chunk := sock.recv(65536):
                            answers.append(chunk)
                        break  # answered (refused) or closed
                    except TimeoutError:
                        sock.sendall(b" ")

        with running(trickle, 12, stop, join_seconds=30):
            time.sleep(1.5)  # every trickle past HAProxy's body wait: admitted by the shim, or refused
            victim = victims_statuses(haproxy, "127.0.0.33")
    assert victim == [200] * 3, victim
    assert answers and all(answer.startswith(b"HTTP/1.1 429") for answer in answers), answers


def test_the_balancer_speaks_http1_only_and_refuses_cleartext_http2(stack):
    """HAProxy took HTTP/2 with prior knowledge: 100 streams on one connection, past the per-connection bounds."""
    with connect(stack, "127.0.0.30") as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000"))
        sock.settimeout(5)
        answer = b""
        with contextlib.suppress(ConnectionResetError, socket.timeout):
            while chunk := sock.recv(65536):
                answer += chunk
    assert not answer.startswith(bytes.fromhex("000000040000000000")[:3])  # no SETTINGS frame: not HTTP/2
    assert answer == b"" or answer.startswith(b"HTTP/1.1 400")


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
