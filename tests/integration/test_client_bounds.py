"""What one client can hold of a shim, against the real shim under uvicorn (python -m shim, this module's own, with
MAX_CONNECTIONS 8 and MAX_CONNECTIONS_PER_PEER 3 so that filling them is cheap) and the session's tritonserver:

* kept-alive connections that only wait, however many, never keep an authenticated POST on a new connection out: the
  connection idle the longest is closed for it;
* one address beyond its share is 503 too_many_connections while another address is served;
* a pipelining client is served wherever its reads split its headers; a pipelined burst is answered up to the
  bound, then 400 too_many_pipelined_requests in the envelope, and the connection closed.
"""
from __future__ import annotations

import json
import socket

import pytest

from devstack.shim import ShimServer
from tests.raw_http import HEALTH, closed_by_server, read_response, read_until_closed_or, serves_health, status_lines

from .helpers import NAME, SHIM_TOKEN

pytestmark = pytest.mark.triton
MAX_CONNECTIONS = 8
PER_PEER = 3
MAX_PIPELINED_REQUESTS = 16  # shim/server/limits.py


@pytest.fixture(scope="module")
def bounded(triton, tmp_path_factory) -> ShimServer:
    env = {"INTERN_DECISION_API_TOKEN": SHIM_TOKEN, "INTERN_DECISION_PROBE_SECONDS": "3600",
           "INTERN_DECISION_MAX_QUEUE": "2", "INTERN_DECISION_MAX_QUEUE_PER_PEER": "0",
           "INTERN_DECISION_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
           "INTERN_DECISION_MAX_CONNECTIONS_PER_PEER": str(PER_PEER)}
    with ShimServer(triton, env, tmp_path_factory.mktemp("bounded-shim") / "shim.log").serving(60) as server:
        yield server


def connect(shim: ShimServer, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", shim.port), timeout=30, source_address=(source, 0))


def systemone_post() -> bytes:
    body = json.dumps({"model": NAME, "state": "fine",
                       "questions": {"a": {"type": "noul", "instructions": "Fine?"}}}).encode()
    return (b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + SHIM_TOKEN.encode() + b"\r\nContent-Length: " + str(len(body)).encode() +
            b"\r\n\r\n" + body)


def test_kept_alive_connections_that_only_wait_never_keep_an_authenticated_post_out(bounded):
    """MAX_CONNECTIONS kept-alive connections from four addresses, each answered a /health and waiting (under the
    keep-alive timer): the POST on one more connection is scored, and the connection idle the longest gives way."""
    sources = [f"127.0.0.{2 + index % 4}" for index in range(MAX_CONNECTIONS)]
    kept = [connect(bounded, source) for source in sources]
    try:
        for sock in kept:  # kept[0] is idle the longest
            assert serves_health(sock)
        with connect(bounded) as sock:
            sock.sendall(systemone_post())
            answer = read_response(sock)
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["answers"]["a"]["type"] == "noul"
        assert closed_by_server(kept[0])
        assert [serves_health(sock) for sock in kept[1:]] == [True] * (MAX_CONNECTIONS - 1)
    finally:
        for sock in kept:
            sock.close()


def test_one_address_beyond_its_share_is_503_while_another_address_is_served(bounded):
    held = [connect(bounded) for _ in range(PER_PEER)]
    try:
        for sock in held:  # busy: a request begun, its headers not complete
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        with connect(bounded) as sock:
            sock.sendall(systemone_post())
            refused = read_until_closed_or(sock, 1 << 20, seconds=30)
        with connect(bounded, "127.0.0.2") as sock:
            sock.sendall(systemone_post())
            served = read_response(sock)
    finally:
        for sock in held:
            sock.close()
    assert refused.startswith(b"HTTP/1.1 503 "), refused[:300]
    head = refused.partition(b"\r\n\r\n")[0].lower()
    assert b"retry-after: 1" in head and b"connection: close" in head
    assert json.loads(refused.partition(b"\r\n\r\n")[2])["error"]["code"] == "too_many_connections"
    assert served.startswith(b"HTTP/1.1 200 "), served[:300]


def test_a_pipelining_client_is_served_wherever_its_reads_split_its_headers(bounded):
    filler = b"X-Filler: " + b"f" * 6 * 1024 + b"\r\n"
    burst = b"".join(b"GET /health HTTP/1.1\r\nHost: x\r\n" + filler + b"\r\n" for _ in range(12))
    cut = len(burst) - 3 * 1024  # 69 KiB, in the middle of the last request's headers
    with connect(bounded) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(burst[:cut])
        first = sock.recv(65536)  # an answer: the first read is parsed by now
        sock.sendall(burst[cut:] + b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        received = first + read_until_closed_or(sock, 1 << 20, seconds=30)
    assert status_lines(received) == [b"HTTP/1.1 200 OK"] * 13


def test_a_pipelined_burst_is_answered_up_to_the_bound_then_400_and_closed(bounded):
    one = HEALTH
    with connect(bounded) as sock:
        try:
            sock.sendall(one * (256 * 1024 // len(one)))
        except (BrokenPipeError, ConnectionResetError):
            pass
        received = read_until_closed_or(sock, 1 << 20, seconds=30)
    assert status_lines(received) == [b"HTTP/1.1 200 OK"] * (1 + MAX_PIPELINED_REQUESTS) + [b"HTTP/1.1 400 Bad Request"]
    last = received[received.rindex(b"HTTP/1.1 400 "):]
    assert b"connection: close" in last.partition(b"\r\n\r\n")[0].lower()
    assert json.loads(last.partition(b"\r\n\r\n")[2])["error"]["code"] == "too_many_pipelined_requests"
    with connect(bounded) as sock:  # the shim is unhurt
        assert serves_health(sock)
