"""Real servers for the integration tests: the fixture checkpoint, a tritonserver on CPU on free ports (its spans sent
to a real OTLP receiver), the shim, and a Prometheus scraping both."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from devstack.fixture import FixturePins, build_fixture
from devstack.shim import ShimServer
from devstack.triton import TritonServer
from tests.otlp_receiver import OtlpReceiver

from .helpers import (
    SHIM_BODY_TIMEOUT_SECONDS,
    SHIM_MAX_BODY_BYTES,
    SHIM_MAX_QUEUE,
    SHIM_TOKEN,
    TEST_MAX_TOKENS,
    model_env,
)
from .prometheus import Prometheus


@pytest.fixture(scope="session")
def fixture_pins(tmp_path_factory) -> FixturePins:
    return build_fixture(tmp_path_factory.mktemp("hf-cache"))


@pytest.fixture(scope="session")
def otlp() -> OtlpReceiver:
    """Where the session's Triton sends its spans (OpenTelemetry mode), and a traced shim its own."""
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="session")
def triton(fixture_pins, otlp, tmp_path_factory) -> TritonServer:
    log_path = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    # Triton's spans sent every 200 ms rather than its exporter's 5 s, for the tracing test to wait less.
    env = model_env(fixture_pins, OTEL_BSP_SCHEDULE_DELAY="200")
    with TritonServer(env, log_path, otlp_endpoint=otlp.endpoint).serving(240) as server:
        yield server


@pytest.fixture(scope="session")
def shim(triton, tmp_path_factory) -> ShimServer:
    # No idle pings from the session's shim: the model's tests count Triton's inference requests.
    # One address fills the queue in these tests: no share of it per source.
    env = {"INTERN_DECISION_API_TOKEN": SHIM_TOKEN, "INTERN_DECISION_MAX_QUEUE": str(SHIM_MAX_QUEUE),
           "INTERN_DECISION_MAX_QUEUE_PER_PEER": "0",
           "INTERN_DECISION_MAX_BODY_BYTES": str(SHIM_MAX_BODY_BYTES),
           "INTERN_DECISION_BODY_TIMEOUT_SECONDS": str(SHIM_BODY_TIMEOUT_SECONDS),
           "INTERN_DECISION_PROBE_SECONDS": "3600"}
    with ShimServer(triton, env, tmp_path_factory.mktemp("shim") / "shim.log").serving(60) as server:
        yield server


@pytest.fixture(scope="module")
def prometheus(triton, shim, tmp_path_factory) -> Prometheus:
    """A real Prometheus scraping the session's Triton (job triton) and shim (job shim), as Compose's does."""
    targets = {"triton": f"127.0.0.1:{triton.ports.metrics}", "shim": f"127.0.0.1:{shim.metrics_port}"}
    with Prometheus(tmp_path_factory.mktemp("prometheus"), targets).serving(60) as server:
        yield server


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


@pytest.fixture(scope="module")
def canonical(fixture_pins) -> str:
    """The name System One answers with: the repository at the fixture's revision."""
    return f"internlm/Intern-Decision-4B@{fixture_pins.revision[:12]}"
