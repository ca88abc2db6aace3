"""python -m tests.unit.fake_shim --port P: the real shim server (shim/server/: uvicorn, the drain on SIGTERM) over
the fake model, each inference taking FAKE_CALL_SECONDS; settings from INTERN_DECISION_* like python -m shim, the
metrics on their port when INTERN_DECISION_METRICS_PORT names one."""
from __future__ import annotations

import argparse
import asyncio
import os

from shim import metrics, metrics_server, server
from shim.app import build_service
from shim.settings import ShimSettings

from .fake_model import FakeModel


class SlowModel(FakeModel):
    def __init__(self, seconds: float):
        super().__init__(base={"approve": 1.0})
        self.seconds = seconds

    async def predict_calls(self, requests, request_id):
        await asyncio.sleep(self.seconds)
        return await super().predict_calls(requests, request_id)


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


if __name__ == "__main__":
    main()
