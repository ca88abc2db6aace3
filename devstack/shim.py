"""The shim under uvicorn, as its entry point runs it, ready when /health answers 200."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from devstack.process import ManagedProcess, free_ports
from devstack.triton import TritonServer


def shim_environment(triton: TritonServer, extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "INTERN_DECISION_TRITON_URL": triton.http_url,
        "INTERN_DECISION_TRITON_METRICS_URL": triton.metrics_url,
        "INTERN_DECISION_TRITON_API_KEY": triton.api_key,
    })
    env.update(extra)
    return env


class ShimServer(ManagedProcess):
    def __init__(self, triton: TritonServer, env: dict[str, str], log_path: Path, port: int | None = None,
                 metrics_port: int | None = None, python: str | None = None, tree: Path | None = None):
        """tree: another checkout of the project to run the shim from (bench/before_after.py); this one when None."""
        spare = [free for free in free_ports(3) if free not in (port, metrics_port)]
        self.port = port or spare.pop()
        self.metrics_port = metrics_port or spare.pop()
        command = [python or sys.executable, "-m", "shim", "--host", "127.0.0.1", "--port", str(self.port)]
        env = {**env, "INTERN_DECISION_METRICS_PORT": str(self.metrics_port)}
        if tree is not None:  # python -m finds the package in its working directory first
            env["PYTHONPATH"] = str(tree)
        super().__init__("shim", command, shim_environment(triton, env), log_path, f"{self.url}/health", cwd=tree)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"
