"""Limits as ASGI middleware, driven with raw ASGI messages through the POST guards as create_app orders them: 413
(declared and counted, sent and decoded, whatever the encoding, and past the decode ratio), 429 before the body (with
Retry-After), 408 when the body is too slow, one Authorization header; large JSON read off the event loop."""
from __future__ import annotations

import asyncio
import gc
import gzip
import json
import threading

import pytest
from backports import zstd
from starlette.datastructures import Headers

from shim.app import build_service, create_app
from shim.edge.admission import Admission
from shim.edge.auth import BearerAuth
from shim.edge.body import BodyReader, KnownEncoding, declared_length
from shim.edge.drain_gate import RefuseWhileDraining
from shim.edge.request_id import RequestId
from shim.edge.tokens import AcceptedTokens, bearer_matches
from shim.json_body import ON_LOOP_BYTES, strict_body
from wire import strict_json

from .fake_model import FakeModel
from .shim_helpers import TOKEN, make_settings

pytestmark = pytest.mark.anyio


class Exchange:
    """One ASGI request: the body in chunks, what the app received, what was sent back."""

    def __init__(self, chunks: list[bytes], headers: dict[str, str] | None = None, auth: bool = True):
        all_headers = {"authorization": f"Bearer {TOKEN}"} if auth else {}
        all_headers.update(headers or {})
        self.scope = {"type": "http", "method": "POST", "path": "/decide",
                      "headers": [(k.lower().encode(), v.encode()) for k, v in all_headers.items()]}
        self._chunks = list(chunks)
        self.chunks_read = 0
        self.sent: list[dict] = []

    async def receive(self) -> dict:
        self.chunks_read += 1
        if not self._chunks:
            await asyncio.sleep(3600)
        chunk = self._chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(self._chunks)}

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return self.sent[0]["status"]

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    @property
    def error_code(self) -> str:
        return json.loads(b"".join(m.get("body", b"") for m in self.sent[1:]))["error"]["code"]


class EchoApp:
    """Reads the body the middleware replays and answers with its length; can be held open by a gate."""

    def __init__(self):
        self.bodies: list[bytes] = []
        self.gate: asyncio.Event | None = None

    async def __call__(self, scope, receive, send):
        message = await receive()
        self.bodies.append(message["body"])
        if self.gate is not None:
            await self.gate.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(len(message["body"])).encode()})


class Edge:
    """The middlewares of the app create_app builds, in its order (its user_middleware, not an order restated here),
    around `app`; in_progress is the admitted requests' count."""

    def __init__(self, app, max_queue: int, max_body: int, body_timeout: float, max_decode_ratio: int = 200):
        built = build_service(make_settings(max_queue=str(max_queue), max_body_bytes=str(max_body),
                                            body_timeout_seconds=f"{body_timeout:g}",
                                            max_decode_ratio=str(max_decode_ratio)), FakeModel())
        self._drain = built.drain
        self._stack = app
        for middleware in reversed(built.app.user_middleware):
            self._stack = middleware.cls(self._stack, *middleware.args, **middleware.kwargs)
        self._stack = RequestId(self._stack)  # outside the last resort, where each request's cycle begins

    async def __call__(self, scope, receive, send):
        await self._stack(scope, receive, send)

    @property
    def in_progress(self) -> int:
        return self._drain.admitted


def guard(app, max_queue=2, max_body=100, body_timeout=5.0, max_decode_ratio=200) -> Edge:
    return Edge(app, max_queue, max_body, body_timeout, max_decode_ratio)


def raw(headers: list[tuple[bytes, bytes]]) -> Headers:
    return Headers(raw=headers)


async def test_a_body_within_the_limit_reaches_the_app_whole():
    app = EchoApp()
    exchange = Exchange([b"a" * 60, b"b" * 40])
    await guard(app)(exchange.scope, exchange.receive, exchange.send)
    assert exchange.status == 200 and app.bodies == [b"a" * 60 + b"b" * 40]


async def test_a_declared_length_over_the_limit_is_413_before_reading():
    app = EchoApp()
    exchange = Exchange([b"x" * 10], headers={"content-length": "101"})
    await guard(app)(exchange.scope, exchange.receive, exchange.send)
    assert (exchange.status, exchange.error_code) == (413, "request_too_large")
    assert exchange.chunks_read == 0 and app.bodies == []


async def test_a_chunked_body_is_counted_and_refused_once_it_passes_the_limit():
    app = EchoApp()
    exchange = Exchange([b"x" * 50, b"x" * 50, b"x" * 1, b"never read"])
    await guard(app)(exchange.scope, exchange.receive, exchange.send)
    assert (exchange.status, exchange.error_code) == (413, "request_too_large")
    assert exchange.chunks_read == 3 and app.bodies == []


