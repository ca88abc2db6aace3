"""No body stalls the event loop, on the real shim: eight clients with the token send gzip bodies that decode to
1 MiB of nested JSON arrays (each answered 422, the parse having run: the body is not an object) in a loop, while
another client's GET /health stays fast."""
from __future__ import annotations

import gzip
import random
import statistics
import threading
import time

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


def health_latencies_under_load(url: str) -> tuple[list[float], list[int]]:
    """(GET /health's latencies while SENDERS clients send the nested bodies, the senders' statuses)."""
    wire = gzip.compress(nested_arrays(1024 * 1024))
    headers = {**AUTH, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    stop = threading.Event()
    statuses: list[int] = []

    def send() -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            while not stop.is_set():
                statuses.append(client.post("/decide", content=wire, headers=headers).status_code)

    senders = [threading.Thread(target=send) for _ in range(SENDERS)]
    for sender in senders:
        sender.start()
    latencies = []
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            while len(statuses) < SENDERS:  # every sender has had a body parsed: the load is on
                time.sleep(0.05)
            ends = time.monotonic() + LOAD_SECONDS
            while time.monotonic() < ends:
                started = time.perf_counter()
                assert client.get("/health").status_code == 200
                latencies.append(time.perf_counter() - started)
                time.sleep(HEALTH_EVERY_SECONDS)
    finally:
        stop.set()
        for sender in senders:
            sender.join()
    return latencies, statuses


def test_health_stays_fast_while_eight_clients_send_bodies_that_decode_to_a_mebibyte(shim_with_default_limits):
    latencies, statuses = health_latencies_under_load(shim_with_default_limits.url)
    assert set(statuses) == {422} and len(statuses) >= 2 * SENDERS  # every body read, parsed and refused
    p99 = statistics.quantiles(latencies, n=100)[98]
    assert p99 < HEALTH_P99_SECONDS, (f"/health p99 {p99:.3f} s, p50 {statistics.median(latencies):.3f} s, "
                                      f"max {max(latencies):.3f} s over {len(latencies)} probes")
