"""The server python -m shim runs, over real sockets in this process: the request line and headers bounded in time and
size, kept-alive connections still served, and no access log; a refusal closes the connection it does not read, a
trickled body is cut at an overall deadline, connections are bounded, Transfer-Encoding is chunked alone, and
compressed bodies never hold the event loop."""
from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import socket
import threading
import time

import pytest
import uvicorn
from backports import zstd

from devstack.process import free_port
from shim import server
from shim.app import build_service
from shim.settings import ShimSettings
from tests.raw_http import closed_by_server, pipelined, read_response, read_until_closed_or, serves_health, status_lines

from .fake_model import FakeModel

TOKEN = "s3cret-token-for-tests-0123456789abcdef"


@contextlib.contextmanager
def serving(**env: str):
    """A shim under uvicorn in a thread of this process, over a fake model; env: INTERN_DECISION_* without it."""
    port = free_port()
    settings = ShimSettings.from_env({"INTERN_DECISION_API_TOKEN": TOKEN, "INTERN_DECISION_TRITON_API_KEY": "k" * 32,
                                      **{f"INTERN_DECISION_{name}": value for name, value in env.items()}})
    service = build_service(settings, FakeModel())
    config = server.config(service.app, "127.0.0.1", port)
    assert config.access_log is False and config.timeout_keep_alive == server.KEEP_ALIVE_SECONDS
    instance = server.BoundedServer(config, service.limits)
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not instance.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    try:
        yield "127.0.0.1", port
    finally:
        instance.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def address():
    with serving(HEADER_TIMEOUT_SECONDS="0.5") as served:
        yield served


def connect(address) -> socket.socket:
    sock = socket.create_connection(address, timeout=10)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_headers_slower_than_the_deadline_close_the_connection(address):  # HEADER_TIMEOUT_SECONDS=0.5
    with connect(address) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.2)
        sock.sendall(b"X-Slow: 1\r\n")  # bytes keep coming, the headers never end
        assert read_until_closed(sock) == b""
        assert 0.45 <= time.monotonic() - started < 3


def test_a_connection_that_sends_nothing_is_closed_at_the_deadline(address):  # HEADER_TIMEOUT_SECONDS=0.5
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


def headers(count: int) -> bytes:
    return b"GET /health HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % n for n in range(count - 1)) + b"Host: x\r\n\r\n"


def refused_and_closed(address, request: bytes, status: int) -> dict:
    """The envelope's error of a refusal answered with `status`, an id and Connection: close, then closed."""
    with connect(address) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request)
        answer = read_until_closed(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status) and b"x-request-id: " in head and b"connection: close" in head
    return json.loads(body)["error"]


def test_headers_past_their_count_are_431_in_the_envelope_and_closed(address):
    with connect(address) as sock:
        sock.sendall(headers(server.MAX_HEADERS))
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")  # 100 headers: served
    error = refused_and_closed(address, headers(server.MAX_HEADERS + 1), 431)
    assert error["code"] == "request_header_too_large" and "more than 100 headers" in error["message"]


def test_a_read_of_thousands_of_headers_costs_the_loop_little(address):
    """64 KiB of empty headers (13,107 of them) in one read: refused at the 101st, the rest of the read unparsed."""
    flood = b"GET /health HTTP/1.1\r\n" + b"a:\r\n" * 13_000
    started = time.monotonic()
    for _ in range(20):
        with connect(address) as sock:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(flood)
            assert read_until_closed(sock).startswith(b"HTTP/1.1 431 ")
    assert time.monotonic() - started < 2.0  # was 15–30 ms of the loop per request before the count


