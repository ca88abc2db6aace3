"""The connections' bookkeeping (shim/server/roster.py) as pure logic; the server's protocol fed by hand, read by
read, for what the read boundaries decide (header bytes per request, the pipeline's bound); the settings that set
them; and the metrics server's deadline and bound over real sockets."""
from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import urllib.request
from collections import deque

import pytest
import uvicorn
from uvicorn.server import ServerState

from shim import metrics, server
from shim import metrics_server as metrics_http
from shim.server.roster import ConnectionAdmission, Roster, address_matcher
from shim.settings import ShimSettings

SECRETS = {"INTERN_DECISION_API_TOKEN": "t" * 32, "INTERN_DECISION_TRITON_API_KEY": "k" * 32}


# --- the roster: who gives way, and when a request is refused


def roster(**limits) -> Roster:
    return Roster(**limits)


def test_idle_connections_give_way_oldest_idle_first():
    table = roster(total=3)
    for name in "abc":
        table.opened(name, "10.0.0.1")
    for name in "cab":  # c idle the longest, then a, then b
        table.request_began(name)
        table.request_answered(name)
    table.opened("d", "10.0.0.2")
    table.request_began("d")
    verdict = table.admit("d")
    assert verdict.admitted and verdict.evict == ("c",)
    assert len(table) == 3 and not table.is_idle("d") and table.is_idle("a")


def test_a_connection_opened_and_silent_is_idle_since_its_opening():
    table = roster(total=2)
    table.opened("silent", "10.0.0.1")
    table.opened("kept", "10.0.0.1")
    table.request_began("kept")
    table.request_answered("kept")  # idle after the silent one
    table.opened("new", "10.0.0.2")
    table.request_began("new")
    assert table.admit("new").evict == ("silent",)


def test_busy_connections_never_give_way_and_a_refusal_closes_nothing():
    table = roster(total=2)
    for name in ("busy", "idle"):
        table.opened(name, "10.0.0.1")
    table.request_began("busy")
    table.opened("pipelining", "10.0.0.1")
    table.request_began("pipelining")
    table.request_began("pipelining")
    table.request_answered("pipelining")  # one of its two requests still unanswered: busy
    table.opened("new", "10.0.0.2")
    table.request_began("new")
    verdict = table.admit("new")  # four open, two over: only one idle
    assert not verdict.admitted and verdict.over == "total" and verdict.evict == ()
    assert len(table) == 4 and table.is_idle("idle")


def test_within_the_limits_nothing_gives_way():
    table = roster(total=4, per_peer=2)
    table.opened("a", "10.0.0.1")
    table.opened("b", "10.0.0.1")
    table.request_began("b")
    assert table.admit("b") == type(table.admit("b"))(True)
    assert table.is_idle("a")


def test_a_peer_over_its_share_loses_its_own_idle_connections_first_never_anothers():
    table = roster(total=10, per_peer=2)
    table.opened("other", "10.0.0.9")  # idle the longest, but not this peer's
    for name in ("mine-1", "mine-2", "mine-3"):
        table.opened(name, "10.0.0.1")
    table.request_began("mine-3")
    verdict = table.admit("mine-3")
    assert verdict.admitted and verdict.evict == ("mine-1",)
    assert table.held_by("10.0.0.1") == 2 and table.held_by("10.0.0.9") == 1


def test_a_peer_whose_connections_are_all_busy_is_refused_while_another_peer_is_admitted():
    table = roster(total=10, per_peer=2)
    for name in ("mine-1", "mine-2", "mine-3"):
        table.opened(name, "10.0.0.1")
        table.request_began(name)
    verdict = table.admit("mine-3")
    assert not verdict.admitted and verdict.over == "peer"
    table.opened("theirs", "10.0.0.2")
    table.request_began("theirs")
    assert table.admit("theirs").admitted


def test_a_head_beginning_past_its_peers_share_is_refused_as_it_begins_and_leaves_the_total_to_others():
    # heads trickled over many connections never complete: the share is asked at each request's first byte
    table = roster(total=6, per_peer=2)
    for name in ("head-1", "head-2", "head-3", "head-4"):
        table.opened(name, "10.0.0.1")
    table.request_began("head-1")
    first = table.admit_peer("head-1")
    assert first.admitted and first.evict == ("head-2", "head-3")  # its own idle give way first, oldest first
    table.request_began("head-4")
    assert table.admit_peer("head-4") == ConnectionAdmission(True)
    assert table.held_by("10.0.0.1") == 2
    table.opened("victim", "10.0.0.2")
    table.request_began("victim")
    assert table.admit("victim").admitted


