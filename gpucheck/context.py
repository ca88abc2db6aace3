"""What every step of the check shares: the options it runs with, the context it runs in (what earlier steps found,
and the runner's resources), and the two outcomes a step may end with besides passing or failing."""
from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gpucheck.carry import REPO_ROOT
from gpucheck.deadline import Deadline, run_logged
from gpucheck.findings import Findings
from gpucheck.report import Report
from gpucheck.stack import Stack
from intern_decision_model.offline import OFFLINE_ENV


class Skip(Exception):
    """The step does not apply here; the message says why, data what it found before it knew."""

    def __init__(self, message: str, data: dict | None = None):
        super().__init__(message)
        self.data = data or {}


class Inconclusive(Exception):
    """The step ran and nothing failed, but what it measured (data) cannot decide it; the message says why."""

    def __init__(self, message: str, data: dict | None = None):
        super().__init__(message)
        self.data = data or {}


class ServiceFault(RuntimeError):
    """The service itself did wrong (a check of the acceptance kit failed, the service scored other prompts than
    predict()): the one failure an optional step reports as such."""


@contextmanager
def keeping(data: dict):
    """What a step has measured so far (data, which it fills as it goes), handed to the runner with whatever the step
    raises, the deadline included, unless the exception carries its own: so a step cut or failed halfway still
    reports it, and never writes its report entry itself."""
    try:
        yield data
    except Exception as exc:
        if not getattr(exc, "data", None):
            exc.data = data
        raise


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
    only: tuple = ()  # --only: these steps and what they need (gpucheck.check.wanted); () runs every step

    @property
    def files(self) -> Path:
        """Every log and measurement, archived into out/ at the end (out/ itself holds at most three files)."""
        return self.scratch / "files"


@dataclass
class Context:
    """What a step runs with. Who writes what:

    * findings: what the steps found (gpucheck.findings). Steps only read it; the runner (gpucheck.check) replaces
      it with what each step returns, and is the one place that does.
    * the runner's resources, which outlive the step that starts them: the served stack (held from the moment its
      server is up, stopped by stop_stack or by the runner's teardown), the kernel warm-up running in the background
      (started by the checkpoint step, finished by the kernel_warmup step, killed by the teardown if still running),
      and step_end (set by the runner before each step). Steps hand them over through the methods below.
    """
    options: Options
    report: Report
    deadline: Deadline
    machine_python: str = sys.executable
    findings: Findings = field(default_factory=Findings)
    stack: Stack | None = None  # the served stack, with its token: hold_stack, stop_stack
    warmup_job: object | None = None  # the kernel warm-up running beside the checkpoint's build: start_warmup
    warmup_started: bool = False  # the checkpoint step tried to start it (warmup_job None: nothing to warm)
    step_end: float = float("inf")  # when the running step's budget is spent (time.monotonic)

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
        env = script_environment({**self.threads(), **self.kernel_cache()})
        return run_logged([python or self.findings.python, "-m", module, *arguments], self.out / log,
                          self.budget(limit), env=env, cwd=REPO_ROOT)

    def threads(self) -> dict:
        # On the CPU, one torch thread for the model in-process and in the stub alike: the two are compared, and
        # on a small machine the stub, the server, the shim and the client share the cores.
        return {} if self.cuda else {"OMP_NUM_THREADS": "1"}

    def kernel_cache(self) -> dict:
        """One OpenAI Triton cache for every process of the check, autotune results included: the in-process run
        compiles and autotunes flash-linear-attention's kernels once, inside its budget, and the server's model
        process finds them there."""
        return {"TRITON_CACHE_DIR": str(self.options.scratch / "triton-cache"), "TRITON_CACHE_AUTOTUNING": "1"}

    def hold_stack(self, stack: Stack) -> None:
        """From the moment its server is up: the teardown stops it from then on."""
        self.stack = stack

    def stop_stack(self) -> None:
        if self.stack is not None:
            stack, self.stack = self.stack, None
            stack.stop()

    def start_warmup(self, start) -> None:
        """Holds the warm-up start() starts (start() returns None where there is nothing to warm)."""
        self.warmup_started = True
        self.warmup_job = start()

    def take_warmup(self) -> object | None:
        """The running warm-up, which the caller finishes or kills; None when none was started."""
        job, self.warmup_job = self.warmup_job, None
        return job


def dtype_of(ctx: Context) -> str:
    return "bfloat16" if ctx.cuda else "float32"  # bf16 is the checkpoint's; on a CPU float32 is the fast one


def script_environment(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(OFFLINE_ENV, HF_HUB_DISABLE_PROGRESS_BARS="1", TOKENIZERS_PARALLELISM="false")
    env.update(extra or {})
    return env


def written_so_far(path: Path) -> dict:
    """What a script wrote to its JSON file up to now ({} when nothing, or nothing whole yet)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