def test_a_request_the_parser_cannot_read_is_400_in_the_envelope_with_an_id(address):
    with connect(address) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n")
        answer = read_until_closed(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"x-request-id: " in head and b"connection: close" in head
    assert json.loads(body) == {"error": {"code": "malformed_request", "message": "the request is not valid HTTP/1.1"}}


def chunked_post(chunks: int) -> bytes:
    return (b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + AUTH_HEADER
            + b"Transfer-Encoding: chunked\r\n\r\n" + b"1\r\n \r\n" * (chunks - 1) + b"2\r\n{}\r\n0\r\n\r\n")


def test_a_body_past_its_chunk_count_is_413_in_the_envelope_and_closed(address):
    with connect(address) as sock:
        sock.sendall(chunked_post(server.MAX_BODY_CHUNKS))
        assert read_response(sock).startswith(b"HTTP/1.1 422 ")  # 1024 chunks: read, and the app answers
    error = refused_and_closed(address, chunked_post(server.MAX_BODY_CHUNKS + 1), 413)
    assert error["code"] == "request_too_large" and "(MAX_BODY_CHUNKS)" in error["message"]
    with connect(address) as sock:
        assert serves_health(sock)


def test_a_kept_alive_connection_serves_request_after_request(address):  # HEADER_TIMEOUT_SECONDS=0.5
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


# --- The edge against hostile and unlucky clients: every refusal closes what it does not read, bounded connections,
# a trickle cut at an overall deadline, Transfer-Encoding chunked alone, compressed bodies that never hold the loop.

AUTH_HEADER = f"Authorization: Bearer {TOKEN}\r\n".encode()
EDGE_CONNECTIONS = 6


@pytest.fixture(scope="module")
def edge():
    """A shim whose bounds are short: BODY_TIMEOUT_SECONDS 1, MAX_CONNECTIONS 6, MAX_BODY_BYTES 64 MiB (so that a
    compressed body is bounded by its decoding, not by its size)."""
    with serving(BODY_TIMEOUT_SECONDS="1", MAX_QUEUE="2", MAX_CONNECTIONS=str(EDGE_CONNECTIONS),
                 MAX_BODY_BYTES=str(64 * 1024 * 1024)) as served:
        yield served


def head_of(answer: bytes) -> dict[bytes, bytes]:
    head = answer.partition(b"\r\n\r\n")[0].split(b"\r\n")
    return {line.partition(b":")[0].strip().lower(): line.partition(b":")[2].strip() for line in head[1:]}


def closed_within(sock: socket.socket, seconds: float, trickle: bytes | None = None) -> tuple[bytes, float]:
    """What the server sent until it closed the connection, and when (from now); sends `trickle` every 0.2 s
    meanwhile. AssertionError when still open after `seconds`."""
    started = time.monotonic()
    sock.settimeout(0.2)
    received = b""
    while time.monotonic() - started < seconds:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            chunk = None
        except ConnectionResetError:
            return received, time.monotonic() - started
        if chunk == b"":
            return received, time.monotonic() - started
        received += chunk or b""
        if trickle is not None:
            try:
                sock.sendall(trickle)
            except (BrokenPipeError, ConnectionResetError):
                pass
    raise AssertionError(f"still open after {seconds} s; received {received[:200]!r}")


def test_an_unauthenticated_post_announcing_a_large_body_is_401_and_closed_at_once(edge):
    with connect(edge) as sock:
        sock.sendall(b"POST /decide HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000\r\n\r\n")
        answer, seconds = closed_within(sock, 1.0)
    assert answer.startswith(b"HTTP/1.1 401 ") and head_of(answer)[b"connection"] == b"close"
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("request_head", [
    b"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST /decide HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n",
    b"POST /decide HTTP/1.1\r\nHost: x\r\n" + AUTH_HEADER + b"Transfer-Encoding: chunked\r\n\r\n",
], ids=["health-with-a-body", "unauthenticated", "admitted"])
def test_a_body_trickled_a_byte_at_a_time_is_cut_at_the_deadline(edge, request_head):
    """Each byte arrives well within any per-byte timeout; the connection still ends by BODY_TIMEOUT_SECONDS (1 s
    here) plus the server's grace, whatever the app did with the request."""
    trickle = b"1\r\nx\r\n" if b"chunked" in request_head else b"x"
    with connect(edge) as sock:
        sock.sendall(request_head)
        answer, seconds = closed_within(sock, 1 + server.BODY_GRACE_SECONDS + 1.5, trickle)
    assert answer == b"" or head_of(answer)[b"connection"] == b"close"


def test_the_servers_own_body_deadline_cuts_what_the_app_neither_reads_nor_answers():
    async def app(scope, receive, send):
        if scope["type"] == "http":
            await asyncio.sleep(3600)

    port = free_port()
    limits = server.ConnectionLimits(header_seconds=5, body_seconds=0.5)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    instance = server.BoundedServer(config, limits)
    instance.config.timeout_graceful_shutdown = 1
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    while not instance.started:
        time.sleep(0.02)
    try:
        with connect(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
            _, seconds = closed_within(sock, 3.0, b"x")
        assert 0.4 <= seconds < 2.0
    finally:
        instance.should_exit = True
        thread.join(10)


def test_a_connection_that_sends_nothing_is_closed_sooner_than_one_whose_head_trickles():
    """A silent socket holds a connection for silent_seconds (the keep-alive's 5 s by default), not the head's 10."""
    async def app(scope, receive, send):
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})

    port = free_port()
    limits = server.ConnectionLimits(header_seconds=2, silent_seconds=0.3)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    instance = server.BoundedServer(config, limits)
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    while not instance.started:
        time.sleep(0.02)
    try:
        with connect(("127.0.0.1", port)) as silent, connect(("127.0.0.1", port)) as talking:
            talking.sendall(b"GET /x HTTP/1.1\r\n")
            _, seconds = closed_within(silent, 3.0)
            assert 0.25 <= seconds < 1.0
            assert not closed_by_server(talking, 0.5)  # its head is within header_seconds
            talking.sendall(b"Host: x\r\n\r\n")
            assert read_response(talking).startswith(b"HTTP/1.1 200 ")
    finally:
        instance.should_exit = True
        thread.join(10)


