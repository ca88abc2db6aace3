"""The check's steps, in order: each named, with its time allowance under the overall deadline (gpucheck.budgets),
its dependencies, and its entry in the report. The reports and the archive of every log are rewritten after every
step, and at the end whatever happened, so that a run cut from outside still returns what was done."""
from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from devstack.fixture import BUILD_SCRIPT, FixturePins
from devstack.shim import ShimServer
from devstack.triton import bundled_server_root, interpreter_libdir
from gpucheck import acceptance_kit, archive, budgets, install, shapes, stub
from gpucheck.cap import plan_caps, unmeasured
from gpucheck.carry import REPO_ROOT
from gpucheck.deadline import (Deadline, DeadlineReached, finish_logged, kill_all, kill_group, run_logged,
                               start_logged)
from gpucheck.environment import nvidia_smi
from gpucheck.report import FAIL, INCONCLUSIVE, NOT_RUN, PASS, SKIPPED, Report, Step
from gpucheck.service import time_shape
from gpucheck.stack import VARIANT, Stack, health, prepare_repository, start_server
from gpucheck.summary import latency_rows
from intern_decision_model.kernels import FAST


ARCHIVE_NAME = "gpucheck-files.tar.gz"
OUT_FILES = ("report.json", "report.md", ARCHIVE_NAME)  # everything the check leaves in --out


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
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
               TOKENIZERS_PARALLELISM="false")
    env.update(extra or {})
    return env


# -- steps -------------------------------------------------------------------------------------------------------

def environment(ctx: Context, step: Step) -> str:
    path = ctx.out / "environment.json"
    ctx.script("gpucheck.environment", ["--out", path], "environment.log", python=ctx.machine_python)
    facts = json.loads(path.read_text())
    facts["nvidia_smi"] = nvidia_smi(ctx.out / "nvidia-smi.txt", "at start")
    step.data = facts
    gpu = facts.get("gpu")
    card = f"{gpu['name']} ({gpu['capability']}, {gpu['memory_gib']} GiB)" if gpu else "none"
    kernels = facts.get("kernels", {})
    detail = (f"Python {facts['python']}, torch {facts.get('torch')} (CUDA {facts.get('torch_cuda')}), "
              f"transformers {facts.get('transformers')}, numpy {facts.get('numpy')}; GPU: {card}; "
              + "; ".join(f"{name} {'imports, ' + str(entry['version']) if entry['importable'] else 'does not import'}"
                          for name, entry in kernels.items()))
    if ctx.cuda and not facts.get("cuda_available"):
        raise RuntimeError(f"torch sees no CUDA device. {detail}")
    return detail


def install_step(ctx: Context, step: Step) -> str:
    if not ctx.gpu:
        raise Skip(".venv (scripts/bootstrap.sh) has everything the CPU run needs")
    facts = install.install(ctx.machine_python, ctx.options.carry, ctx.options.scratch, ctx.out / "install.log",
                            ctx.budget)
    manifest = ctx.options.carry / "manifest.json"
    if manifest.is_file():
        carried = json.loads(manifest.read_text())
        facts["carried_bytes"] = carried.get("carry_bytes")
        facts["carried_with_repository_bytes"] = carried.get("total_bytes")
    step.data = facts
    ctx.python = facts["python"]
    ctx.server_root = Path(facts["server_root"])
    ctx.kernels = Path(facts["kernels"]) if facts["kernels"] else None
    return (f"environment {ctx.python}: " + ", ".join(f"{k} {v}" for k, v in facts["versions"].items())
            + f"; server unpacked; kernel packages {'installed apart' if ctx.kernels else 'not carried'}")


