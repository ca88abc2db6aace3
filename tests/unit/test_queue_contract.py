"""The contract's queue through the real shim server (uvicorn, shim/server/) over the fake model, at the defaults: one
address may hold all MAX_QUEUE places and the next POST is 429 at once, before its body; a heavy client honouring
Retry-After is answered in full; a caller admitted behind another's backlog is served within two model calls."""
from __future__ import annotations

import concurrent.futures
import contextlib
import json
import selectors
import socket
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from devstack.process import free_port
from shim.settings import ShimSettings
from tests.raw_http import read_response
from tests.unit import fake_shim
from tests.unit.shim_helpers import AUTH, TOKEN, decide_body

MAX_QUEUE = ShimSettings.max_queue  # the default: 32
CALL_SECONDS = 0.05


@pytest.fixture(scope="module")
def port(tmp_path_factory) -> Iterator[int]:
    with shim(tmp_path_factory.mktemp("queue"), CALL_SECONDS) as port:
        yield port


@contextlib.contextmanager
def shim(folder: Path, call_seconds: float) -> Iterator[int]:
    """The real server at its default bounds, each model call taking `call_seconds`; its port."""
    port = free_port()
    env = {"INTERN_DECISION_API_TOKEN": TOKEN, "INTERN_DECISION_TRITON_API_KEY": "k" * 32,
           "INTERN_DECISION_PROBE_SECONDS": "3600", "INTERN_DECISION_METRICS_PORT": "0",
           "FAKE_CALL_SECONDS": str(call_seconds)}
    with fake_shim.serving(port, env, folder / "shim.log"):
        yield port


def body(number: int) -> bytes:
    return json.dumps(decide_body(id=f"d{number}", state={"n": number})).encode()


def head(length: int) -> bytes:
    return (f"POST /decide HTTP/1.1\r\nHost: shim\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n").encode()


def answered_within(socks: list[socket.socket], seconds: float) -> list[socket.socket]:
    """The sockets on which the server sent something (or closed) within `seconds`."""
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            selector.register(sock, selectors.EVENT_READ)
        return [key.fileobj for key, _ in selector.select(seconds)]


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def test_one_address_holds_every_place_and_the_next_post_is_refused_at_once_before_its_body(port):
    held = []
    for number in range(MAX_QUEUE):  # admitted from their headers alone: each body still owed
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(head(len(body(number))))
        held.append(sock)
    time.sleep(0.3)
    assert answered_within(held, 0.2) == [], "a POST of one address was answered before its body was sent"
    late = socket.create_connection(("127.0.0.1", port), timeout=10)
    began = time.monotonic()
    late.sendall(head(len(body(MAX_QUEUE))))  # its body is never sent: the refusal comes before it
    refused = read_response(late)
    seconds = time.monotonic() - began
    assert status_of(refused) == 429 and seconds < 0.1, (refused, seconds)
    assert json.loads(refused.partition(b"\r\n\r\n")[2])["error"]["code"] == "busy"
    for number, sock in enumerate(held):
        sock.sendall(body(number))
    assert [status_of(read_response(sock)) for sock in held] == [200] * MAX_QUEUE
    for sock in [*held, late]:
        sock.close()


def test_a_heavy_client_at_twice_the_queue_honouring_retry_after_is_answered_in_full(port):
    """A thread pool of 2 × MAX_QUEUE from one address, each retrying a 429 after its Retry-After: every request is
    answered 200, none given up."""
    refusals = 0

    def one(client: httpx.Client, number: int) -> int:
        nonlocal refusals
        for _ in range(30):
            answer = client.post("/decide", content=body(number), headers={**AUTH, "Content-Type": "application/json"})
            if answer.status_code != 429:
                return answer.status_code
            refusals += 1
            time.sleep(float(answer.headers["Retry-After"]))
        return 429

    limits = httpx.Limits(max_connections=2 * MAX_QUEUE)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, limits=limits) as client:
        with concurrent.futures.ThreadPoolExecutor(2 * MAX_QUEUE) as pool:
            statuses = list(pool.map(lambda number: one(client, number), range(2 * MAX_QUEUE)))
    assert statuses == [200] * (2 * MAX_QUEUE), statuses
    assert refusals > 0, "the queue was never full: the test did not reach the 429 it is about"


def test_a_caller_admitted_behind_another_callers_backlog_is_served_within_two_model_calls(port):
    """24 requests of one address, then one of another: FIFO would keep it for all 24 calls (1.2 s); in turn it
    waits for the call being scored and is scored next."""
    backlog = []
    for number in range(24):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=("127.0.0.2", 0))
        sock.sendall(head(len(body(number))) + body(number))
        backlog.append(sock)
    time.sleep(0.1)  # the backlog admitted, its first calls scored
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                      transport=httpx.HTTPTransport(local_address="127.0.0.3")) as victim:
        before = len(answered_within(backlog, 0))
        assert before <= 12, "the backlog was mostly answered before the victim came: nothing to be behind"
        began = time.monotonic()
        answer = victim.post("/decide", content=body(99), headers={**AUTH, "Content-Type": "application/json"})
        waited = time.monotonic() - began
    assert answer.status_code == 200
    assert waited < 2 * CALL_SECONDS + 0.15, f"the victim waited {waited:.2f} s: more than two model calls"
    assert len(answered_within(backlog, 0)) - before <= 2, "more of the backlog was scored before the victim"
    assert [status_of(read_response(sock)) for sock in backlog] == [200] * 24
    for sock in backlog:
        sock.close()