def test_a_peer_with_every_connection_busy_is_refused_at_a_heads_first_byte():
    table = roster(total=10, per_peer=2)
    for name in ("busy-1", "busy-2", "late"):
        table.opened(name, "10.0.0.1")
    table.request_began("busy-1")
    table.request_began("busy-2")
    table.request_began("late")
    verdict = table.admit_peer("late")
    assert not verdict.admitted and verdict.over == "peer" and verdict.evict == ()


def test_both_limits_at_once_close_the_peers_own_idle_and_never_a_lighter_sources():
    table = roster(total=2, per_peer=2)
    table.opened("other", "10.0.0.9")
    table.opened("mine-1", "10.0.0.1")
    table.opened("mine-2", "10.0.0.1")
    table.opened("mine-3", "10.0.0.1")
    table.request_began("mine-3")
    verdict = table.admit("mine-3")  # the peer holds 3 of 2, the server 4 of 2
    assert verdict.admitted and verdict.evict == ("mine-1", "mine-2")  # "other", older and lighter, stays
    assert len(table) == 2 and table.held_by("10.0.0.1") == 1 and table.held_by("10.0.0.9") == 1


def test_a_heavier_source_is_refused_rather_than_close_a_lighter_sources_kept_alive_connection():
    table = roster(total=2, per_peer=4)
    table.opened("light", "10.0.0.9")  # a victim's kept-alive connection, idle between its requests
    table.opened("heavy-1", "10.0.0.1")
    table.request_began("heavy-1")
    assert table.admit("heavy-1").admitted
    table.opened("heavy-2", "10.0.0.1")
    table.request_began("heavy-2")
    verdict = table.admit("heavy-2")  # the server holds 3 of 2; only the light source's idle one could go
    assert not verdict.admitted and verdict.over == "total"
    assert table.is_idle("light") and len(table) == 3


def heads(table: Roster, source: str, count: int, prefix: str) -> list[str]:
    """`count` connections from `source`, each with a head begun (busy, not admitted)."""
    names = [f"{prefix}-{n}" for n in range(count)]
    for name in names:
        table.opened(name, source)
        table.request_began(name)
        assert table.admit_peer(name).admitted
    return names


def test_a_full_pool_of_heads_gives_way_to_a_new_source_from_the_heaviest_source_oldest_first():
    """4 sources × their whole share of trickled heads filled MAX_CONNECTIONS: every request from a fifth was 503."""
    table = roster(total=8, per_peer=3)
    a = heads(table, "10.0.0.1", 3, "a")
    heads(table, "10.0.0.2", 2, "b")
    heads(table, "10.0.0.3", 3, "c")
    table.opened("victim", "10.0.0.9")
    table.request_began("victim")
    verdict = table.admit("victim")
    assert verdict.admitted and verdict.evict == (a[0],)  # 10.0.0.1 and .3 hold 3 each: the first found, oldest
    assert table.held_by("10.0.0.1") == 2 and len(table) == 8


def test_a_source_never_takes_from_one_no_heavier_than_itself_nor_an_admitted_request():
    table = roster(total=4, per_peer=3)
    mine = heads(table, "10.0.0.1", 2, "mine")
    theirs = heads(table, "10.0.0.2", 2, "theirs")
    table.admit(theirs[0])  # admitted: the app has it, it never gives way
    table.opened("more", "10.0.0.1")
    table.request_began("more")
    assert table.admit("more") == ConnectionAdmission(False, over="total")  # 10.0.0.2 holds 2, this source 3 with it
    table.closed("more")
    table.closed(mine[0])
    heads(table, "10.0.0.2", 1, "late")  # 10.0.0.2 holds 3 again, one of them admitted
    table.opened("new", "10.0.0.7")
    table.request_began("new")
    verdict = table.admit("new")
    assert verdict.admitted and verdict.evict == (theirs[1],)