@pytest.mark.parametrize("declared", ["+101", "1e3", " 101", "١٠١", "101.0"])
async def test_a_declared_length_that_is_not_ascii_digits_is_not_trusted(declared):
    app = EchoApp()
    exchange = Exchange([b"x" * 10], headers={"content-length": declared})
    await guard(app)(exchange.scope, exchange.receive, exchange.send)
    assert exchange.status == 200 and exchange.chunks_read == 1  # counted, not refused on the declaration
    assert app.bodies == [b"x" * 10]


async def test_a_small_declared_length_does_not_let_a_larger_body_through():
    app = EchoApp()
    exchange = Exchange([b"x" * 60, b"x" * 60], headers={"content-length": "10"})
    await guard(app)(exchange.scope, exchange.receive, exchange.send)
    assert exchange.status == 413 and app.bodies == []


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
async def test_a_declared_length_over_the_limit_is_413_before_reading_whatever_the_encoding(encoding):
    app = EchoApp()
    exchange = Exchange([b"x" * 10], headers={"content-length": "101", "content-encoding": encoding})
    await guard(app)(exchange.scope, exchange.receive, exchange.send)
    assert (exchange.status, exchange.error_code) == (413, "request_too_large")
    assert exchange.chunks_read == 0 and app.bodies == []


@pytest.mark.parametrize("encoding, empty", [("gzip", gzip.compress(b"", mtime=0)), ("zstd", zstd.compress(b""))],
                         ids=["gzip", "zstd"])
