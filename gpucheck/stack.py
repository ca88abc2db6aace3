"""The served stack for the check: tritonserver with a copy of the model repository, and the shim in front.

On the GPU the production config.pbtxt (one KIND_GPU instance on GPU 0) is tried first. If that server cannot
manage the card (the bundled 24.10 server refuses KIND_GPU when its CUDA runtime sees no device, e.g. with a driver
older than its CUDA 12.6 runtime accepts), the variant configs/gpucheck_kind_model.pbtxt is tried: the same model
with its instance KIND_MODEL, which leaves the placement to the model (INTERN_DECISION_DEVICE=cuda). The report
says which one served. The variant is written into the copy only; the repository is untouched.
"""
from __future__ import annotations

import json
import re
import shutil
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devstack.process import ServerExited
from devstack.shim import ShimServer
from devstack.triton import MODEL_REPOSITORY, TritonServer
from gpucheck.deadline import tail

MODEL = "intern_decision"
VARIANT = "gpucheck_kind_model"


def variant_config(production: str) -> str:
    """The production config with its instance group's kind KIND_MODEL and no GPU list."""
    text, kinds = re.subn(r"kind:\s*KIND_GPU", "kind: KIND_MODEL", production)
    if kinds != 1:
        raise ValueError(f"expected one 'kind: KIND_GPU' in the production config, found {kinds}")
    text = re.sub(r"\n[ \t]*gpus:\s*\[[^\]]*\]", "", text)
    header = ("# Written by the GPU check: the production config with a KIND_MODEL instance, for a server that\n"
              "# cannot manage the card itself; the model places itself on INTERN_DECISION_DEVICE.\n")
    return header + text


def prepare_repository(scratch: Path) -> Path:
    target = scratch / "model_repository"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(MODEL_REPOSITORY, target, ignore=shutil.ignore_patterns("__pycache__"))
    model = target / MODEL
    (model / "configs").mkdir(exist_ok=True)
    (model / "configs" / f"{VARIANT}.pbtxt").write_text(variant_config((model / "config.pbtxt").read_text()))
    return target


@dataclass
class Stack:
    server: TritonServer
    shim: ShimServer
    config: str
    attempts: list
    token_file: Path | None = None  # the shim's API token, for as long as this stack serves

    def stop(self) -> None:
        """Within the teardown's reserve (gpucheck.check.TEARDOWN_SECONDS): each is killed past its timeout."""
        self.shim.stop(timeout=5)
        self.server.stop(timeout=15)


def start_server(attempts: list, env: dict, repository: Path, root: Path, python: str, logs: Path,
                 timeout_of) -> tuple:
    """attempts: [(label, config name or None)]. Returns (server, label, tried) for the first that gets ready.

    timeout_of(position) gives the seconds attempt number `position` (from 0) may take to get ready. Each attempt
    logs to tritonserver-<label>.log.
    """
    tried = []
    for position, (label, config_name) in enumerate(attempts):
        server = TritonServer(env, logs / f"tritonserver-{label}.log", model_repository=repository,
                              config_name=config_name, root=root, python=python)
        try:
            server.start().wait_ready(timeout=timeout_of(position))
            tried.append({"config": label, "ready": True})
            return server, label, tried
        except (ServerExited, TimeoutError) as exc:
            # killed at once, its process group with it: a server not ready in its time gets no grace from the
            # next attempt's
            server.stop(timeout=0)
            tried.append({"config": label, "ready": False, "error": str(exc),
                          "reason": load_failure(server.log_path)})
        except BaseException:
            server.stop(timeout=15)
            raise
    raise RuntimeError("tritonserver did not get ready with any config: "
                       + "; ".join(f"{t['config']}: {t['reason']}" for t in tried))


def load_failure(log: Path) -> str:
    """The server log's own words on why the model did not load, else its last lines."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    for line in lines:
        if "failed to load" in line or "StartupRefused" in line or "startup refused" in line:
            return line.strip()[:600]
    return tail(log, 8)


def health(shim: ShimServer) -> dict:
    with urllib.request.urlopen(f"{shim.url}/health", timeout=10) as response:
        return json.loads(response.read())
