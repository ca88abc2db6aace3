"""python -m tests.unit.fake_shim --port P: the real shim server (shim/server/: uvicorn, the drain on SIGTERM) over
the fake model, each inference taking FAKE_CALL_SECONDS; settings from INTERN_DECISION_* like python -m shim, the
metrics on their port when INTERN_DECISION_METRICS_PORT names one."""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx

from shim import metrics, metrics_server, server
from shim.app import build_service
from shim.settings import ShimSettings

from .fake_model import FakeModel

REPO = Path(__file__).resolve().parents[2]
MODULE = ("-m", "tests.unit.fake_shim")  # the program spawn runs unless given another


class SlowModel(FakeModel):
    def __init__(self, seconds: float):
        super().__init__(base={"approve": 1.0})
        self.seconds = seconds

    async def predict_calls(self, state, calls, request_id):
        await asyncio.sleep(self.seconds)
        return await super().predict_calls(state, calls, request_id)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    settings = ShimSettings.from_env(os.environ)
    shim_metrics = metrics.ShimMetrics()
    if "INTERN_DECISION_METRICS_PORT" in os.environ and settings.metrics_address is not None:
        metrics_server.serve(shim_metrics.registry, *settings.metrics_address)
    service = build_service(settings, SlowModel(float(os.environ.get("FAKE_CALL_SECONDS", "0"))), metrics=shim_metrics)
    server.run(service, "127.0.0.1", args.port, metrics=shim_metrics)


def spawn(port: int, env: dict[str, str], log: Path, program: tuple[str, ...] = MODULE) -> subprocess.Popen:
    """This server (or `program`, taking the port last) on `port`, its output in `log`; spawned, not yet serving."""
    with log.open("wb") as output:
        return subprocess.Popen([sys.executable, *program, *(["--port"] if program == MODULE else []), str(port)],
                                cwd=REPO, stdout=output, stderr=subprocess.STDOUT, env={**os.environ, **env})


def wait_serving(process: subprocess.Popen, port: int, log: Path, seconds: float = 30) -> None:
    """Until its /health answers 200; AssertionError with its log when it exits or takes longer."""
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(30)


@contextlib.contextmanager
def serving(port: int, env: dict[str, str], log: Path, program: tuple[str, ...] = MODULE) -> Iterator[None]:
    process = spawn(port, env, log, program)
    try:
        wait_serving(process, port, log)
        yield
    finally:
        stop(process)


if __name__ == "__main__":
    main()