async def test_the_bytes_sent_count_against_the_limit_even_when_they_decode_to_nothing(encoding, empty):
    app = EchoApp()
    frames = empty * (60 // len(empty) + 1)  # over 60 bytes sent, nothing decoded
    exchange = Exchange([frames, frames], headers={"content-encoding": encoding})
    await guard(app)(exchange.scope, exchange.receive, exchange.send)
    assert (exchange.status, exchange.error_code) == (413, "request_too_large")
    assert json.loads(exchange.sent[1]["body"])["error"]["message"] == (
        f"the body is larger than 100 bytes as sent, before its {encoding} is decoded (MAX_BODY_BYTES)")
    assert app.bodies == []


async def test_past_max_queue_the_next_post_is_429_before_its_body_is_read():
    app = EchoApp()
    app.gate = asyncio.Event()
    middleware = guard(app, max_queue=2)
    holders = [Exchange([b"{}"]) for _ in range(2)]
    tasks = [asyncio.create_task(middleware(e.scope, e.receive, e.send)) for e in holders]
    while len(app.bodies) < 2:
        await asyncio.sleep(0.001)
    refused = Exchange([b"{}"])
    await middleware(refused.scope, refused.receive, refused.send)
    assert (refused.status, refused.error_code) == (429, "busy")
    assert refused.headers[b"retry-after"] == b"1"
    assert refused.chunks_read == 0
    app.gate.set()
    await asyncio.gather(*tasks)
    assert middleware.in_progress == 0
    again = Exchange([b"{}"])
    await middleware(again.scope, again.receive, again.send)
    assert again.status == 200


async def test_an_unauthenticated_post_never_takes_a_queue_slot_nor_has_its_body_read():
    app = EchoApp()
    middleware = guard(app, max_queue=1)
    exchange = Exchange([b"{}"], auth=False)
    await middleware(exchange.scope, exchange.receive, exchange.send)
    assert (exchange.status, exchange.error_code) == (401, "unauthorized")
    assert exchange.chunks_read == 0 and middleware.in_progress == 0


async def test_get_passes_without_auth_or_limits():
    app = EchoApp()
    exchange = Exchange([b"x" * 500], auth=False)
    exchange.scope["method"] = "GET"
    await guard(app)(exchange.scope, exchange.receive, exchange.send)
    assert exchange.status == 200


class Trickle:
    """A body that arrives a chunk every `interval` seconds, `count` chunks, the last one final."""

    def __init__(self, interval: float, count: int):
        self.interval, self.left = interval, count

    async def receive(self) -> dict:
        await asyncio.sleep(self.interval)
        self.left -= 1
        return {"type": "http.request", "body": b" ", "more_body": self.left > 0}


async def test_a_body_slower_than_the_deadline_is_408_and_frees_its_slot_at_the_deadline():
    app = EchoApp()
    middleware = guard(app, max_queue=1, body_timeout=0.3)
    exchange = Exchange([])
    trickle = Trickle(interval=0.1, count=100)  # every chunk in time, the whole body far too late
    loop = asyncio.get_running_loop()
    started = loop.time()
    await middleware(exchange.scope, trickle.receive, exchange.send)
    elapsed = loop.time() - started
    assert (exchange.status, exchange.error_code) == (408, "request_timeout")
    assert exchange.headers[b"connection"] == b"close"
    assert elapsed >= 0.3 and trickle.left > 0  # refused at the deadline, before the body's end
    assert app.bodies == [] and middleware.in_progress == 0
    again = Exchange([b"{}"])
    await middleware(again.scope, again.receive, again.send)
    assert again.status == 200


async def test_a_body_that_arrives_whole_within_the_deadline_passes():
    app = EchoApp()
    exchange = Exchange([])
    await guard(app, body_timeout=1.0)(exchange.scope, Trickle(interval=0.05, count=4).receive, exchange.send)
    assert exchange.status == 200 and app.bodies == [b"    "]


async def test_a_body_that_never_starts_is_408_too():
    app = EchoApp()
    exchange = Exchange([])  # receive() never returns
    await guard(app, body_timeout=0.2)(exchange.scope, exchange.receive, exchange.send)
    assert (exchange.status, exchange.error_code) == (408, "request_timeout")


async def test_a_client_gone_while_sending_frees_its_slot_without_an_answer():
    app = EchoApp()
    middleware = guard(app, max_queue=1)
    exchange = Exchange([])

    async def gone() -> dict:
        return {"type": "http.disconnect"}

    await middleware(exchange.scope, gone, exchange.send)
    assert exchange.sent == [] and middleware.in_progress == 0 and app.bodies == []


@pytest.mark.parametrize("values", [
    [b"Bearer " + TOKEN.encode(), b"Bearer " + TOKEN.encode()],
    [b"Bearer wrong", b"Bearer " + TOKEN.encode()],
    [b"Bearer " + TOKEN.encode(), b"Bearer wrong"],
])
def test_two_authorization_headers_are_never_guessed_between(values):
    assert not bearer_matches(raw([(b"authorization", value) for value in values]), AcceptedTokens(TOKEN))


def test_bearer_parsing():
    token, tokens = TOKEN.encode(), AcceptedTokens(TOKEN)
    assert bearer_matches(raw([(b"authorization", b"Bearer " + token)]), tokens)
    assert bearer_matches(raw([(b"authorization", b"BEARER " + token)]), tokens)
    assert not bearer_matches(raw([(b"authorization", b"Bearer " + token[:-1])]), tokens)
    assert not bearer_matches(raw([(b"authorization", b"Token " + token)]), tokens)
    assert not bearer_matches(raw([]), tokens)
    assert bearer_matches(raw([(b"authorization", b"  Bearer   " + token + b"  ")]), tokens)
    assert not bearer_matches(raw([(b"authorization", b"Bearer" + token)]), tokens)
    assert not bearer_matches(raw([(b"authorization", b"Bearer")]), tokens)
    assert not bearer_matches(raw([(b"authorization", b"Bearer " + token + b" x")]), tokens)
    assert declared_length(raw([(b"content-length", b"42")])) == 42
    assert declared_length(raw([(b"content-length", b"4 2")])) is None


def test_only_ascii_whitespace_around_the_scheme_and_the_token_is_ignored():
    """Headers arrive as latin-1 text; what is stripped is what bytes.strip() strips, never \xa0 or \x85."""
    token, tokens = TOKEN.encode(), AcceptedTokens(TOKEN)
    assert bearer_matches(raw([(b"authorization", b"\tBearer " + token + b"\x0b")]), tokens)
    for other in (b"\xa0", b"\x85"):
        assert not bearer_matches(raw([(b"authorization", b"Bearer " + token + other)]), tokens)
        assert not bearer_matches(raw([(b"authorization", other + b"Bearer " + token)]), tokens)



def test_create_app_checks_the_headers_then_admits_then_reads_the_body():
    """The order of the stack create_app builds, walked layer by layer: a refusal from the headers never takes a
    queue slot, and a request past the queue never has its body read."""
    layer, order = create_app(make_settings(), FakeModel()).build_middleware_stack(), []
    while hasattr(layer, "app"):
        order.append(type(layer))
        layer = layer.app
    guards = (BearerAuth, RefuseWhileDraining, KnownEncoding, Admission, BodyReader)
    assert [kind for kind in order if kind in guards] == list(guards)


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
async def test_members_each_within_the_limit_are_413_once_their_sum_is_over_it(encoding):
    compress = {"gzip": gzip.compress, "zstd": zstd.compress}[encoding]
    app = EchoApp()
    member = compress(b"a" * 600)
    exchange = Exchange([member, member], headers={"content-encoding": encoding})
    await guard(app, max_body=1000)(exchange.scope, exchange.receive, exchange.send)
    assert (exchange.status, exchange.error_code) == (413, "request_too_large")
    assert json.loads(exchange.sent[1]["body"])["error"]["message"] == (
        f"the body is larger than 1000 bytes once its {encoding} is decoded (MAX_BODY_BYTES)")
    assert app.bodies == []


def nested_arrays(size: int) -> bytes:
    """About `size` bytes of empty arrays 64 deep, side by side: gzip shrinks it about 290 times."""
    part = b"[" * 63 + b"]" * 63
    return b"[" + b",".join([part] * ((size - 2) // (len(part) + 1))) + b"]"


async def test_a_body_that_decodes_to_more_than_max_decode_ratio_times_its_size_is_413():
    body = nested_arrays(1024 * 1024)
    sent = gzip.compress(body)
    app = EchoApp()
    refused = Exchange([sent], headers={"content-encoding": "gzip"})
    await guard(app, max_body=2 * len(body))(refused.scope, refused.receive, refused.send)
    assert (refused.status, refused.error_code) == (413, "request_too_large")
    assert json.loads(refused.sent[1]["body"])["error"]["message"] == (
        "the body's gzip decodes to more than 200 times the bytes sent (MAX_DECODE_RATIO)")
    assert app.bodies == []
    allowed = Exchange([sent], headers={"content-encoding": "gzip"})
    await guard(app, max_body=2 * len(body), max_decode_ratio=len(body) // len(sent) + 1)(
        allowed.scope, allowed.receive, allowed.send)
    assert allowed.status == 200 and app.bodies == [body]


async def test_a_large_body_is_parsed_on_the_parse_worker_and_a_small_one_on_the_loop(monkeypatch):
    threads = []
    real_loads = strict_json.loads

    def noting_thread(raw, what):
        threads.append(threading.current_thread())
        return real_loads(raw, what)

    monkeypatch.setattr(strict_json, "loads", noting_thread)
    small, large = b"[1]", b"[" + b"1," * ON_LOOP_BYTES + b"1]"
    assert await strict_body(small) == [1]
    assert await strict_body(large) == [1] * (ON_LOOP_BYTES + 1)
    assert threads[0] is threading.main_thread() and threads[1].name.startswith("body-parse")
    with pytest.raises(strict_json.NotStrictJson, match="nested too deeply"):
        await strict_body(nested_arrays(ON_LOOP_BYTES * 2).replace(b"[]", b"[[]]", 1))
    with pytest.raises(strict_json.NotStrictJson, match="appears twice"):
        await strict_body(b'{"a": 1, "a": 2' + b" " * ON_LOOP_BYTES + b"}")
    assert len(threads) == 4 and gc.isenabled()


def test_the_parse_worker_rests_after_each_parse_for_as_long_as_it_parsed(monkeypatch):
    """Read by the worker's own clock: the loop gets the GIL back for as long as each parse held it."""
    from shim import json_body

    class Clock:
        now = 100.0
        slept: list[float] = []

        def monotonic(self) -> float:
            return self.now

        def sleep(self, seconds: float) -> None:
            self.slept.append(seconds)
            self.now += seconds

    clock = Clock()

    def parse_taking(seconds: float):
        def loads(raw, what):
            assert not gc.isenabled()  # the collector held off during the parse
            clock.now += seconds
            return []
        return loads

    monkeypatch.setattr(json_body, "time", clock)
    worker = json_body._Worker()
    worker._run(parse_taking(0.2), (b"[]", "the body"))
    worker._run(parse_taking(0.05), (b"[]", "the body"))
    clock.now += 1.0  # idle longer than the last parse: no rest owed
    worker._run(parse_taking(0.05), (b"[]", "the body"))
    assert clock.slept == [0.0, pytest.approx(0.2), 0.0] and gc.isenabled()


async def test_a_body_the_loop_would_parse_for_milliseconds_goes_to_the_parse_worker(monkeypatch):
    """32 KiB of `[1e1,1e1,...]` took ~2 ms of the event loop (64 KiB: ~4 ms); the loop now parses at most
    ON_LOOP_BYTES (8 KiB), about 0.5 ms of the costliest JSON."""
    threads = []
    real_loads = strict_json.loads
    monkeypatch.setattr(strict_json, "loads",
                        lambda raw, what: (threads.append(threading.current_thread()), real_loads(raw, what))[1])
    floats = b"[" + b",".join([b"1e1"] * 8000) + b"]"
    assert 8 * 1024 < len(floats) < 64 * 1024
    assert await strict_body(floats) == [10.0] * 8000
    assert threads[0].name.startswith("body-parse")