@pytest.mark.parametrize("peer, same, other", [
    ("2001:db8:1:2::5", "2001:db8:1:2:ffff::9", "2001:db8:1:3::5"),
    ("10.0.0.1", "::ffff:10.0.0.1", "10.0.0.2"),
    ("fe80::1%eth0", "fe80::2", "fe80:0:0:1::1"),
])
def test_an_ipv6_source_is_its_64_and_an_ipv4_mapped_address_is_the_ipv4_one(peer, same, other):
    table = roster(per_peer=2)
    table.opened("a", peer)
    table.opened("b", same)
    table.opened("c", other)
    assert table.held_by(peer) == table.held_by(same) == 2 and table.held_by(other) == 1
    table.request_began("c")
    assert table.admit_peer("c").admitted
    table.request_began("b")
    table.request_began("a")
    table.opened("d", same)
    table.request_began("d")
    assert not table.admit_peer("d").admitted  # the /64's share of 2 is taken, whatever the address in it


def test_the_per_peer_count_follows_opens_and_closes_and_forgets_an_empty_peer():
    table = roster(per_peer=5)
    table.opened("a", "10.0.0.1")
    table.opened("b", "10.0.0.1")
    table.closed("a")
    table.closed("a")  # closed twice (evicted, then lost): counted once
    assert table.held_by("10.0.0.1") == 1
    table.closed("b")
    assert table.held_by("10.0.0.1") == 0 and table._per_peer == {}


def test_an_exempt_peer_counts_towards_the_total_only():
    table = roster(total=3, per_peer=1, exempt=address_matcher(["10.1.0.0/16"]))
    for name in ("lb-1", "lb-2", "lb-3"):
        table.opened(name, "10.1.2.3")
        table.request_began(name)
    assert table.admit("lb-3").admitted and table.held_by("10.1.2.3") == 0
    table.opened("lb-4", "10.1.2.3")
    table.request_began("lb-4")
    assert table.admit("lb-4").over == "total"


def test_without_a_per_peer_share_no_peer_is_counted():
    table = roster(total=5)
    table.opened("a", "10.0.0.1")
    assert table.held_by("10.0.0.1") == 0


@pytest.mark.parametrize("peer, matches", [
    ("10.0.0.7", True), ("10.0.1.7", True), ("10.0.2.7", False), ("::ffff:10.0.0.7", True), ("fd00::1", True),
    ("fe80::1%eth0", False), (None, True), ("/run/shim.sock", True)])
def test_an_address_matcher_reads_addresses_and_networks(peer, matches):
    assert address_matcher(["10.0.0.7", "10.0.1.0/24", "fd00::/8"])(peer) is matches


# --- the settings


def test_the_per_peer_share_is_64_by_default_and_0_turns_it_off():
    assert ShimSettings.from_env(SECRETS).max_connections_per_peer == 64
    assert server.ConnectionLimits.of(ShimSettings.from_env(SECRETS)).max_per_peer == 64
    off = ShimSettings.from_env({**SECRETS, "INTERN_DECISION_MAX_CONNECTIONS_PER_PEER": "0"})
    assert server.ConnectionLimits.of(off).max_per_peer is None


@pytest.mark.parametrize("name, value", [("MAX_CONNECTIONS_PER_PEER", "-1"), ("MAX_CONNECTIONS_PER_PEER", "few"),
                                         ("BALANCER_ADDRESSES", "10.0.0.1, haproxy"),
                                         ("BALANCER_ADDRESSES", "10.0.0.0/33")])
def test_a_bad_connection_setting_is_refused_by_name(name, value):
    with pytest.raises(ValueError, match=f"INTERN_DECISION_{name} must be"):
        ShimSettings.from_env({**SECRETS, f"INTERN_DECISION_{name}": value})


def test_balancer_addresses_are_read_as_networks():
    settings = ShimSettings.from_env({**SECRETS, "INTERN_DECISION_BALANCER_ADDRESSES": " 10.0.0.7 ,172.18.0.0/16"})
    assert settings.balancer_addresses == ("10.0.0.7/32", "172.18.0.0/16")
    assert ShimSettings.from_env(SECRETS).balancer_addresses == ()


# --- the protocol, fed read by read


class FakeTransport(asyncio.Transport):
    def __init__(self):
        super().__init__()
        self.written = bytearray()
        self.closed = False
        self.reading = True
        self.eof = False  # our side closed: the answer is complete, the client's side lingers

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8080)}.get(name, default)

    def write(self, data) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    @property
    def ended(self) -> bool:
        return self.eof or self.closed

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class DepthRecorder(deque):
    """uvicorn's pipeline, recording the most requests it ever held."""
    deepest = 0

    def appendleft(self, item) -> None:
        super().appendleft(item)
        self.deepest = max(self.deepest, len(self))