def stub_step(ctx: Context, step: Step) -> str:
    root = ctx.options.server_root or ctx.server_root or bundled_server_root()
    ctx.server_root = root
    version = install.version_of(ctx.python)
    placed = stub.place(root, version)
    libdir = interpreter_libdir(ctx.python)
    problems = stub.linkage_problems(root, libdir, ctx.out / "ldd.txt")
    step.data = {"server_root": str(root), "python_version": version, "stub": str(placed), "libdir": libdir,
                 "linkage_problems": problems}
    if problems:
        raise RuntimeError("the server or its stub cannot load: " + "; ".join(problems))
    return f"stub for Python {version} in place; every library of the server and the stub found (ldd.txt)"


# The sequence lengths the kernels are warmed at: each shape's target, and the 21 criteria's two calls over the
# anchor's state (798 and 364 tokens with the synthetic checkpoint's tokenizer, which counts like the real one).
WARM_LENGTHS = sorted({target for _, _, target, _ in shapes.SHAPES.values() if target} | {364, 798})


def start_kernel_warmup(ctx: Context) -> None:
    """flash-linear-attention's compiles and autotuning, in the background while the checkpoint is built (the
    kernel_warmup step waits for it). Not started where fla is neither carried nor installed (the CPU run)."""
    if ctx.kernels is None and importlib.util.find_spec("fla") is None:
        return
    size = "full" if ctx.options.checkpoint == "synthetic-full" else "small"
    arguments = ["--size", size, "--device", ctx.options.device, "--dtype", dtype_of(ctx),
                 "--lengths", ",".join(map(str, WARM_LENGTHS)), "--out", ctx.out / "kernel-warmup.json"]
    if ctx.kernels is not None:
        arguments += ["--kernels", ctx.kernels]
    env = script_environment({**ctx.threads(), **ctx.kernel_cache(), "TRITON_PRINT_AUTOTUNING": "1"})
    ctx.warmup_job = start_logged([ctx.python, "-m", "gpucheck.warm_kernels", *arguments],
                                  ctx.out / "kernel-warmup.log", env=env, cwd=REPO_ROOT, stdout_to_log=True)


def checkpoint_step(ctx: Context, step: Step) -> str:
    ctx.checkpoint_started = True
    start_kernel_warmup(ctx)
    root = ctx.options.scratch / "hf"
    kind = ctx.options.checkpoint
    if kind == "fixture":
        command = [ctx.python, BUILD_SCRIPT, "--root", root]
    else:
        command = [ctx.python, "-m", "fixture_checkpoint.synthetic", "--root", root, "--size", kind.split("-")[1]]
    output = run_logged(command, ctx.out / "checkpoint.log", ctx.budget(), env=script_environment(),
                        cwd=REPO_ROOT)
    facts = json.loads(output.strip().splitlines()[-1])
    ctx.pins = FixturePins(Path(facts["checkpoint"]), facts["revision"], facts["inference_sha256"])
    step.data = facts
    if kind == "fixture":
        return f"tiny fixture, revision {facts['revision'][:12]}"
    return (f"{kind}: {facts['parameters']:,} parameters, {facts['weight_bytes'] / 1e9:.2f} GB in "
            f"{facts['shards']} shards, revision {facts['revision'][:12]}, built in {facts['seconds']['total']} s "
            f"(weights {facts['seconds']['weights']} s)")


def shapes_step(ctx: Context, step: Step) -> str:
    path = ctx.options.scratch / "shapes.json"
    ctx.script("gpucheck.fit", ["--checkpoint", ctx.pins.checkpoint, "--out", path], "shapes.log")
    fitted = json.loads(path.read_text())
    ctx.shapes_path, ctx.fitted = path, fitted["shapes"]
    step.data = {"tokenizer_size": fitted["tokenizer_size"],
                 "shapes": {name: {key: value for key, value in shape.items() if key != "body"}
                            for name, shape in fitted["shapes"].items()}}
    missed = [f"{name} {shape['tokens'][0]} tokens for {shape['target_tokens']}"
              for name, shape in ctx.fitted.items() if not shape["reached"]]
    detail = "; ".join(f"{name} {'+'.join(map(str, shape['tokens']))} tokens" for name, shape in ctx.fitted.items())
    if missed and ctx.options.checkpoint != "fixture":
        raise RuntimeError("targets not reached: " + "; ".join(missed))
    if missed:
        detail += " (the tiny fixture's tokenizer cannot reach: " + "; ".join(missed) + ")"
    return detail


