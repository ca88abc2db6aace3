"""What every step of the check shares: the options it runs with, the context the steps read and fill in turn (the
service's interpreter, the server tree, the pins, the caps, the served stack, the running step's end), and the two
outcomes a step may end with besides passing or failing."""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from devstack.fixture import FixturePins
from gpucheck.cap import unmeasured
from gpucheck.carry import REPO_ROOT
from gpucheck.deadline import Deadline, run_logged
from gpucheck.report import Report
from gpucheck.stack import Stack
from intern_decision_model.offline import OFFLINE_ENV


class Skip(Exception):
    """The step does not apply here; the message says why."""


class Inconclusive(Exception):
    """The step ran and nothing failed, but what it measured cannot decide it; the message says why."""


@dataclass
class Options:
    mode: str  # "gpu" (install, synthetic checkpoint, production config) or "cpu" (the development environment)
    device: str  # where the model runs: "cuda", or "cpu" (--cpu, or rehearsing the GPU path without a card)
    out: Path
    scratch: Path
    carry: Path
    checkpoint: str  # "synthetic-full", "synthetic-small" or "fixture"
    rounds: int
    warmup: int
    kit_checks: str
    kit_n: int
    deadline: float
    server_root: Path | None = None  # a server tree to use instead of the installed one (rehearsals)

    @property
    def files(self) -> Path:
        """Every log and measurement, archived into out/ at the end (out/ itself holds at most three files)."""
        return self.scratch / "files"


@dataclass
class Context:
    options: Options
    report: Report
    deadline: Deadline
    machine_python: str = sys.executable
    python: str = sys.executable  # the service's interpreter
    server_root: Path | None = None
    kernels: Path | None = None
    pins: FixturePins | None = None
    shapes_path: Path | None = None
    fitted: dict = field(default_factory=dict)
    inprocess: dict | None = None
    kernels_bound: bool = False
    caps: dict = field(default_factory=unmeasured)  # gpucheck.cap: the production cap and check 6's test cap
    warmup_job: object | None = None  # the kernel warm-up running beside the checkpoint's build
    checkpoint_started: bool = False
    stack: Stack | None = None
    token_file: Path | None = None
    step_end: float = float("inf")  # when the running step's budget is spent (time.monotonic)
    inprocess_path: str | None = None  # the linear-attention path the in-process figures ran
    slow_kernels_allowed: bool = False

    @property
    def gpu(self) -> bool:
        return self.options.mode == "gpu"

    @property
    def cuda(self) -> bool:
        return self.options.device == "cuda"

    @property
    def out(self) -> Path:
        return self.options.files

    def budget(self, limit: float = float("inf")) -> float:
        """Seconds for one part of the running step: its own limit, cut to what the step's budget and the overall
        deadline leave."""
        return self.deadline.budget(min(limit, max(1.0, self.step_end - time.monotonic())))

    def script(self, module: str, arguments: list, log: str, python: str | None = None,
               limit: float = float("inf")) -> str:
        """Run one of the check's scripts (or another module) in the service's interpreter, from the repository,
        within what the step has left (and limit)."""
        return run_logged([python or self.python, "-m", module, *arguments], self.out / log, self.budget(limit),
                          env=script_environment({**self.threads(), **self.kernel_cache()}), cwd=REPO_ROOT)

    def threads(self) -> dict:
        # On the CPU, one torch thread for the model in-process and in the stub alike: the two are compared, and
        # on a small machine the stub, the server, the shim and the client share the cores.
        return {} if self.cuda else {"OMP_NUM_THREADS": "1"}

    def kernel_cache(self) -> dict:
        """One OpenAI Triton cache for every process of the check, autotune results included: the in-process run
        compiles and autotunes flash-linear-attention's kernels once, inside its budget, and the server's model
        process finds them there."""
        return {"TRITON_CACHE_DIR": str(self.options.scratch / "triton-cache"), "TRITON_CACHE_AUTOTUNING": "1"}

    def stop_stack(self) -> None:
        if self.stack is not None:
            stack, self.stack = self.stack, None
            stack.stop()


def dtype_of(ctx: Context) -> str:
    return "bfloat16" if ctx.cuda else "float32"  # bf16 is the checkpoint's; on a CPU float32 is the fast one


def script_environment(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(OFFLINE_ENV, HF_HUB_DISABLE_PROGRESS_BARS="1", TOKENIZERS_PARALLELISM="false")
    env.update(extra or {})
    return env