def health_app(release: asyncio.Event | None = None):
    async def app(scope, receive, send) -> None:
        if release is not None:
            await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


def protocol_for(app) -> tuple[server.BoundedConnectionProtocol, FakeTransport]:
    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    limits = server.ConnectionLimits(max_connections=8)
    protocol = server.BoundedConnectionProtocol(config=config, server_state=ServerState(), app_state={},
                                                limits=limits, roster=limits.roster())
    transport = FakeTransport()
    protocol.connection_made(transport)
    protocol.pipeline = DepthRecorder()
    return protocol, transport


def pipelined(count: int, header_bytes: int = 0) -> bytes:
    filler = b"X-Filler: " + b"f" * header_bytes + b"\r\n" if header_bytes else b""
    return b"".join(b"GET /health HTTP/1.1\r\nHost: x\r\n" + filler + b"\r\n" for _ in range(count))


async def settled(condition, rounds: int = 2000) -> None:
    """Let the loop run the answers' tasks until `condition()` (a bounded number of loop turns, not a time)."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the protocol never got there")


def statuses_in(data: bytes) -> list[bytes]:
    return [line.split(b"\r\n")[0] for line in data.split(b"HTTP/1.1 ")[1:]]


def test_a_burst_of_pipelined_requests_never_queues_more_than_the_bound():
    async def scenario():
        release = asyncio.Event()
        protocol, transport = protocol_for(health_app(release))
        burst = pipelined(256 * 1024 // len(pipelined(1)))  # 7,000-odd requests in one read
        protocol.data_received(burst)
        queued_after_the_read = len(protocol.pipeline)
        protocol.data_received(burst)  # read after the refusal: dropped
        release.set()
        await settled(lambda: transport.ended)
        return protocol, transport, queued_after_the_read

    protocol, transport, queued = asyncio.run(scenario())
    assert queued == protocol.pipeline.deepest == server.MAX_PIPELINED_REQUESTS
    assert protocol._linger is not None  # the client's side closes after LINGER_SECONDS; nothing more is parsed
    statuses = statuses_in(bytes(transport.written))
    assert statuses == [b"200 OK"] * (1 + server.MAX_PIPELINED_REQUESTS) + [b"400 Bad Request"]
    error = json.loads(bytes(transport.written).rpartition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "too_many_pipelined_requests"


def test_header_bytes_are_counted_per_request_not_per_read():
    """72 KiB of pipelined requests of 6 KiB of headers each, the read ending in the middle of one's headers: every
    request is under MAX_HEADER_BYTES, and is answered."""
    async def scenario():
        protocol, transport = protocol_for(health_app())
        burst = pipelined(12, header_bytes=6 * 1024)
        cut = len(burst) - 3 * 1024
        protocol.data_received(burst[:cut])
        assert cut > server.MAX_HEADER_BYTES and not transport.ended
        await settled(lambda: len(statuses_in(bytes(transport.written))) >= 11)
        protocol.data_received(burst[cut:])
        await settled(lambda: len(statuses_in(bytes(transport.written))) == 12)
        return transport

    transport = asyncio.run(scenario())
    assert statuses_in(bytes(transport.written)) == [b"200 OK"] * 12 and not transport.ended


@pytest.mark.parametrize("piece", [b"X-Filler: " + b"f" * 1000 + b"\r\n", b"f" * 16 * 1024],
                         ids=["many-headers", "one-endless-value"])
def test_one_requests_headers_over_the_limit_are_431_however_they_are_read(piece):
    async def scenario():
        protocol, transport = protocol_for(health_app())
        protocol.data_received(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Long: ")
        fed = 0
        while not transport.ended:
            assert fed <= server.MAX_HEADER_BYTES + 2 * len(piece) + 1024, "never refused"
            protocol.data_received(piece)
            fed += len(piece)
        return transport

    transport = asyncio.run(scenario())
    assert bytes(transport.written).startswith(b"HTTP/1.1 431 ")
    assert json.loads(bytes(transport.written).partition(b"\r\n\r\n")[2])["error"]["code"] == \
        "request_header_too_large"


def test_headers_over_the_limit_behind_a_request_in_progress_wait_for_its_answer():
    async def scenario():
        release = asyncio.Event()
        protocol, transport = protocol_for(health_app(release))
        protocol.data_received(pipelined(1) + b"GET /health HTTP/1.1\r\nX-Long: " + b"f" * 70000 + b"\r\n")
        protocol.data_received(b"X-Next: 1\r\n")
        assert protocol._refused and not transport.ended and transport.written == b""  # it waits its turn
        release.set()
        await settled(lambda: transport.ended)
        return transport

    assert statuses_in(bytes(asyncio.run(scenario()).written)) == [b"200 OK", b"431 Request Header Fields Too Large"]


# --- the metrics server: a deadline per connection, and a bound on connections at once


@pytest.fixture()
def metrics_server():
    served = metrics_http.serve(metrics.ShimMetrics().registry, "127.0.0.1", 0, deadline_seconds=0.5, max_connections=2)
    try:
        yield served.server_address[:2]
    finally:
        served.shutdown()
        served.server_close()


def closed_within(sock: socket.socket, seconds: float) -> bytes:
    sock.settimeout(seconds)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def scrape(address) -> int:
    with urllib.request.urlopen(f"http://{address[0]}:{address[1]}/metrics", timeout=10) as response:
        assert b"process_cpu_seconds_total" in response.read()
        return response.status


def test_the_metrics_server_closes_a_half_sent_request_at_its_deadline(metrics_server):
    with socket.create_connection(metrics_server, timeout=10) as sock:
        sock.sendall(b"GET /metr")
        assert closed_within(sock, 10) == b""  # unbounded, this would wait for the rest forever
    assert scrape(metrics_server) == 200


def test_the_metrics_server_closes_a_request_trickled_past_its_deadline(metrics_server):
    with socket.create_connection(metrics_server, timeout=10) as sock:
        started = time.monotonic()
        try:
            while time.monotonic() - started < 10:
                sock.sendall(b"X")  # a byte well within any per-read timeout
                time.sleep(0.1)
        except OSError:
            pass
        assert time.monotonic() - started < 10, "still reading the trickle"


def test_the_metrics_server_answers_503_beyond_its_connections_when_none_gives_way(metrics_server):
    """Full, and the newcomer's source holds as many as any other: nothing gives way."""
    held = [socket.create_connection(metrics_server, timeout=10, source_address=(f"127.0.0.{2 + n}", 0))
            for n in range(2)]  # from two addresses: the bound at once, not one address's share
    try:
        for sock in held:
            sock.sendall(b"GET /")
        time.sleep(0.1)
        with socket.create_connection(metrics_server, timeout=10, source_address=("127.0.0.2", 0)) as sock:
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            refused = closed_within(sock, 10)
    finally:
        for sock in held:
            sock.close()
    assert refused.startswith(b"HTTP/1.0 503 ")
    deadline = time.monotonic() + 10
    while True:  # the held ones' threads end at their deadline, or once they see the close
        try:
            assert scrape(metrics_server) == 200
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def scrape_from(address, source: str) -> bytes:
    with socket.create_connection(address, timeout=10, source_address=(source, 0)) as sock:
        sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        return closed_within(sock, 10)


