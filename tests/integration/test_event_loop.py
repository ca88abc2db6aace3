"""No body stalls the event loop, on the real shim over the real model port: clients with the token send gzip bodies
that decode to 1 MiB of nested JSON arrays (422 at the shim), or a state of nearly 1 MiB asked 64 questions (four
calls, the state sent to Triton once, refused by the model as too long), while another client's GET /health stays
fast and its own request is served."""
from __future__ import annotations

import gzip
import json
import random
import statistics
import threading
import time
from typing import Callable

import httpx
import pytest

from devstack.shim import ShimServer

from .helpers import AUTH, SHIM_TOKEN

pytestmark = pytest.mark.triton

SENDERS = 8
LOAD_SECONDS = 6.0
HEALTH_EVERY_SECONDS = 0.05
HEALTH_P99_SECONDS = 0.5


def nested_arrays(size: int, seed: int = 0) -> bytes:
    """About `size` bytes of arrays 64 deep (the deepest strict JSON takes), each holding a string of random hex: as
    many values as the values bound allows (one per 8 bytes: 131,072 in 1 MiB) and shrunk by gzip about 2 times,
    under the shim's decode ratio bound, so the whole text reaches the parser."""
    rng = random.Random(seed)
    parts, total = [], 2
    while True:
        part = b"[" * 63 + b'"' + rng.randbytes(196).hex().encode() + b'"' + b"]" * 63
        if total + len(part) + 1 > size:
            return b"[" + b",".join(parts) + b"]"
        parts.append(part)
        total += len(part) + 1


@pytest.fixture(scope="module")
def shim_with_default_limits(triton, tmp_path_factory):
    """A shim with the default MAX_BODY_BYTES (1 MiB) and MAX_QUEUE, so that every sender's body is read whole."""
    env = {"INTERN_DECISION_API_TOKEN": SHIM_TOKEN, "INTERN_DECISION_PROBE_SECONDS": "3600"}
    with ShimServer(triton, env, tmp_path_factory.mktemp("loop") / "shim.log").serving(60) as server:
        yield server


def health_latencies_under_load(url: str, path: str, wire: bytes, headers: dict, senders: int = SENDERS,
                                victim: Callable[[httpx.Client], int] | None = None) -> tuple[list[float], list[int]]:
    """(GET /health's latencies while `senders` clients post `wire` to `path` again and again, the senders' statuses
    and, last, the victim's status when there is one)."""
    stop = threading.Event()
    statuses: list[int] = []

    def send() -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            while not stop.is_set():
                statuses.append(client.post(path, content=wire, headers=headers).status_code)

    threads = [threading.Thread(target=send) for _ in range(senders)]
    victims: list[int] = []
    if victim is not None:
        def ask() -> None:
            while len(statuses) < senders:
                time.sleep(0.05)
            with httpx.Client(base_url=url, timeout=120) as client:
                victims.append(victim(client))
        threads.append(threading.Thread(target=ask))
    senders_and_victim = threads
    for thread in senders_and_victim:
        thread.start()
    latencies = []
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            while len(statuses) < senders:  # every sender has had an answer: the load is on
                time.sleep(0.05)
            ends = time.monotonic() + LOAD_SECONDS
            while time.monotonic() < ends or (victim is not None and not victims):
                started = time.perf_counter()
                assert client.get("/health").status_code == 200
                latencies.append(time.perf_counter() - started)
                time.sleep(HEALTH_EVERY_SECONDS)
    finally:
        stop.set()
        for thread in senders_and_victim:
            thread.join()
    return latencies, statuses + victims


def assert_fast(latencies: list[float]) -> None:
    p99 = statistics.quantiles(latencies, n=100)[98]
    assert p99 < HEALTH_P99_SECONDS, (f"/health p99 {p99:.3f} s, p50 {statistics.median(latencies):.3f} s, "
                                      f"max {max(latencies):.3f} s over {len(latencies)} probes")


def test_health_stays_fast_while_eight_clients_send_bodies_that_decode_to_a_mebibyte(shim_with_default_limits):
    wire = gzip.compress(nested_arrays(1024 * 1024))
    headers = {**AUTH, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    latencies, statuses = health_latencies_under_load(shim_with_default_limits.url, "/decide", wire, headers)
    assert set(statuses) == {422} and len(statuses) >= 2 * SENDERS  # every body read, parsed and refused
    assert_fast(latencies)


def test_a_large_state_in_many_calls_reaches_the_model_while_health_stays_fast_and_a_victim_is_served(
        shim_with_default_limits):
    """Each attacker's request carries a state of nearly MAX_BODY_BYTES and 64 questions: four calls in one Triton
    request, the state in it once; the model refuses the prompt as longer than MAX_TOKENS (422)."""
    words = " ".join(f"line {n} of the order history" for n in range(31_000))
    body = {"model": "Intern-Decision-4B", "state": {"history": words},
            "questions": {f"q{n}": {"type": "noul", "instructions": f"question {n}?"} for n in range(64)}}
    wire = json.dumps(body).encode()
    assert 900 * 1024 < len(wire) < 1024 * 1024
    headers = {**AUTH, "Content-Type": "application/json"}
    small = {**body, "state": {"order": "shipped"}, "questions": {"q": {"type": "noul", "instructions": "late?"}}}

    refused = httpx.post(shim_with_default_limits.url + "/v1/systemone", content=wire, headers=headers, timeout=120)
    assert refused.status_code == 422 and refused.json()["error"]["message"].startswith("call 0 "), refused.text[:300]

    def victim(client: httpx.Client) -> int:
        return client.post("/v1/systemone", json=small, headers=AUTH).status_code

    latencies, statuses = health_latencies_under_load(shim_with_default_limits.url, "/v1/systemone", wire, headers,
                                                      senders=4, victim=victim)
    assert set(statuses[:-1]) == {422} and statuses[-1] == 200, statuses
    assert_fast(latencies)