def kernel_warmup_step(ctx: Context, step: Step) -> str:
    job, ctx.warmup_job = ctx.warmup_job, None
    if job is None:
        raise Skip("flash-linear-attention is neither carried nor installed" if ctx.checkpoint_started
                   else "the warm-up did not start (the checkpoint step did not run)")
    try:
        finish_logged(job, ctx.budget())
    finally:
        kill_group(job)  # cut at this step's allowance: the in-process run compiles what is left itself
        step.data = _partial(ctx.out / "kernel-warmup.json")
    found = step.data
    if not found.get("warmed"):
        if found.get("lengths"):
            raise RuntimeError(f"fla's kernels failed: {found.get('reason')}")
        raise Skip(found.get("reason") or "the warm-up wrote no result")
    firsts = ", ".join(f"{length} tokens {entry['first_seconds']} s (then {entry['second_seconds']} s)"
                       for length, entry in found["lengths"].items())
    return f"fla {found['fla']} compiled and autotuned in {found['seconds']} s: first calls {firsts}"


# Of an in-process run's budget: importing torch and transformers before the script's own clock starts, and the
# last round of each shape, which may start just before that clock runs out.
INPROCESS_IMPORTS_SECONDS = 15
INPROCESS_LAST_ROUNDS_SECONDS = 10


# With flash-linear-attention the run may still fail (or compile what the warm-up did not reach); it gets this share
# of the step's allowance, so that the measurement with the torch implementations still fits in what is left. The
# allowance's expected 60 s on the GPU machine: imports ~15, loading 9 GB ~15, the warm-ups from a warm kernel
# cache and the rounds ~30.
WITH_KERNELS_SHARE = 0.65


def _run_inprocess(ctx: Context, out_name: str, block: bool, share: float = 1.0) -> dict:
    path = ctx.out / out_name
    budget = ctx.budget(share * max(0.0, ctx.step_end - time.monotonic()))
    own = budget - INPROCESS_IMPORTS_SECONDS - INPROCESS_LAST_ROUNDS_SECONDS
    arguments = ["--checkpoint", ctx.pins.checkpoint, "--shapes", ctx.shapes_path, "--out", path,
                 "--device", ctx.options.device, "--dtype", dtype_of(ctx),
                 "--rounds", str(ctx.options.rounds), "--warmup", str(ctx.options.warmup),
                 "--budget", str(max(5, int(own)))]
    if ctx.cuda:
        arguments.append("--probe")
    if ctx.kernels is not None:
        arguments += ["--kernels", ctx.kernels]
    if block:
        arguments.append("--block-kernels")
    try:
        ctx.script("gpucheck.inprocess", arguments, out_name.replace(".json", ".log"), limit=budget)
    finally:
        result = json.loads(path.read_text()) if path.is_file() else {}
    return result


def _describe_inprocess(result: dict) -> str:
    parts = [f"{name} p50 {entry['predict'].get('p50')} ms (n={entry['predict'].get('count')})"
             for name, entry in result.get("shapes", {}).items()]
    bound = ", ".join(f"{name} {entry.get('path')} ({entry.get('bound') or '?'})"
                      for name, entry in (result.get("bound") or {}).items())
    return ("; ".join(parts) + f"; load {result.get('load_seconds')} s, warm-up {result.get('warmup_seconds')} s "
            f"(first call {result.get('first_call_seconds')} s); "
            f"linear attention {result.get('linear_attention')}: {bound}")