@pytest.mark.parametrize("sources", [2, 16])
def test_a_full_metrics_server_takes_a_lighter_sources_scrape_from_the_heaviest_sources_oldest_connection(sources):
    """Attackers at `sources` addresses hold every connection, half-sent: a scrape from another address is served at
    once, in the place of the oldest connection of a source holding the most."""
    served = metrics_http.serve(metrics.ShimMetrics().registry, "127.0.0.1", 0, deadline_seconds=9, max_connections=4)
    address = served.server_address[:2]
    attackers = [f"127.0.9.{1 + n}" for n in range(sources)]
    held = [socket.create_connection(address, timeout=10, source_address=(attackers[n % sources], 0))
            for n in range(2 * sources)]
    try:
        for sock in held:
            with contextlib.suppress(OSError):
                sock.sendall(b"GET /")
        time.sleep(0.2)
        started = time.monotonic()
        assert scrape_from(address, "127.0.8.1").startswith(b"HTTP/1.0 200 ")
        assert time.monotonic() - started < 1
        assert closed_within(held[0], 5) == b""  # the first of the sources that each hold the most
    finally:
        for sock in held:
            sock.close()
        served.shutdown()
        served.server_close()


def test_a_metrics_connection_being_answered_never_gives_way():
    """The heaviest source's oldest connection is being answered (its request read whole): its newer, half-sent one
    gives way instead."""
    served = metrics_http.serve(metrics.ShimMetrics().registry, "127.0.0.1", 0, deadline_seconds=9, max_connections=2)

    def slow(environ, start_response):
        time.sleep(0.5)
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    served.set_app(slow)
    address = served.server_address[:2]
    try:
        with socket.create_connection(address, timeout=10, source_address=("127.0.9.1", 0)) as answered, \
                socket.create_connection(address, timeout=10, source_address=("127.0.9.1", 0)) as half_sent:
            answered.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            half_sent.sendall(b"GET /")
            time.sleep(0.1)
            assert scrape_from(address, "127.0.8.1").startswith(b"HTTP/1.0 200 ")
            assert closed_within(half_sent, 5) == b""
            assert closed_within(answered, 5).startswith(b"HTTP/1.0 200 ")
    finally:
        served.shutdown()
        served.server_close()