def busy(address, count: int, source: str | None = None) -> list[socket.socket]:
    """`count` connections, each with a request begun and its headers not complete (busy until the header
    deadline); source: the client address to connect from."""
    held = []
    for _ in range(count):
        sock = connect(address) if source is None else socket.create_connection(address, 10, (source, 0))
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        held.append(sock)
    return held


def test_a_connection_beyond_max_connections_all_busy_is_503_in_the_envelope_and_closed(edge):
    held = busy(edge, EDGE_CONNECTIONS)
    try:
        with connect(edge) as sock:
            sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
            answer, _ = closed_within(sock, 2.0)
    finally:
        for sock in held:
            sock.close()
    assert answer.startswith(b"HTTP/1.1 503 ")
    head = head_of(answer)
    assert head[b"connection"] == b"close" and head[b"retry-after"] == b"1" and b"x-request-id" in head
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "too_many_connections" and "(MAX_CONNECTIONS)" in error["message"]
    with connect(edge) as sock:  # the busy ones gone, room again
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")


def test_health_on_a_connection_beyond_max_connections_is_answered_and_closed(edge):
    """A flood of connections must not fail the balancer's health checks: /health is answered, then closed."""
    held = busy(edge, EDGE_CONNECTIONS)  # MAX_CONNECTIONS open, each in the middle of a request
    try:
        with connect(edge) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            answer, _ = closed_within(sock, 2.0)
        with connect(edge) as sock:  # anything else on a connection beyond the limit is still refused
            sock.sendall(b"GET /health/ HTTP/1.1\r\nHost: x\r\n\r\n")
            refused, _ = closed_within(sock, 2.0)
    finally:
        for sock in held:
            sock.close()
    assert answer.startswith(b"HTTP/1.1 200 ") and head_of(answer)[b"connection"] == b"close"
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["status"] == "ok"
    assert refused.startswith(b"HTTP/1.1 503 ") and b"too_many_connections" in refused


def test_idle_connections_give_way_to_a_request_oldest_idle_first():
    """MAX_CONNECTIONS kept-alive connections, all idle: a request on one more is served, and the connection idle the
    longest (not the oldest opened) is the one closed for it."""
    with serving(MAX_QUEUE="2", MAX_CONNECTIONS="4") as address:
        kept = [connect(address) for _ in range(4)]
        for sock in reversed(kept):  # the last opened is idle the longest
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200 ")
        with connect(address) as sock:
            sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200 ")
            assert closed_by_server(kept[-1])
            assert [serves_health(other) for other in kept[:-1]] == [True, True, True]
        for other in kept:
            other.close()