def inprocess_step(ctx: Context, step: Step) -> str:
    note = ""
    try:
        result = _run_inprocess(ctx, "inprocess.json", block=False,
                                share=WITH_KERNELS_SHARE if ctx.kernels is not None else 1.0)
    except (RuntimeError, TimeoutError) as exc:
        first = _partial(ctx.out / "inprocess.json")
        if not first.get("kernels", {}).get("fla", {}).get("importable") or first.get("kernels_blocked"):
            step.data = first  # what was measured before the failure
            raise
        # fla imported but the run with it failed: measure with transformers' torch implementations instead.
        (ctx.out / "inprocess.json").rename(ctx.out / "inprocess-with-fla-failed.json")
        note = f"; with fla it failed ({exc}), measured without it"
        try:
            result = _run_inprocess(ctx, "inprocess.json", block=True)
        except (RuntimeError, TimeoutError):
            step.data = _partial(ctx.out / "inprocess.json")
            raise
    ctx.inprocess = result
    ctx.inprocess_path = result.get("linear_attention")
    ctx.kernels_bound = any(entry.get("path") == "fast" for entry in (result.get("bound") or {}).values())
    if ctx.cuda:
        try:
            ctx.caps = plan_caps(result)
        except (KeyError, TypeError):  # a shape or the probe is missing: served uncapped, check 6 inconclusive
            ctx.caps = unmeasured()
    step.data = {**result, "caps": ctx.caps}
    return _describe_inprocess(result) + note


