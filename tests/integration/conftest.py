"""Real servers for the integration tests: the fixture checkpoint, a tritonserver on CPU on free ports."""
from __future__ import annotations

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
    server = TritonServer(model_env(fixture_pins), tmp_path_factory.mktemp("triton") / "tritonserver.log")
    server.start()
    try:
        server.wait_ready(timeout=240)
        yield server
    finally:
        server.stop()


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
    server = ShimServer(triton, env, tmp_path_factory.mktemp("shim") / "shim.log").start()
    try:
        server.wait_ready(timeout=60)
        yield server
    finally:
        server.stop()
