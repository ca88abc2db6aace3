"""python -m tests.unit.fake_shim --port P: the real shim server (shim/server/: uvicorn, the drain on SIGTERM) over
the fake model, each inference taking FAKE_CALL_SECONDS; settings from INTERN_DECISION_* like python -m shim."""
from __future__ import annotations

import argparse
import asyncio
import os

from shim import server
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
    service = build_service(ShimSettings.from_env(os.environ),
                            SlowModel(float(os.environ.get("FAKE_CALL_SECONDS", "0"))))
    server.run(service, "127.0.0.1", args.port)


if __name__ == "__main__":
    main()
