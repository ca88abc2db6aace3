"""What the integration tests share besides their fixtures (tests/integration/conftest.py): the stack's settings,
request bodies, the calls straight to Triton, and readers of the servers' metrics and logs."""
from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.request
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from devstack.fixture import FixturePins
from devstack.shim import ShimServer
from devstack.triton import TritonServer

# --- the stack's settings -------------------------------------------------------------------------------------

# Small enough that an over-limit request is cheap to build, large enough for every test's prompt.
TEST_MAX_TOKENS = 4096
SHIM_TOKEN = "integration-token-0123456789-abcdefghij"
SHIM_MAX_QUEUE = 2
SHIM_MAX_BODY_BYTES = 256 * 1024
SHIM_BODY_TIMEOUT_SECONDS = 2
AUTH = {"Authorization": f"Bearer {SHIM_TOKEN}"}
NAME = "Intern-Decision-4B"  # a System One alias; answers name the canonical internlm/Intern-Decision-4B@<revision>
MODEL = "intern_decision"


def model_env(pins: FixturePins, **overrides: str) -> dict[str, str]:
    env = pins.env()
    env.update({"INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32",
                "INTERN_DECISION_MAX_TOKENS": str(TEST_MAX_TOKENS)})
    env.update(overrides)
    return env


# --- requests to the shim -------------------------------------------------------------------------------------


def options(*ids: str) -> list[dict]:
    return [{"id": option_id, "description": f"The {option_id} path."} for option_id in ids]


def decide(**fields) -> dict:
    return {"id": "r", "state": {"ticket": 7}, "question": "Refund it?", "options": options("yes", "no"), **fields}


def slow(seconds: float) -> dict:
    return decide(state={"__fixture_fault__": {"sleep_seconds": seconds}})


@contextlib.contextmanager
def held_queue(shim: ShimServer, seconds: float, settle: float = 0.5):
    """SHIM_MAX_QUEUE slow /decide requests hold every queue slot for about `seconds` (inside the model); the block
    runs once they are admitted, and its end waits for them."""
    def hold() -> None:
        with httpx.Client(base_url=shim.url, timeout=60) as client:
            client.post("/decide", json=slow(seconds), headers=AUTH)

    threads = [threading.Thread(target=hold) for _ in range(SHIM_MAX_QUEUE)]
    for thread in threads:
        thread.start()
    time.sleep(settle)
    try:
        yield
    finally:
        for thread in threads:
            thread.join()


def past_a_full_queue(shim: ShimServer, slow_body: dict, next_body: dict) -> tuple[list[int], httpx.Response]:
    """Fills the queue with SHIM_MAX_QUEUE slow /decide requests, then sends one more while they are held:
    (the held requests' statuses, the answer to the one past the queue)."""
    statuses: list[int] = []

    def hold() -> None:
        with httpx.Client(base_url=shim.url, timeout=60) as client:
            statuses.append(client.post("/decide", json=slow_body, headers=AUTH).status_code)

    threads = [threading.Thread(target=hold) for _ in range(SHIM_MAX_QUEUE)]
    for thread in threads:
        thread.start()
        time.sleep(0.3)
    with httpx.Client(base_url=shim.url, timeout=10) as client:
        refused = client.post("/decide", json=next_body, headers=AUTH)
    for thread in threads:
        thread.join()
    return statuses, refused


def assert_equals_predict(answers: dict, local: dict) -> None:
    """A System One response's answers (as JSON) against predict()'s own, number for number."""
    for name, native in local["answers"].items():
        answer = answers[name]
        assert answer["x_native"] == native, name
        if native["type"] == "noul":
            assert answer["noul"] == native["noul"] and "confidence" not in answer
        else:
            assert answer["confidence"] == native["confidence"]
            assert answer["probabilities"] == native["probabilities"]
            assert list(answer["probabilities"]) == list(native["probabilities"])
        if native["type"] == "choice":
            assert answer["choice"] == native["choice"]
        if native["type"] == "score":
            assert answer["score"] == native["score"]


# --- calls straight to Triton ---------------------------------------------------------------------------------


def infer_calls(server: TritonServer, payloads: list, request_id: str = "") -> list[dict]:
    """One inference request carrying the calls, each with its state (wire protocol v3 without STATE); the answers in
    call order."""
    raws = [payload if isinstance(payload, bytes) else json.dumps(payload).encode() for payload in payloads]
    tensor = httpclient.InferInput("REQUEST", [len(raws)], "BYTES")
    tensor.set_data_from_numpy(np.array(raws, dtype=np.object_))
    with httpclient.InferenceServerClient(server.http_url) as client:
        result = client.infer(MODEL, [tensor], request_id=request_id, headers=server.key_header)
    return [json.loads(answer) for answer in result.as_numpy("RESPONSE")]


def infer(server: TritonServer, payload: object, request_id: str = "") -> dict:
    (answer,) = infer_calls(server, [payload], request_id)
    return answer


def infer_error(server: TritonServer, payload: object, request_id: str = "") -> InferenceServerException:
    return infer_calls_error(server, [payload], request_id)


def infer_calls_error(server: TritonServer, payloads: list, request_id: str = "") -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        infer_calls(server, payloads, request_id)
    return caught.value


# --- readers of the servers' answers, metrics and logs ------------------------------------------------------


def read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def model_log_lines(triton, text: str, timeout: float = 5) -> list[str]:
    """The lines of Triton's log that hold `text`, once there are some (the model writes them off the response path)."""
    deadline = time.monotonic() + timeout
    while not (lines := [line for line in triton.log_text().splitlines() if text in line]):
        assert time.monotonic() < deadline, f"no line with {text!r} in Triton's log"
        time.sleep(0.05)
    return lines


def metrics_text(server: TritonServer) -> str:
    with urllib.request.urlopen(server.metrics_url, timeout=5) as response:
        return response.read().decode()


def read_metrics(server: TritonServer) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value}; the parser names counter samples with a _total suffix."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(metrics_text(server)) for sample in family.samples}


def calls(metrics: dict, outcome: str) -> float:
    return metrics.get(("intern_decision_calls_total",
                        (("model", MODEL), ("outcome", outcome))), 0.0)


def quiet_metrics(server: TritonServer, still_for: float = 0.3, timeout: float = 10) -> dict:
    """The metrics once the updates queued by earlier requests are applied: two reads still_for apart agree."""
    deadline = time.monotonic() + timeout
    last = read_metrics(server)
    while True:
        time.sleep(still_for)
        current = read_metrics(server)
        if current == last:
            return current
        assert time.monotonic() < deadline, "the model's metrics kept changing with no traffic"
        last = current


def settled_call_counts(server: TritonServer, before: dict, expected: dict[str, int], timeout: float = 5) -> bool:
    """The model applies its metric updates off the response path: wait until the counts reach what is expected."""
    deadline = time.monotonic() + timeout
    while True:
        after = read_metrics(server)
        counts = {outcome: calls(after, outcome) - calls(before, outcome) for outcome in expected}
        if counts == expected or time.monotonic() > deadline:
            assert counts == expected
            return True
        time.sleep(0.05)


# --- processes ------------------------------------------------------------------------------------------------


def children(pid: int) -> dict[int, str]:
    """{pid: command name} of the processes whose parent is pid, zombies left out."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found[int(entry.name)] = name
    return found