def _partial(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _serve(ctx: Context, cap_gib: float | None, attempts: list, shim_log: str) -> tuple[float, dict]:
    """tritonserver with the model (under cap_gib on CUDA, uncapped when None) and the shim in front, ready; the
    stack is ctx.stack from the moment the server is up, so that the teardown stops it. Returns (seconds to ready,
    /health)."""
    repository = prepare_repository(ctx.options.scratch)
    env = ctx.pins.env()
    env.update(INTERN_DECISION_DEVICE=ctx.options.device, INTERN_DECISION_DTYPE=dtype_of(ctx),
               HF_HUB_DISABLE_PROGRESS_BARS="1", **ctx.threads(), **ctx.kernel_cache())
    if ctx.slow_kernels_allowed:
        env["INTERN_DECISION_ALLOW_SLOW_KERNELS"] = "1"
    if cap_gib is not None:
        env["INTERN_DECISION_VRAM_CAP_GIB"] = f"{cap_gib:.2f}"
    started = time.monotonic()
    server, label, tried = start_server(attempts, env, repository, ctx.server_root, ctx.python, ctx.out,
                                        ctx.budget)
    ready_seconds = round(time.monotonic() - started, 1)
    token = secrets.token_urlsafe(32)
    # The carry holds the shim's packages but not mcp's (its closure would not fit): the check serves without /mcp.
    shim = ShimServer(server, {"INTERN_DECISION_API_TOKEN": token, "INTERN_DECISION_MCP": "0"}, ctx.out / shim_log,
                      python=ctx.python)
    ctx.stack = Stack(server, shim, label, tried)  # from here on, the teardown stops both
    ctx.token_file = ctx.options.scratch / "api-token"
    ctx.token_file.write_text(token)
    ctx.token_file.chmod(0o600)
    shim.start().wait_ready(timeout=ctx.budget())
    return ready_seconds, health(shim)


def server_step(ctx: Context, step: Step) -> str:
    if ctx.cuda and ctx.inprocess_path != FAST:
        # causal-conv1d has no wheel and is not carried, so on the GPU machine the path is "mixed" (fla for the
        # delta rule, torch for the convolution), which the model refuses on CUDA unless told otherwise. The check
        # serves knowingly on that path, and the report says so in bold.
        ctx.slow_kernels_allowed = True
    if ctx.kernels_bound and ctx.kernels is not None:
        install.expose_kernels(ctx.python, ctx.kernels, ctx.out / "install.log")
    attempts = [("production", None), ("variant", VARIANT)] if ctx.gpu else [("cpu", "cpu")]
    cap = ctx.caps["production_gib"] if ctx.cuda else None
    ready_seconds, facts = _serve(ctx, cap, attempts, "shim.log")
    if ctx.cuda:
        nvidia_smi(ctx.out / "nvidia-smi.txt", "serving (after startup)")
    served = (facts.get("model") or {}).get("linear_attention")
    server, shim = ctx.stack.server, ctx.stack.shim
    step.data = {"config": ctx.stack.config, "attempts": ctx.stack.attempts, "ready_seconds": ready_seconds,
                 "vram_cap_gib": cap, "caps": ctx.caps, "kernels_exposed": bool(ctx.kernels_bound and ctx.kernels),
                 "health": facts, "linear_attention": served, "slow_kernels_allowed": ctx.slow_kernels_allowed,
                 "triton": server.http_url, "metrics": server.metrics_url, "shim": shim.url}
    capped = f", production VRAM cap {cap} GiB" if cap else (", uncapped" if ctx.cuda else "")
    slow = ", INTERN_DECISION_ALLOW_SLOW_KERNELS=1 set by the check" if ctx.slow_kernels_allowed else ""
    return (f"config {ctx.stack.config} ready after {ready_seconds} s{capped}; linear attention {served}{slow}; "
            f"shim on {shim.url}; /health {facts.get('status')}")


SERVICE_LAST_ROUND_SECONDS = 5  # a shape's last request may start just before its slice ends


def service_step(ctx: Context, step: Step) -> str:
    timed = [name for name, shape in ctx.fitted.items() if shape["timed"]]
    deadline = time.monotonic() + ctx.budget()
    results, mismatched = {}, []
    token = ctx.token_file.read_text()
    for position, name in enumerate(timed):
        seconds = max(1.0, (deadline - time.monotonic()) / (len(timed) - position) - SERVICE_LAST_ROUND_SECONDS)
        entry = time_shape(ctx.stack.shim.url, token, ctx.fitted[name]["body"], ctx.options.rounds, seconds,
                           ctx.options.warmup)
        entry["tokens_match"] = entry["tokens"] == ctx.fitted[name]["tokens"]
        if not entry["tokens_match"]:
            mismatched.append(f"{name}: service {entry['tokens']}, fitted {ctx.fitted[name]['tokens']}")
        results[name] = entry
        step.data = {"shapes": results}
    if mismatched:
        raise RuntimeError("the service scored other prompts than predict() in-process: " + "; ".join(mismatched))
    return "; ".join(f"{name} p50 {entry['client'].get('p50')} ms (n={entry['client'].get('count')})"
                     for name, entry in results.items())


OVER_CAP_CHECK = "6"  # needs an instance under a cap the largest legal call exceeds: the overcap step


def _kit_checks(ctx: Context) -> list[str]:
    return [check.strip() for check in ctx.options.kit_checks.split(",") if check.strip()]


def _run_kit(ctx: Context, step: Step, checks: list[str], name: str) -> dict:
    """The kit's checks against the stack being served, their statuses in step.data["checks"]; RuntimeError when
    one failed."""
    if not acceptance_kit.present():
        raise Skip("acceptance kit not present (no acceptance/ package in this checkout)")
    server, shim = ctx.stack.server, ctx.stack.shim
    step.data.update(checks_requested=",".join(checks))
    try:
        report = acceptance_kit.run(ctx.python, shim.url, ctx.token_file, server.metrics_url, ",".join(checks),
                                    ctx.options.kit_n, ctx.out / name, ctx.out / f"{name}.log", ctx.budget())
    except acceptance_kit.KitFailed as exc:
        step.data["checks"] = acceptance_kit.check_statuses(exc.report)
        step.data["kit"] = exc.report.get("checks")
        raise RuntimeError(f"the kit failed: {step.data['checks']}") from None
    step.data["checks"] = acceptance_kit.check_statuses(report)
    step.data["kit"] = report.get("checks")
    return report


def acceptance_step(ctx: Context, step: Step) -> str:
    checks = [check for check in _kit_checks(ctx) if check != OVER_CAP_CHECK]
    if not checks:
        raise Skip("no acceptance check but check 6 selected")
    step.data = {"vram_cap_gib": ctx.caps["production_gib"] if ctx.cuda else None}
    _run_kit(ctx, step, checks, "acceptance")
    return "checks " + ", ".join(f"{check} {status}" for check, status in step.data["checks"].items())


SERVED_CONFIGS = {"production": None, "variant": VARIANT, "cpu": "cpu"}


def overcap_step(ctx: Context, step: Step) -> str:
    if OVER_CAP_CHECK not in _kit_checks(ctx):
        raise Skip("acceptance check 6 not selected")
    caps = ctx.caps
    step.data = {"caps": caps}
    if not caps.get("separable"):
        raise Inconclusive(f"no VRAM cap lets the model start and serve the normal shapes yet stops the largest "
                           f"legal call (normal {caps['normal_gib']} GiB, largest {caps['largest_gib']} GiB, "
                           f"a margin of {caps['margin_mib']} MiB each side): {caps['why']}")
    config = ctx.stack.config if ctx.stack else "production"
    ctx.stop_stack()
    ready_seconds, facts = _serve(ctx, caps["test_gib"], [("test-cap", SERVED_CONFIGS[config])],
                                  "shim-test-cap.log")
    step.data.update(test_cap_gib=caps["test_gib"], config=config, ready_seconds=ready_seconds, health=facts)
    report = _run_kit(ctx, step, [OVER_CAP_CHECK], "acceptance-check6")
    result = (report.get("checks") or {}).get(OVER_CAP_CHECK) or {}
    detail = (f"an instance under the test cap of {caps['test_gib']} GiB (normal shapes {caps['normal_gib']} GiB, "
              f"largest call {caps['largest_gib']} GiB), ready after {ready_seconds} s: check 6 "
              f"{step.data['checks'].get(OVER_CAP_CHECK)}")
    if step.data["checks"].get(OVER_CAP_CHECK) != PASS:
        raise Inconclusive(f"{detail}: {result.get('reason')}")
    return detail


def inprocess_torch_step(ctx: Context, step: Step) -> str:
    if not ctx.kernels_bound:
        fla = ((ctx.inprocess or {}).get("kernels") or {}).get("fla", {})
        reason = "fla does not import" if not fla.get("importable") else "transformers did not bind fla"
        raise Skip(f"the in-process run already used transformers' torch implementations ({reason})")
    ctx.stop_stack()  # a quiet GPU for the measurement
    result = _run_inprocess(ctx, "inprocess-torch.json", block=True)
    step.data = result
    return _describe_inprocess(result)


@dataclass(frozen=True)
class StepSpec:
    name: str
    title: str
    function: object
    needs: tuple  # the steps it needs (passed or skipped)
    essential: bool = True  # False: skipped, not failed, when time is short; its failure still counts


# In the order they run; gpucheck.budgets.VALUE ranks them for the time they may take.
STEPS = (
    StepSpec("environment", "the machine, its Python, torch and CUDA, the GPU, fla and causal_conv1d", environment,
             ()),
    StepSpec("install", "the carried wheels installed offline into a fresh environment, the trimmed server unpacked",
             install_step, ()),
    StepSpec("stub", "the python backend stub for the service's Python in place; the server's libraries found",
             stub_step, ("install",)),
    StepSpec("checkpoint", "the synthetic full-size checkpoint (GPU) or the tiny fixture (CPU) built into scratch, "
             "fla's kernels warmed beside it", checkpoint_step, ()),
    StepSpec("shapes", "the request shapes fitted to their token counts with the checkpoint's own tokenizer",
             shapes_step, ("checkpoint",)),
    StepSpec("kernel_warmup", "fla's compiles and autotuning at every sequence length sent, finished (started with "
             "the checkpoint)", kernel_warmup_step, (), essential=False),
    StepSpec("inprocess", "predict() in-process at the shapes, warmed up, with the kernels transformers binds; "
             "each shape's memory from an emptied allocator, for the caps", inprocess_step, ("shapes",)),
    StepSpec("server", "tritonserver with the model (production config, else the variant) under the production cap, "
             "and the shim, ready", server_step, ("stub", "checkpoint")),
    StepSpec("service", "the shapes through the shim and Triton, timed at the client", service_step,
             ("server", "shapes")),
    StepSpec("acceptance", "the acceptance kit's checks that need no real weights (4, 5, 7, 8) on the service as "
             "deployed", acceptance_step, ("server",)),
    StepSpec("overcap", "acceptance check 6 on an instance restarted under a test cap between the normal shapes' "
             "peak and the largest call's", overcap_step, ("server", "inprocess"), essential=False),
    StepSpec("inprocess_torch", "predict() in-process with fla and causal_conv1d hidden (when the first run used "
             "fla)", inprocess_torch_step, ("shapes",), essential=False),
)

DEADLINES = {"gpu": 525.0, "cpu": 240.0}
# The teardown, bounded: the shim, then tritonserver (each killed past its timeout), every child group still
# running, nvidia-smi, the report and the archive.
TEARDOWN_SECONDS = {"shim": 5 + 5, "server": 15 + 5, "children": 5, "nvidia_smi": 5, "archive": 5}
RESERVE_SECONDS = sum(TEARDOWN_SECONDS.values())


def _could_run(spec: StepSpec, report: Report) -> bool:
    """False once a step it needs has ended without passing (a step still to run has no detail yet)."""
    def ended_without(step: Step) -> bool:
        return step.status in (FAIL, INCONCLUSIVE) or (step.status == NOT_RUN and bool(step.detail))

    return not any(ended_without(report.step(need)) for need in spec.needs)


def _time_refusal(mode: str, spec: StepSpec, allowed: float, later: list) -> str | None:
    expected = budgets.TIMINGS[mode][spec.name].expected
    if allowed >= expected:
        return None
    kept = [name for name in later if budgets.VALUE.index(name) < budgets.VALUE.index(spec.name)]
    return (f"{max(0.0, allowed):.0f} s left to it, below its expected {expected:.0f} s"
            + (f" (time kept for {', '.join(kept)})" if kept else ""))


def run(options: Options) -> Report:
    report = Report(options.out, options.mode, options.deadline, [Step(spec.name, spec.title) for spec in STEPS])
    report.facts.update(mode=options.mode, device=options.device, checkpoint=options.checkpoint,
                        out=str(options.out))
    deadline = Deadline(options.deadline, reserve=RESERVE_SECONDS)
    ctx = Context(options, report, deadline)
    if options.files.exists():
        shutil.rmtree(options.files)
    options.files.mkdir(parents=True)
    options.out.mkdir(parents=True, exist_ok=True)
    for stale in options.out.iterdir():  # a folder reused from an earlier run holds only this run's files
        if stale.is_file() and stale.name in OUT_FILES:
            stale.unlink()
    _write_out(ctx)
    deadline.arm()
    timings = budgets.TIMINGS[options.mode]
    try:
        for position, spec in enumerate(STEPS):
            step = report.step(spec.name)
            missing = [need for need in spec.needs if report.step(need).status not in (PASS, SKIPPED)]
            if missing:
                step.detail = f"not run: needs {', '.join(missing)}"
                _write_out(ctx)
                continue
            later = [other.name for other in STEPS[position + 1:] if _could_run(other, report)]
            allowed = budgets.allowance(options.mode, spec.name, deadline.remaining(), later)
            refusal = _time_refusal(options.mode, spec, allowed, later)
            if refusal:
                step.status = NOT_RUN if spec.essential else SKIPPED
                step.detail = ("not run: " if spec.essential else "skipped: ") + refusal
                _write_out(ctx)
                continue
            started = time.monotonic()
            ctx.step_end = started + allowed
            try:
                step.detail = spec.function(ctx, step) or ""
                step.status = PASS
            except Skip as exc:
                step.status, step.detail = SKIPPED, str(exc)
            except Inconclusive as exc:
                step.status, step.detail = INCONCLUSIVE, str(exc)
            except DeadlineReached as exc:
                step.status, step.detail = FAIL, f"{exc} during this step"
                raise
            except Exception as exc:  # a failed step is reported, and the steps that do not need it still run
                step.status, step.detail = FAIL, f"{type(exc).__name__}: {exc}"
            finally:
                step.seconds = round(time.monotonic() - started, 1)
                step.data.setdefault("allowance_seconds", round(allowed, 1))
                step.data.setdefault("limit_seconds", timings[spec.name].limit)
                _write_out(ctx)
    except (DeadlineReached, KeyboardInterrupt) as exc:
        for step in report.steps.values():
            if step.status == NOT_RUN and not step.detail:
                step.detail = f"not run: {exc or 'interrupted'}"
    finally:
        Deadline.disarm()
        kill_all()
        ctx.stop_stack()
        if ctx.cuda:
            nvidia_smi(ctx.out / "nvidia-smi.txt", "at the end", timeout=TEARDOWN_SECONDS["nvidia_smi"])
        report.finished = time.time()
        _write_out(ctx)
    return report


def _write_out(ctx: Context) -> None:
    """The reports, and the archive of every log with both reports in it: rewritten after every step, so that what
    comes back from a run cut from outside is as complete as the last step."""
    report, options = ctx.report, ctx.options
    report.facts.update(_facts(ctx))
    plan = [member for member in archive.plan(options.files) if member.name not in ("report.json", "report.md")]
    report.facts["archive"] = archive.describe(plan, ARCHIVE_NAME)
    report.write()
    copies = []
    for name in ("report.json", "report.md"):
        shutil.copy2(options.out / name, options.files / name)
        size = (options.files / name).stat().st_size
        copies.append(archive.Member(name, size, size))
    archive.write(plan + copies, options.files, options.out / ARCHIVE_NAME)


def _facts(ctx: Context) -> dict:
    steps = {name: {"data": step.data} for name, step in ctx.report.steps.items()}
    def data_of(name: str) -> dict:
        return ctx.report.steps[name].data if name in ctx.report.steps else {}

    server = data_of("server")
    facts = {
        "service_python": ctx.python,
        "served_config": server.get("config"),
        "vram_cap_gib": ctx.caps["production_gib"] if ctx.cuda else None,
        "check6_test_cap_gib": ctx.caps["test_gib"] if ctx.cuda else None,
        "cap_choice": ctx.caps["why"] if ctx.cuda else None,
        "fla_warmup": _warmup_fact(data_of("kernel_warmup")),
        "fla_first_inprocess_call_seconds": (ctx.inprocess or {}).get("first_call_seconds"),
        "kernels_in_service": "fla" if ctx.kernels_bound else "torch (transformers' reference)",
        "linear_attention_inprocess": ctx.inprocess_path,
        "linear_attention_served": server.get("linear_attention"),
        "slow_kernels_allowed": ctx.slow_kernels_allowed,
        "hidden_from_service": [entry["distribution"] for entry in
                                data_of("install").get("hidden", [])] or None,
        "latency": latency_rows(steps),
    }
    return {key: value for key, value in facts.items() if value is not None}


def _warmup_fact(found: dict) -> str | None:
    if not found:
        return None
    if found.get("warmed"):
        return f"fla {found['fla']} warmed in {found['seconds']} s at {', '.join(found['lengths'])} tokens"
    return f"not warmed: {found.get('reason')}"
