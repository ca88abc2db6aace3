"""Real servers for the integration tests: the fixture checkpoint, a tritonserver on CPU on free ports."""
from __future__ import annotations

import contextlib
import importlib.util
import sys
import threading
import time

import httpx
import pytest

from devstack.fixture import FixturePins, build_fixture
from devstack.shim import ShimServer
from devstack.triton import TritonServer

# Small enough that an over-limit request is cheap to build, large enough for every test's prompt.
TEST_MAX_TOKENS = 4096


@pytest.fixture(scope="session")
def fixture_pins(tmp_path_factory) -> FixturePins:
    return build_fixture(tmp_path_factory.mktemp("hf-cache"))


def model_env(pins: FixturePins, **overrides: str) -> dict[str, str]:
    env = pins.env()
    env.update({"INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32",
                "INTERN_DECISION_MAX_TOKENS": str(TEST_MAX_TOKENS)})
    env.update(overrides)
    return env


@pytest.fixture(scope="session")
def triton(fixture_pins, tmp_path_factory) -> TritonServer:
    log_path = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    with TritonServer(model_env(fixture_pins), log_path).serving(240) as server:
        yield server


SHIM_TOKEN = "integration-token-0123456789-abcdefghij"
SHIM_MAX_QUEUE = 2
SHIM_MAX_BODY_BYTES = 256 * 1024
SHIM_BODY_TIMEOUT_SECONDS = 2


@pytest.fixture(scope="session")
def shim(triton, tmp_path_factory) -> ShimServer:
    # No idle pings from the session's shim: the model's tests count Triton's inference requests.
    env = {"INTERN_DECISION_API_TOKEN": SHIM_TOKEN, "INTERN_DECISION_MAX_QUEUE": str(SHIM_MAX_QUEUE),
           "INTERN_DECISION_MAX_BODY_BYTES": str(SHIM_MAX_BODY_BYTES),
           "INTERN_DECISION_BODY_TIMEOUT_SECONDS": str(SHIM_BODY_TIMEOUT_SECONDS),
           "INTERN_DECISION_PROBE_SECONDS": "3600"}
    with ShimServer(triton, env, tmp_path_factory.mktemp("shim") / "shim.log").serving(60) as server:
        yield server


@contextlib.contextmanager
def held_queue(shim: ShimServer, seconds: float, settle: float = 0.5):
    """SHIM_MAX_QUEUE slow /decide requests hold every queue slot for about `seconds` (inside the model); the block
    runs once they are admitted, and its end waits for them."""
    auth = {"Authorization": f"Bearer {SHIM_TOKEN}"}
    hold = {"id": "slow", "state": {"__fixture_fault__": {"sleep_seconds": seconds}}, "question": "Which?",
            "options": [{"id": "a", "description": "A"}, {"id": "b", "description": "B"}]}

    def slow() -> None:
        with httpx.Client(base_url=shim.url, timeout=60) as client:
            client.post("/decide", json=hold, headers=auth)

    threads = [threading.Thread(target=slow) for _ in range(SHIM_MAX_QUEUE)]
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
    auth = {"Authorization": f"Bearer {SHIM_TOKEN}"}
    statuses: list[int] = []

    def hold() -> None:
        with httpx.Client(base_url=shim.url, timeout=60) as client:
            statuses.append(client.post("/decide", json=slow_body, headers=auth).status_code)

    threads = [threading.Thread(target=hold) for _ in range(SHIM_MAX_QUEUE)]
    for thread in threads:
        thread.start()
        time.sleep(0.3)
    with httpx.Client(base_url=shim.url, timeout=10) as client:
        refused = client.post("/decide", json=next_body, headers=auth)
    for thread in threads:
        thread.join()
    return statuses, refused


@pytest.fixture(scope="module")
def in_process(fixture_pins):
    """The fixture's own DecisionEngine, loaded in this process with the settings the server uses."""
    spec = importlib.util.spec_from_file_location("fixture_inference_in_process",
                                                  fixture_pins.checkpoint / "inference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    engine = module.DecisionEngine(checkpoint=str(fixture_pins.checkpoint), max_length=TEST_MAX_TOKENS,
                                   device="cpu", dtype="float32")
    return module, engine