def test_one_address_holds_at_most_its_share_of_the_metrics_connections():
    """Eight silent sockets from one address held every scrape for 10 s; now that address holds two, and a scrape from
    another address is served meanwhile."""
    served = metrics_http.serve(metrics.ShimMetrics().registry, "127.0.0.1", 0, deadline_seconds=5, max_connections=4)
    address = served.server_address[:2]
    held = [socket.create_connection(address, timeout=10, source_address=("127.0.0.1", 0)) for _ in range(8)]
    try:
        refused = [closed_within(sock, 10) for sock in held[metrics_http.MAX_PER_PEER:]]
        assert all(answer.startswith(b"HTTP/1.0 503 ") for answer in refused)
        started = time.monotonic()
        with socket.create_connection(address, timeout=10, source_address=("127.0.0.2", 0)) as sock:
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            assert closed_within(sock, 10).startswith(b"HTTP/1.0 200 ")
        assert time.monotonic() - started < 1
    finally:
        for sock in held:
            sock.close()
        served.shutdown()
        served.server_close()


def test_a_metrics_connection_that_sends_nothing_is_closed_at_the_first_byte_deadline():
    served = metrics_http.serve(metrics.ShimMetrics().registry, "127.0.0.1", 0, deadline_seconds=9)
    try:
        with socket.create_connection(served.server_address[:2], timeout=10) as sock:
            started = time.monotonic()
            assert closed_within(sock, 10) == b""
            first_byte = metrics_http.FIRST_BYTE_SECONDS
            assert first_byte - 0.1 < time.monotonic() - started < first_byte + 1
    finally:
        served.shutdown()
        served.server_close()


def test_the_metrics_read_the_rosters_open_and_busy_connections_and_the_limit():
    shim_metrics = metrics.ShimMetrics()
    table = roster(total=4, per_peer=2)
    shim_metrics.watch_connections(table, 4)
    heads(table, "10.0.0.1", 2, "a")
    table.opened("silent", "10.0.0.2")
    value = shim_metrics.registry.get_sample_value
    assert (value("intern_decision_shim_connections_open"), value("intern_decision_shim_connections_busy"),
            value("intern_decision_shim_connections_max")) == (3, 2, 4)


def test_the_real_server_keys_an_ipv6_source_by_its_64():
    """In a network namespace of its own, whose loopback holds documentation addresses (tests/unit/shim_ipv6.py): one
    address holding its share of busy heads, another address of the same /64 is refused; one of another /64 served."""
    import subprocess
    import sys
    from pathlib import Path

    probe = subprocess.run(["unshare", "-rn", "sh", "-c", f"ip link set lo up && exec {sys.executable} -m "
                            "tests.unit.shim_ipv6"], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                           text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout.splitlines()[-1]) == {"same_64": 503, "other_64": 200}


def test_a_complete_request_takes_a_head_from_a_source_holding_as_many_as_its_own():
    """16 sources × their share of trickled heads far over MAX_CONNECTIONS: a victim's second connection must not
    close its first (its kept-alive one, about to be used again), so the sources holding as many give way too."""
    table = roster(total=4, per_peer=3)
    table.opened("kept", "10.0.0.9")  # the victim's kept-alive connection, idle between its requests
    a = heads(table, "10.0.0.1", 2, "a")
    heads(table, "10.0.0.2", 2, "b")
    table.opened("second", "10.0.0.9")
    table.request_began("second")
    verdict = table.admit("second")  # 6 of 4: both sources hold 2, as the victim does with this one
    assert verdict.admitted and verdict.evict == (a[0], "b-0") and table.is_idle("kept")
    assert table.held_by("10.0.0.9") == 2 and len(table) == 4
