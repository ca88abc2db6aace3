"""The hostile matrix: attacks on every entry, on two fronts (the real shim over the fake model alone, and behind a
HAProxy rendered from the production template), bounds set small so that each attack passes them at once. Each cell
asserts that the attacker met its bound, that a victim at another address is served 200 and that /health stays fast.
The first half runs ten attacks on every entry, read from the app; the second runs each count and body bound from
1 and 16 addresses. Every address of 127.0.0.0/8 is loopback on Linux: attackers and victims each have their own."""
from __future__ import annotations

import collections
import contextlib
import gzip
import itertools
import json
import math
import random
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest
from starlette.routing import Route

from devstack.haproxy import HAProxyServer
from devstack.process import free_port
from shim import metrics_server
from shim.app import create_app
from shim.playground.routes import PlaygroundPages
from shim.server import MAX_BODY_CHUNKS
from shim.settings import ShimSettings
from tests.raw_http import pipelined, read_until_closed_or, status_lines
from tests.unit import fake_shim
from tests.unit.fake_model import FakeModel
from tests.unit.shim_helpers import AUTH, TOKEN, decide_body, options, shared_body

HEALTH_P99_SECONDS = 0.5
HEALTH_SAMPLES = 100  # the victim's /health answers a cell's p99 is read over, at least
METRICS_PER_SOURCE = metrics_server.MAX_PER_PEER
MAX_BODY_BYTES = 64 * 1024
MAX_DECODE_RATIO = 200
# The production defaults' proportions, an eighth of them: MAX_QUEUE 32, one address's share of connections 64 at
# the shim (MAX_CONNECTIONS_PER_PEER) and at the balancer, MAX_CONNECTIONS 256, the balancer's 64 per shim.
MAX_QUEUE = 4
PER_SOURCE = 8
POSTS_PER_SOURCE = 2  # the balancer's share of POSTs in flight per address: a quarter of MAX_QUEUE, as in production
SHIM_MAX_CONNECTIONS = 32
# The balancer's global connections: room for MANY_SOURCES attacker sources' whole shares and the victims, as
# production's 4096 holds 64 sources' shares of 64.
MANY_SOURCES = 16
BALANCER_MAXCONN = MANY_SOURCES * PER_SOURCE + 32
ATTACK_CLIENTS = PER_SOURCE  # the attacks that send bodies again and again: as many at once as one address may
VICTIM_POSTS = 4  # one after another, in each of the victim's two rounds
VICTIM_TIMEOUT_SECONDS = 1.0  # the fake model answers at once: a victim kept waiting longer is not served
SHIM_ENV = {"INTERN_DECISION_API_TOKEN": TOKEN, "INTERN_DECISION_TRITON_API_KEY": "k" * 32,
            "INTERN_DECISION_MAX_BODY_BYTES": str(MAX_BODY_BYTES), "INTERN_DECISION_MAX_QUEUE": str(MAX_QUEUE),
            "INTERN_DECISION_MAX_DECODE_RATIO": str(MAX_DECODE_RATIO), "INTERN_DECISION_PROBE_SECONDS": "3600",
            "INTERN_DECISION_DRAIN_SECONDS": "0.2", "INTERN_DECISION_HEADER_TIMEOUT_SECONDS": "2",
            "INTERN_DECISION_BODY_TIMEOUT_SECONDS": "1", "INTERN_DECISION_PLAYGROUND": "1",
            # Every attacker here holds the token: the shim runs the opt-in share of the queue per source, a quarter
            # of it, that keeps a hostile token holder's POSTs from holding the queue every caller shares.
            "INTERN_DECISION_MAX_QUEUE_PER_PEER": str(MAX_QUEUE // 4),
            # Each model call takes a few milliseconds, as a real one takes longer: the lock is held, and an
            # attacker's requests keep the queue full while they last.
            "FAKE_CALL_SECONDS": "0.005"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def routes_of_the_app() -> tuple[list[str], list[str]]:
    """The app's POST and GET routes' paths, as the shim under attack is configured: the playground's pages are GETs
    too (not "/", which points to them)."""
    app = create_app(ShimSettings.from_env(SHIM_ENV), FakeModel())
    routes = [route for route in app.routes if isinstance(route, Route)]
    pages = [path for route in app.routes if isinstance(route, PlaygroundPages) for path in route.paths if path != "/"]
    return (sorted(route.path for route in routes if "POST" in route.methods),
            sorted([*(route.path for route in routes if "GET" in route.methods), *pages]))


POSTS, GETS = routes_of_the_app()
GET_ENTRY = "GET"  # the GETs together: the victim asks each


# -- bodies: each POST entry's request around a state, small or hostile

def system_one_body(state, questions: int = 3) -> dict:
    return {"model": "Intern-Decision-4B", "state": state,
            "questions": {f"q{n}": {"type": "noul", "instructions": f"question {n}?"} for n in range(questions)}}


def mcp_call(tool: str, arguments: dict) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def many_items(state) -> dict:
    """A batch whose first item carries the state and every item the most questions of one call."""
    return {"requests": [system_one_body(state, questions=64), *[system_one_body("s", questions=16)] * 7]}


# path -> (the small request around a state, the request around a state that makes the most model calls)
ENTRY_BODIES: dict[str, tuple[Callable[[object], dict], Callable[[object], dict]]] = {
    "/decide": (lambda state: decide_body(state=state),
                lambda state: decide_body(state=state, options=options("a", "b", "c", "d"), orderings="all")),
    "/decide/shared": (lambda state: {**shared_body(2), "state": state},
                       lambda state: {**shared_body(2, options=options("a", "b", "c", "d"), orderings="all"),
                                      "state": state}),
    "/v1/systemone": (lambda state: system_one_body(state),
                      lambda state: system_one_body(state, questions=64)),
    "/v1/systemone/batch": (lambda state: {"requests": [system_one_body(state)]},
                            lambda state: many_items(state)),
    "/mcp": (lambda state: mcp_call("system_one", system_one_body(state)),
             lambda state: mcp_call("system_one_batch", many_items(state))),
}
STATE_MARK = '"@state@"'


def around(body: dict, state_text: str) -> bytes:
    return json.dumps(body, separators=(",", ":")).replace(STATE_MARK, state_text).encode()


def nested_state(size: int, depth: int = 56) -> str:
    """Arrays `depth` deep, repeated to `size` bytes: the costliest state to parse that the depth bound lets in."""
    unit = "[" * (depth - 1) + "]" * (depth - 1)
    return "[" + ",".join([unit] * max(1, size // (len(unit) + 1))) + "]"


def nested_at_size(path: str) -> bytes:
    small = around(ENTRY_BODIES[path][0](STATE_MARK.strip('"')), '""')
    return around(ENTRY_BODIES[path][0](STATE_MARK.strip('"')), nested_state(MAX_BODY_BYTES - len(small) - 64))


def nested_at_ratio(path: str) -> bytes:
    """gzip whose text is nested arrays up to MAX_BODY_BYTES, sent at the decode ratio's limit (padded with noise,
    since nested arrays alone compress past it)."""
    rng = random.Random(path)
    for noise in itertools.count(0, 32):
        pad = "%0*x" % (noise, rng.getrandbits(4 * noise)) if noise else ""
        state = nested_state(MAX_BODY_BYTES - 2048 - noise)[:-1] + f',"{pad}"]'
        text = around(ENTRY_BODIES[path][0](STATE_MARK.strip('"')), state)
        packed = gzip.compress(text, mtime=0)
        if len(packed) * MAX_DECODE_RATIO >= len(text):
            assert len(text) <= MAX_BODY_BYTES
            return packed
    raise AssertionError("unreachable")


def small_costly(path: str) -> bytes:
    """About 8 KiB of the costliest JSON per byte (empty objects), the most the shim parses on its loop."""
    return around(ENTRY_BODIES[path][0](STATE_MARK.strip('"')), "[" + ",".join(["{}"] * 2600) + "]")


def small_valid(path: str) -> bytes:
    return around(ENTRY_BODIES[path][0](STATE_MARK.strip('"')), '{"order":"shipped"}')


def large_state_many_calls(path: str) -> bytes:
    builder = ENTRY_BODIES[path][1]
    small = around(builder(STATE_MARK.strip('"')), '""')
    return around(builder(STATE_MARK.strip('"')), nested_state(MAX_BODY_BYTES - len(small) - 64, depth=40))


def request(method: str, path: str, body: bytes = b"", *, length: int | None = None, encoding: str = "") -> bytes:
    """A request's head (and body) as a client writes it, with the token: every attacker here holds one."""
    headers = [f"{method} {path} HTTP/1.1", "Host: hostile", f"Authorization: Bearer {TOKEN}"]
    if method == "POST" or body or length:
        headers += ["Content-Type: application/json", f"Content-Length: {len(body) if length is None else length}"]
    if encoding:
        headers.append(f"Content-Encoding: {encoding}")
    if path == "/mcp":
        headers += [f"{name}: {value}" for name, value in MCP_HEADERS.items()]
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


# -- the fronts

@dataclass
class Front:
    name: str
    port: int
    metrics_port: int  # the shim's own, behind either front
    # the connections one address's attacks open (8 more): past what the front lets one address hold, and at the
    # shim past what it holds at once, all sources together
    capacity: int
    log_text: Callable[[], str] = lambda: ""  # the balancer's log, where a slow answer's timings are read

    def connect(self, source: str, timeout: float = 5.0, port: int | None = None) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port or self.port))
        return sock

    def client(self, source: str) -> httpx.Client:
        """A victim's client: an answer slower than VICTIM_TIMEOUT_SECONDS is no service."""
        return httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=VICTIM_TIMEOUT_SECONDS,
                            transport=httpx.HTTPTransport(local_address=source))


# The fake shim whose model forgets the requests it was sent: the fake keeps every one for the unit tests to read,
# and thousands of parsed nested states kept alive make the garbage collector stall the loop, which no real model does.
SHIM = """
import collections, sys
from tests.unit import fake_shim

class ForgetfulModel(fake_shim.SlowModel):
    def __init__(self, seconds):
        super().__init__(seconds)
        self.calls, self.request_ids = collections.deque(maxlen=1), collections.deque(maxlen=1)

fake_shim.SlowModel = ForgetfulModel
sys.argv[1:] = ["--port", sys.argv[1]]
fake_shim.main()
"""


def shim_process(folder: Path, port: int, **env: str) -> contextlib.AbstractContextManager:
    return fake_shim.serving(port, {**SHIM_ENV, **env}, folder / "shim.log", program=("-c", SHIM))


@pytest.fixture(scope="module", params=["shim", "balancer"])
def front(request, tmp_path_factory) -> Iterator[Front]:
    folder = tmp_path_factory.mktemp(request.param)
    port, metrics_port = free_port(), free_port()
    if request.param == "shim":
        with shim_process(folder, port, INTERN_DECISION_MAX_CONNECTIONS=str(SHIM_MAX_CONNECTIONS),
                          INTERN_DECISION_MAX_CONNECTIONS_PER_PEER=str(PER_SOURCE),
                          INTERN_DECISION_METRICS_PORT=str(metrics_port)):
            yield Front("shim", port, metrics_port, SHIM_MAX_CONNECTIONS)
        return
    # Behind the balancer every client shares its address: the shim's share is the balancer's (exempt), its
    # connections above the balancer's to it.
    with shim_process(folder, port, INTERN_DECISION_MAX_CONNECTIONS=str(SHIM_MAX_CONNECTIONS),
                      INTERN_DECISION_BALANCER_ADDRESSES="127.0.0.1/32",
                      INTERN_DECISION_METRICS_PORT=str(metrics_port)):
        haproxy = HAProxyServer([("shim", f"127.0.0.1:{port}")], folder / "haproxy", check_inter="200ms",
                                maxconn=BALANCER_MAXCONN, per_source_connections=PER_SOURCE,
                                per_source_requests=100_000, rate_period="10s", server_maxconn=PER_SOURCE,
                                per_source_posts=POSTS_PER_SOURCE,
                                max_body_bytes=MAX_BODY_BYTES)
        try:
            haproxy.start().wait_ready(timeout=30)
            # one address holds PER_SOURCE of the balancer's connections: opening as many as the shim holds is past it
            yield Front("balancer", haproxy.port, metrics_port, SHIM_MAX_CONNECTIONS, haproxy.log_text)
        finally:
            haproxy.stop()


def status_line(sock: socket.socket, seconds: float = 3.0) -> bytes | None:
    """The answer's first line, or what came before the server closed; None when it did neither within `seconds`."""
    deadline = time.monotonic() + seconds
    received = b""
    while b"\r\n" not in received:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            more = sock.recv(1024)
        except socket.timeout:
            return None
        except OSError:
            break
        if not more:
            break
        received += more
    return received


class Met:
    """What the attacker's requests got: each a status code, "closed" (refused as it connected or as it began), or
    "open" (neither answered nor closed)."""

    def __init__(self):
        self.seen: list[int | str] = []
        self.held = 0  # the attacker's connections the server still held at the end
        self._lock = threading.Lock()

    def add(self, outcome: int | str) -> None:
        with self._lock:
            self.seen.append(outcome)

    def note(self, sock: socket.socket | None, seconds: float = 3.0) -> int | str:
        answer = b"" if sock is None else status_line(sock, seconds)
        if answer is None:
            outcome: int | str = "open"
        else:
            status = answer.split(b" ", 2)[1] if answer.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")) else b""
            outcome = int(status) if status.isdigit() else "closed"
        self.add(outcome)
        return outcome


# -- the attacks: each a context manager that holds its attack on the front, from `source`, while the victim is
# watched, and undoes it after

def target(entry: str, index: int) -> tuple[str, str]:
    """The method and path an attacker's request `index` aims at the entry (the GETs in turn)."""
    return ("GET", GETS[index % len(GETS)]) if entry == GET_ENTRY else ("POST", entry)


def body_for(entry: str, make: Callable[[str], bytes]) -> bytes:
    """An attack's body for a POST entry; for the GETs the same body sent on the GET (aimed at /decide's shape)."""
    return make("/decide" if entry == GET_ENTRY else entry)


class Sockets:
    def __init__(self):
        self.held: list[socket.socket] = []

    def open(self, front: Front, source: str, port: int | None = None) -> socket.socket | None:
        try:
            sock = front.connect(source, timeout=1, port=port)
        except OSError:  # the front's backlog full: that connection is not made
            return None
        self.held.append(sock)
        return sock

    def close(self) -> None:
        for sock in self.held:
            with contextlib.suppress(OSError):
                sock.close()


def send_quietly(sock: socket.socket | None, data: bytes) -> None:
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.sendall(data)


@contextlib.contextmanager
def looping(workers: int, step: Callable[[int, threading.Event], None]) -> Iterator[None]:
    """`workers` threads repeating `step` until the attack ends."""
    stop = threading.Event()

    def loop(worker: int) -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                step(worker, stop)

    threads = [threading.Thread(target=loop, args=(worker,), daemon=True) for worker in range(workers)]
    for thread in threads:
        thread.start()
    time.sleep(0.1)  # the attack lands before the victim calls
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


def held_at_the_end(socks: list[socket.socket | None], met: Met, probe: bytes = b"", seconds: float = 0.5) -> None:
    """What each of a source's connections met, read at once from all of them (each sent `probe` first: a silent
    one's first byte): its first answer's status, or "closed", or "open" when the server still holds it."""
    live = {sock: b"" for sock in socks if sock is not None}
    met.seen.extend("closed" for sock in socks if sock is None)
    for sock in live:
        send_quietly(sock, probe)
    ended: set[socket.socket] = set()
    deadline = time.monotonic() + seconds
    with selectors.DefaultSelector() as selector:
        for sock in live:
            selector.register(sock, selectors.EVENT_READ)
        while len(ended) < len(live) and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                try:
                    more = key.fileobj.recv(1 << 16)
                except OSError:
                    more = b""
                live[key.fileobj] += more
                if not more:
                    ended.add(key.fileobj)
                    selector.unregister(key.fileobj)
    for sock, data in live.items():
        status = data.split(b" ", 2)[1] if data.startswith(b"HTTP/1.") else b""
        met.add(int(status) if status.isdigit() else "closed" if sock in ended else "open")
        met.held += sock not in ended


@contextlib.contextmanager
def silent_sockets(front: Front, entry: str, source: str, met: Met) -> Iterator[None]:
    held = Sockets()
    socks = [held.open(front, source) for _ in range(front.capacity + 8)]
    try:
        yield
        held_at_the_end(socks, met, probe=b"G")
    finally:
        held.close()


@contextlib.contextmanager
def idle_keep_alive(front: Front, entry: str, source: str, met: Met) -> Iterator[None]:
    held = Sockets()
    for index in range(front.capacity + 8):
        method, path = target(entry, index)
        sock = held.open(front, source)
        send_quietly(sock, request(method, path, small_valid(path) if method == "POST" else b""))
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.settimeout(2)
                sock.recv(1, socket.MSG_PEEK)  # answered: the answer is left unread
    try:
        yield
        held_at_the_end(held.held, met)
    finally:
        held.close()


@contextlib.contextmanager
def trickled(front: Front, source: str, starts: list[bytes], rest: Callable[[int], bytes], met: Met) -> Iterator[None]:
    """One connection per start, each sent its start, then a byte of `rest` every 0.1 s."""
    held = Sockets()
    socks = [held.open(front, source) for _ in starts]
    for sock, start in zip(socks, starts):
        send_quietly(sock, start)

    def trickle(worker: int, stop: threading.Event) -> None:
        for at in itertools.count():
            if stop.wait(0.1):
                return
            for index, sock in enumerate(socks):
                send_quietly(sock, rest(index)[at % len(rest(index)):][:1])

    try:
        with looping(1, trickle):
            yield
        held_at_the_end(socks, met)
    finally:
        held.close()


def trickled_head(front: Front, entry: str, source: str, met: Met):
    starts = [request(*target(entry, index)).split(b"\r\n\r\n")[0] + b"\r\nX-Trickle: "
              for index in range(front.capacity + 8)]
    return trickled(front, source, starts, lambda index: b"abcdefgh", met)


def trickled_body(front: Front, entry: str, source: str, met: Met):
    bodies = [body_for(entry, small_valid) for _ in range(front.capacity + 8)]
    starts = [request(target(entry, index)[0], target(entry, index)[1], length=len(body))
              for index, body in enumerate(bodies)]
    return trickled(front, source, starts, lambda index: bodies[index], met)


def sending(front: Front, entry: str, source: str, met: Met, make: Callable[[str], bytes], encoding: str = "",
            workers: int = ATTACK_CLIENTS):
    """`workers` clients sending `make`'s body to the entry again and again, each on a new connection."""
    body = body_for(entry, make)

    def send(worker: int, stop: threading.Event) -> None:
        with contextlib.closing(front.connect(source)) as sock:
            sock.sendall(request(*target(entry, worker), body, encoding=encoding))
            met.note(sock, seconds=5)

    return looping(workers, send)


def nested_bodies_at_the_size_limit(front, entry, source, met):
    return sending(front, entry, source, met, nested_at_size)


def nested_bodies_at_the_ratio_limit(front, entry, source, met):
    return sending(front, entry, source, met, nested_at_ratio, encoding="gzip")


def large_state_with_many_calls(front, entry, source, met):
    return sending(front, entry, source, met, large_state_many_calls)


def many_small_bodies(front: Front, entry: str, source: str, met: Met):
    body = body_for(entry, small_costly)

    def send(worker: int, stop: threading.Event) -> None:  # one kept-alive connection, one body after another
        with contextlib.closing(front.connect(source)) as sock:
            while not stop.is_set():
                sock.sendall(request(*target(entry, worker), body))
                if met.note(sock, seconds=5) in ("closed", "open"):
                    return
                read_until_closed_or(sock, 1 << 20, seconds=0.01)

    return looping(ATTACK_CLIENTS, send)


def pipelined_burst(front: Front, entry: str, source: str, met: Met):
    def burst(worker: int, stop: threading.Event) -> None:
        if entry == GET_ENTRY:
            data = pipelined(32)
        else:
            data = request("POST", entry, small_valid(entry)) * 32
        with contextlib.closing(front.connect(source)) as sock:
            sock.sendall(data)
            answered = b""
            try:
                while len(status_lines(answered)) < 32 and not stop.is_set():  # every answer, or the refusal's close
                    if not (more := sock.recv(1 << 20)):
                        break
                    answered += more
            finally:
                for line in status_lines(answered):
                    met.add(int(line.split(b" ")[1]))

    return looping(ATTACK_CLIENTS, burst)


def one_source_holding_the_queue(front: Front, entry: str, source: str, met: Met):
    """Twice its share of POSTs from one address, each admitted with its first buffer (above the balancer's,
    16 KiB), the rest trickled, cut and sent again after 0.5 s (for the GETs, through /decide: they share the
    queue)."""
    path = "/decide" if entry == GET_ENTRY else entry
    length = 48 * 1024

    def hold(worker: int, stop: threading.Event) -> None:
        with contextlib.closing(front.connect(source)) as sock:
            sock.sendall(request("POST", path, length=length) + b" " * (20 * 1024))
            met.note(sock, seconds=0.05)  # refused at once, or "open": admitted, its body still arriving
            for _ in range(5):
                if stop.wait(0.1):
                    return
                sock.sendall(b" ")

    return looping(2 * PER_SOURCE, hold)


ATTACKS = {attack.__name__: attack for attack in (
    silent_sockets, idle_keep_alive, trickled_head, trickled_body, nested_bodies_at_the_size_limit,
    nested_bodies_at_the_ratio_limit, many_small_bodies, pipelined_burst, one_source_holding_the_queue,
    large_state_with_many_calls)}
ENTRIES = [*POSTS, GET_ENTRY]
# The attacks that hold connections: the bound they meet is the source's share of connections, PER_SOURCE held at
# most at the end (the rest refused, closed for another, or timed out), whatever each was answered.
HOLDING = {"silent_sockets", "idle_keep_alive", "trickled_head", "trickled_body"}
HOLDING_MAY_MEET = {200, 408, 429, 503, "closed", "open"}


def first_bounds(attack: str, front: Front, entry: str) -> tuple[set, set]:
    """What the other attacks' requests must meet at least once, and what else they may: a POST past its source's
    share of the queue is 429; a GET's body is read and dropped (at the shim, the 17th of 32 pipelined is 400)."""
    if attack == "one_source_holding_the_queue":
        return {429}, {"open", "closed"}
    if entry != GET_ENTRY:
        return {429}, {200, 422, "closed"}
    if attack == "pipelined_burst":
        return ({400}, {200}) if front.name == "shim" else ({200}, set())
    return {200}, {"closed"}
# -- the victim

_addresses = itertools.count(1)


def addresses() -> tuple[str, str]:
    """An attacker's and a victim's address, both new."""
    cell = next(_addresses)
    network = f"127.{10 + cell // 250}.{cell % 250}"
    return f"{network}.1", f"{network}.2"


class HealthWatch:
    """GET /health every `interval` seconds from the victim's address while the attack runs; each answer's seconds."""

    def __init__(self, front: Front, source: str, interval: float = 0.02):
        self.front, self.source, self.interval = front, source, interval
        self.seconds: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        with self.front.client(self.source) as client:
            while not self._stop.wait(self.interval):
                began = time.monotonic()
                try:
                    status = client.get("/health").status_code
                except httpx.HTTPError as exc:
                    status = repr(exc)
                self.seconds.append(time.monotonic() - began)
                if status != 200:
                    self.failures.append(str(status))

    def __enter__(self) -> "HealthWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(15)

    def p99(self) -> float:
        ordered = sorted(self.seconds)
        return ordered[math.ceil(0.99 * len(ordered)) - 1]


def answered(call: Callable[[], httpx.Response]) -> httpx.Response | str:
    try:
        return call()
    except httpx.HTTPError as exc:
        return repr(exc)


def victim_is_served(front: Front, entry: str, source: str) -> list[str]:
    """What the victim is not served: each GET route, or the POST entry with a small valid body (a 429 is not
    served: each source holds its share of the queue, and a lighter one takes a heavier one's place)."""
    with front.client(source) as client:
        if entry == GET_ENTRY:
            calls = [lambda path=path: client.get(path, headers=AUTH) for path in GETS]
        else:
            headers = {**AUTH, "Content-Type": "application/json", **(MCP_HEADERS if entry == "/mcp" else {})}
            calls = [lambda: client.post(entry, content=small_valid(entry), headers=headers)] * VICTIM_POSTS
        for call in calls:  # up to the first not served
            answer = answered(call)
            if isinstance(answer, str):
                return [answer]
            served = answer.status_code == 200 and not (entry == "/mcp" and answer.json()["result"].get("isError"))
            if not served:
                return [f"{answer.request.url.path}: {answer.status_code} {answer.text[:300]}"]
    return []


def test_the_matrix_has_every_post_route_of_the_app_as_an_entry():
    assert set(ENTRY_BODIES) == set(POSTS), "each POST route needs its attack bodies here, and only those"
    assert {"/health", "/playground"} <= set(GETS) and len(GETS) >= 4


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_victim_at_another_address_is_served_while_an_attack_runs(front, attack, entry):
    if entry not in ENTRY_BODIES and entry != GET_ENTRY:
        pytest.fail(f"{entry} has no attack bodies in this matrix: bound it and add them to ENTRY_BODIES")
    attacker, victim = addresses()
    met = Met()
    unserved, health = watched_while(ATTACKS[attack](front, entry, attacker, met), front, victim,
                                     lambda: victim_is_served(front, entry, victim))
    assert not unserved, unserved
    assert not health.failures, health.failures
    assert len(health.seconds) >= HEALTH_SAMPLES and health.p99() < HEALTH_P99_SECONDS, (
        sorted(health.seconds)[-5:], [line for line in front.log_text().splitlines()
                                      if line.startswith(victim + ":") and "/health" in line][-40:])
    met_seen = sorted(collections.Counter(map(str, met.seen)).items())
    if attack in HOLDING:
        assert met.held <= PER_SOURCE < len(met.seen) and set(met.seen) <= HOLDING_MAY_MEET, (met.held, met_seen)
    else:
        named, also = first_bounds(attack, front, entry)
        assert set(met.seen) & named and set(met.seen) <= named | also, met_seen


# -- bounds met, from 1 and from 16 sources: each attack also records what the attacker met, and the cell asserts it
# met its bound (an answer in the envelope, or its connection refused), not only that the victim was served.



def sources_of(source: str, count: int) -> list[str]:
    """`count` attacker addresses beside `source`'s: the address itself when one."""
    network = source.rsplit(".", 1)[0]
    return [source] if count == 1 else [f"{network}.{10 + n}" for n in range(count)]


def flooding(front: Front, sources: list[str], met: Met, data: Callable[[int], bytes], port: int | None = None):
    """Each worker sends `data(worker)` on a new connection from its source, again and again, and notes the answer;
    as many workers as one address may hold connections, or one per source."""

    def send(worker: int, stop: threading.Event) -> None:
        with contextlib.closing(front.connect(sources[worker % len(sources)], port=port)) as sock:
            send_quietly(sock, data(worker))
            met.note(sock)

    return looping(max(ATTACK_CLIENTS, len(sources)), send)


def header_flood(front: Front, entry: str, sources: list[str], met: Met):
    """13,000 empty headers per request (64 KiB): 15–30 ms of the loop each before the count bound."""
    method, path = target(entry, 0)
    head = request(method, path, small_valid(path) if method == "POST" else b"").split(b"\r\n\r\n")
    flood = head[0] + b"\r\n" + b"a:\r\n" * 13_000 + b"\r\n" + head[1]
    return flooding(front, sources, met, lambda worker: flood)


def chunk_flood(front: Front, entry: str, sources: list[str], met: Met):
    """A body of 1-byte chunks, twice the chunk bound."""
    method, path = target(entry, 0)
    body = body_for(entry, small_valid)
    padded = (body + b" " * (2 * MAX_BODY_CHUNKS))[:2 * MAX_BODY_CHUNKS]
    chunks = b"".join(b"1\r\n%c\r\n" % byte for byte in padded)
    head = request("GET", path).split(b"\r\n\r\n")[0]
    flood = (head.replace(b"GET ", method.encode() + b" ", 1) + b"\r\nContent-Type: application/json\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n")
    return flooding(front, sources, met, lambda worker: flood)


def tokenless(head: bytes) -> bytes:
    return b"\r\n".join(line for line in head.split(b"\r\n") if not line.startswith(b"Authorization:"))


def tokenless_bodies_past_the_size_limit(front: Front, entry: str, sources: list[str], met: Met):
    """No token, twice MAX_BODY_BYTES: refused before a byte of the body is read (or at the balancer, by its size)."""
    body = b" " * (2 * MAX_BODY_BYTES)
    return flooding(front, sources, met, lambda worker: tokenless(request("POST", entry, body)))


def bodies_past_the_size_limit(front: Front, entry: str, sources: list[str], met: Met):
    body = small_valid(entry) + b" " * (2 * MAX_BODY_BYTES)
    return flooding(front, sources, met, lambda worker: request("POST", entry, body))


def gzip_past_the_decode_ratio(front: Front, entry: str, sources: list[str], met: Met):
    """A small gzip that decodes to 16 times MAX_BODY_BYTES: refused as the decoded bytes pass the ratio."""
    body = gzip.compress(small_valid(entry) + b" " * (16 * MAX_BODY_BYTES), mtime=0)
    return flooding(front, sources, met, lambda worker: request("POST", entry, body, encoding="gzip"))


# HTTP/2's connection preface and an empty SETTINGS frame: a client that speaks HTTP/2 without asking first.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def http2_without_upgrade(front: Front, entry: str, sources: list[str], met: Met):
    return flooding(front, sources, met, lambda worker: HTTP2_PREFACE)


def mcp_get_and_delete(front: Front, entry: str, sources: list[str], met: Met):
    """GET /mcp (a client asking for a server-sent event stream) and DELETE /mcp (a session's end), with and
    without the token: no stream is opened and nothing is held."""
    def data(worker: int) -> bytes:
        head = request("GET", "/mcp").replace(b"GET ", (b"GET ", b"DELETE ")[worker % 2], 1)
        return head if worker % 4 < 2 else tokenless(head.split(b"\r\n\r\n")[0]) + b"\r\n\r\n"

    return flooding(front, sources, met, data)


@contextlib.contextmanager
def trickling_heads_past_the_share(front: Front, entry: str, sources: list[str], met: Met) -> Iterator[None]:
    """Each source holds its share of trickled heads and one more: with 16 sources, far more than the front's
    connections. The head past each source's share is refused (a 503 at its first byte at the shim; refused as it
    connects at the balancer), and at the shim a new source takes the heaviest source's oldest head."""
    starts = [request(*target(entry, index)).split(b"\r\n\r\n")[0] + b"\r\nX-Trickle: "
              for index in range(PER_SOURCE)]
    held = Sockets()
    extra = []
    for each in sources:
        for start in starts:
            send_quietly(held.open(front, each), start)
    time.sleep(0.1)
    for each in sources:  # one past the share
        sock = held.open(front, each)
        send_quietly(sock, starts[0])
        extra.append(sock)

    def trickle(worker: int, stop: threading.Event) -> None:
        while not stop.wait(0.1):
            for sock in held.held:
                send_quietly(sock, b"a")

    try:
        with looping(1, trickle):
            yield
    finally:
        for sock in extra:
            met.note(sock)
        held.close()


POST_ENTRY = "/v1/systemone"
SHARE = 429  # past the source's POSTs in flight (the balancer's share, or the shim's queue share)
# Each attack, the entries it aims at, and by front what its requests must meet at least once (the bound it names)
# and what else they may meet. HAProxy refuses past 100 headers itself (400) and a declared body past its size
# (413). It forwards a chunked body re-chunked by its buffers, so no chunk bound meets a chunk flood there: a GET is
# answered, a POST meets its share or the shim's body bounds, and the victim's side is what such a cell holds.
# "closed" at the balancer: a connection past the source's share, refused as it connects.
COUNT_ATTACKS = {
    header_flood: ([GET_ENTRY, POST_ENTRY], {"shim": ({431}, set()), "balancer": ({400}, {"closed"})}),
    chunk_flood: ([GET_ENTRY, POST_ENTRY], {"shim": ({413}, {SHARE}),
                                            "balancer": ({200, 413, SHARE, "closed"}, {422})}),
    trickling_heads_past_the_share: ([GET_ENTRY, POST_ENTRY], {"shim": ({503, "closed"}, set()),
                                                               "balancer": ({"closed"}, set())}),
    tokenless_bodies_past_the_size_limit: ([POST_ENTRY, "/mcp"], {"shim": ({401}, set()),
                                                                  "balancer": ({401, 413}, {"closed"})}),
    bodies_past_the_size_limit: ([POST_ENTRY, "/mcp"], {"shim": ({413}, {SHARE}),
                                                        "balancer": ({413}, {SHARE, "closed"})}),
    gzip_past_the_decode_ratio: ([POST_ENTRY, "/mcp"], {"shim": ({413}, {SHARE}),
                                                        "balancer": ({413}, {SHARE, "closed"})}),
    http2_without_upgrade: ([GET_ENTRY], {"shim": ({400}, set()), "balancer": ({400, "closed"}, set())}),
    mcp_get_and_delete: (["/mcp"], {"shim": ({401, 405}, set()), "balancer": ({401, 405}, {"closed"})}),
}
COUNT_CELLS = [pytest.param(attack.__name__, entry, sources, id=f"{attack.__name__}-{entry}-{sources}")
               for attack, (entries, _) in COUNT_ATTACKS.items() for entry in entries for sources in (1, MANY_SOURCES)]
BOUNDS = {attack.__name__: bounds for attack, (_, bounds) in COUNT_ATTACKS.items()}


def watched_while(attack: contextlib.AbstractContextManager, front: Front, victim: str,
                  served: Callable[[], list[str]]) -> tuple[list[str], HealthWatch]:
    """Runs the attack while the victim is served and /health watched from its address over HEALTH_SAMPLES."""
    with attack, HealthWatch(front, victim, 0.001) as health:
        unserved = served()
        while len(health.seconds) < HEALTH_SAMPLES and not unserved:
            time.sleep(0.1)
        unserved = unserved or served()
    return unserved, health


def assert_bounded(unserved: list[str], health: HealthWatch, met: Met, bounds: tuple[set, set]) -> None:
    """The victim served, /health quick, and the attacker met its bound at least once and nothing it may not meet."""
    named, also = bounds
    assert not unserved, unserved
    assert not health.failures, health.failures
    assert len(health.seconds) >= HEALTH_SAMPLES and health.p99() < HEALTH_P99_SECONDS, sorted(health.seconds)[-5:]
    assert set(met.seen) & named and set(met.seen) <= named | also, met.seen


@pytest.mark.parametrize("attack, entry, sources", COUNT_CELLS)
def test_an_attacker_meets_its_bound_while_a_victim_is_served(front, attack, entry, sources):
    attacker, victim = addresses()
    met = Met()
    run_attack = {each.__name__: each for each in COUNT_ATTACKS}[attack]
    attacking = run_attack(front, entry, sources_of(attacker, sources), met)
    unserved, health = watched_while(attacking, front, victim, lambda: victim_is_served(front, entry, victim))
    assert_bounded(unserved, health, met, BOUNDS[attack][front.name])


def scrape(front: Front, source: str) -> list[str]:
    """What a scrape of the shim's metrics from `source` is not served."""
    try:
        with httpx.Client(timeout=VICTIM_TIMEOUT_SECONDS,
                          transport=httpx.HTTPTransport(local_address=source)) as client:
            answer = client.get(f"http://127.0.0.1:{front.metrics_port}/metrics")
    except httpx.HTTPError as exc:
        return [repr(exc)]
    return [] if answer.status_code == 200 and b"intern_decision_shim" in answer.content else [str(answer.status_code)]


@pytest.mark.parametrize("front", ["shim"], indirect=True)
@pytest.mark.parametrize("sources", [1, MANY_SOURCES])
def test_an_attacker_meets_the_metrics_ports_bounds_while_a_scrape_is_served(front, sources):
    """Each source holds its share of the metrics port's connections half-sent, and one more: past its share it is
    refused (503), and when the port is full the heaviest source's oldest waiting connection gives way (closed)."""
    attacker, victim = addresses()
    met = Met()

    @contextlib.contextmanager
    def holding() -> Iterator[None]:
        held, extra = Sockets(), []
        for each in sources_of(attacker, sources):
            for _ in range(METRICS_PER_SOURCE):
                send_quietly(held.open(front, each, port=front.metrics_port), b"GET /metr")
            extra.append(front.connect(each, port=front.metrics_port))
        time.sleep(0.1)
        try:
            yield
        finally:
            for sock in extra:
                met.note(sock)
            held.close()

    unserved, health = watched_while(holding(), front, victim, lambda: scrape(front, victim))
    assert_bounded(unserved, health, met, ({503, "closed"}, set()))