def test_one_peer_beyond_its_share_is_503_while_another_peer_is_served():
    with serving(MAX_QUEUE="2", MAX_CONNECTIONS="8", MAX_CONNECTIONS_PER_PEER="2") as address:
        held = busy(address, 2, source="127.0.0.1")
        try:
            with connect(address) as sock:
                sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
                refused, _ = closed_within(sock, 2.0)
            with socket.create_connection(address, 10, ("127.0.0.2", 0)) as sock:
                sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
                served = read_response(sock)
        finally:
            for sock in held:
                sock.close()
    assert refused.startswith(b"HTTP/1.1 503 ") and head_of(refused)[b"retry-after"] == b"1"
    error = json.loads(refused.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "too_many_connections" and "MAX_CONNECTIONS_PER_PEER" in error["message"]
    assert served.startswith(b"HTTP/1.1 200 ")


def test_sources_each_holding_their_share_in_heads_do_not_keep_a_new_source_out():
    """4 sources × their whole share of trickled heads filled every connection: a fifth source's requests were all
    503 while /health stayed 200. The heaviest source's heads now give way to it, oldest first."""
    with serving(MAX_QUEUE="2", MAX_CONNECTIONS="8", MAX_CONNECTIONS_PER_PEER="2") as address:
        held = [sock for n in range(4) for sock in busy(address, 2, source=f"127.0.0.{2 + n}")]
        try:
            time.sleep(0.1)  # every head begun
            with socket.create_connection(address, 10, ("127.0.0.9", 0)) as sock:
                sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
                served = read_response(sock)
            reclaimed = [closed_by_server(sock, 0.5) for sock in held]
        finally:
            for sock in held:
                sock.close()
    assert served.startswith(b"HTTP/1.1 200 ")
    assert reclaimed.count(True) == 1 and reclaimed[0]  # the oldest head of a heaviest source


def test_a_peers_own_idle_connections_give_way_to_its_request():
    with serving(MAX_QUEUE="2", MAX_CONNECTIONS="8", MAX_CONNECTIONS_PER_PEER="2") as address:
        kept = [connect(address) for _ in range(2)]
        for sock in kept:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200 ")
        with connect(address) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200 ")
            assert closed_by_server(kept[0]) and serves_health(kept[1])
        for sock in kept:
            sock.close()


def test_a_balancers_address_has_no_per_peer_share():
    with serving(MAX_QUEUE="2", MAX_CONNECTIONS="8", MAX_CONNECTIONS_PER_PEER="2",
                 BALANCER_ADDRESSES="127.0.0.0/30") as address:
        held = busy(address, 4)
        try:
            with connect(address) as sock:
                sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
                assert read_response(sock).startswith(b"HTTP/1.1 200 ")
        finally:
            for sock in held:
                sock.close()


# --- Pipelining: a few requests in one write are served in order, wherever the reads split them; a burst is bounded.

def test_a_pipelining_client_is_served_wherever_its_headers_split(address):
    """Twelve requests of 6 KiB of headers each (72 KiB, more than MAX_HEADER_BYTES together), sent in two writes
    that split the last one's headers: every request is under the limit, so each is answered."""
    burst = pipelined(12, header_bytes=6 * 1024)
    cut = len(burst) - 3 * 1024
    with connect(address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(burst[:cut])
        time.sleep(0.2)
        sock.sendall(burst[cut:] + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        received = read_until_closed_or(sock, 64 * 1024)
    assert status_lines(received) == [b"HTTP/1.1 200 OK"] * 13


def test_a_pipelined_burst_is_answered_up_to_the_bound_then_400_and_closed(address):
    """256 KiB of pipelined requests in one write: those up to MAX_PIPELINED_REQUESTS behind the first are
    answered, the next is 400 too_many_pipelined_requests in the envelope, and the connection is closed."""
    burst = pipelined(256 * 1024 // len(pipelined(1)))
    with connect(address) as sock:
        try:
            sock.sendall(burst)
        except (BrokenPipeError, ConnectionResetError):
            pass
        received = read_until_closed_or(sock, 64 * 1024)
    statuses = status_lines(received)
    assert statuses == [b"HTTP/1.1 200 OK"] * (1 + server.MAX_PIPELINED_REQUESTS) + [b"HTTP/1.1 400 Bad Request"]
    last = received[received.rindex(b"HTTP/1.1 400 "):]
    assert head_of(last)[b"connection"] == b"close"
    assert json.loads(last.partition(b"\r\n\r\n")[2])["error"]["code"] == "too_many_pipelined_requests"


@pytest.mark.parametrize("coding", [b"gzip, chunked", b"identity, chunked"])
def test_a_transfer_encoding_other_than_chunked_alone_is_refused(edge, coding):
    body = gzip.compress(b'{"model": "x"}')
    chunked = hex(len(body))[2:].encode() + b"\r\n" + body + b"\r\n0\r\n\r\n"
    with connect(edge) as sock:
        sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\n" + AUTH_HEADER +
                     b"Transfer-Encoding: " + coding + b"\r\n\r\n" + chunked)
        answer, _ = closed_within(sock, 2.0)
    assert answer.startswith(b"HTTP/1.1 501 ") and head_of(answer)[b"connection"] == b"close"
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "unsupported_transfer_encoding" and "chunked alone" in error["message"]


def test_health_keeps_answering_while_four_streams_of_empty_zstd_frames_arrive(edge):
    """/health is polled while four streams of empty zstd frames (30 MiB each) arrive: each poll is answered 200
    (within the socket's 10 s: a loop held by decoding would stall them), and every stream is refused, not decoded.
    No latency bound: a busy machine slows every answer alike."""
    frames = zstd.compress(b"") * (256 * 1024 // len(zstd.compress(b"")))
    chunk = hex(len(frames))[2:].encode() + b"\r\n" + frames + b"\r\n"
    stop = threading.Event()
    answers: list[bytes] = []

    def stream() -> None:
        with socket.create_connection(edge, timeout=10) as sock:
            sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\n" + AUTH_HEADER +
                         b"Content-Encoding: zstd\r\nTransfer-Encoding: chunked\r\n\r\n")
            try:
                for _ in range(120):  # 30 MiB
                    if stop.is_set():
                        break
                    sock.sendall(chunk)
                answers.append(read_until_closed(sock))
            except OSError:
                answers.append(b"reset while sending")

    senders = [threading.Thread(target=stream, daemon=True) for _ in range(4)]
    for sender in senders:
        sender.start()
    health: list[bytes] = []
    try:
        while len(health) < 5 or any(sender.is_alive() for sender in senders):
            with connect(edge) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                health.append(read_response(sock).split(b"\r\n")[0])
            if len(health) >= 60:
                break
    finally:
        stop.set()
        for sender in senders:
            sender.join(30)
    assert health and set(health) == {b"HTTP/1.1 200 OK"}, health
    assert len(answers) == 4
    for answer in answers:  # refused, not decoded: a 4xx, or the connection cut while it still sent
        assert answer == b"reset while sending" or answer.startswith((b"HTTP/1.1 413 ", b"HTTP/1.1 422 ")), answer[:200]


def client_seen(balancer_addresses: tuple[str, ...], peer: str, forwarded: bytes | None) -> tuple:
    """The client the app sees for a request from `peer`, under the server's config."""
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["client"])

    config = server.config(app, "127.0.0.1", 0, balancer_addresses=balancer_addresses)
    config.load()
    headers = [(b"x-forwarded-for", forwarded)] if forwarded else []
    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers, "client": (peer, 5000),
             "scheme": "http", "server": ("127.0.0.1", 8080)}
    asyncio.run(config.loaded_app(scope, None, None))
    return seen[0]


@pytest.mark.parametrize("balancers, peer, forwarded, client", [
    (("10.0.0.0/24",), "10.0.0.7", b"203.0.113.9", "203.0.113.9"),  # the balancer names the client
    (("10.0.0.0/24",), "192.0.2.4", b"203.0.113.9", "192.0.2.4"),  # anyone else's header is not read
    ((), "127.0.0.1", b"203.0.113.9", "127.0.0.1"),  # no balancer: no one's (uvicorn trusts 127.0.0.1 by default)
    (("10.0.0.0/24",), "10.0.0.7", None, "10.0.0.7"),  # a balancer's own request
])
def test_the_source_is_the_client_a_balancer_names_and_no_one_elses(balancers, peer, forwarded, client):
    assert client_seen(balancers, peer, forwarded)[0] == client
