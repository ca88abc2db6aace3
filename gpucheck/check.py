"""The check's steps, in order: each named, with its own budget under the overall deadline, its dependencies, and
its entry in the report (written after every step, and at the end whatever happened)."""
from __future__ import annotations

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
from gpucheck import acceptance_kit, archive, install, shapes, stub
from gpucheck.cap import choose_cap, fallback_cap
from gpucheck.carry import REPO_ROOT
from gpucheck.deadline import Deadline, DeadlineReached, kill_all, run_logged
from gpucheck.environment import nvidia_smi
from gpucheck.report import FAIL, NOT_RUN, PASS, SKIPPED, Report, Step
from gpucheck.service import time_shape
from gpucheck.stack import VARIANT, Stack, health, prepare_repository, start_server
from gpucheck.summary import latency_rows
from intern_decision_model.kernels import FAST


ARCHIVE_NAME = "gpucheck-files.tar.gz"
OUT_FILES = ("report.json", "report.md", ARCHIVE_NAME)  # everything the check leaves in --out


class Skip(Exception):
    """The step does not apply here; the message says why."""


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
    cap: dict | None = None
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


def checkpoint_step(ctx: Context, step: Step) -> str:
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


# Of an in-process run's budget: importing torch and transformers before the script's own clock starts, and the
# last round of each shape, which may start just before that clock runs out.
INPROCESS_IMPORTS_SECONDS = 15
INPROCESS_LAST_ROUNDS_SECONDS = 10


# With flash-linear-attention, the first run may spend its time compiling and autotuning and still fail; it gets this
# share of the step, so that the measurement with the torch implementations still fits in what is left.
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
    return ("; ".join(parts) + f"; load {result.get('load_seconds')} s, warm-up {result.get('warmup_seconds')} s; "
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
            ctx.cap = choose_cap(result)
        except (KeyError, TypeError):  # a shape or the probe is missing: the server step falls back
            ctx.cap = None
    step.data = {**result, "cap": ctx.cap}
    return _describe_inprocess(result) + note


def _partial(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def server_step(ctx: Context, step: Step) -> str:
    repository = prepare_repository(ctx.options.scratch)
    env = ctx.pins.env()
    env.update(INTERN_DECISION_DEVICE=ctx.options.device, INTERN_DECISION_DTYPE=dtype_of(ctx),
               HF_HUB_DISABLE_PROGRESS_BARS="1", **ctx.threads(), **ctx.kernel_cache())
    if ctx.cuda and ctx.inprocess_path != FAST:
        # causal-conv1d has no wheel and is not carried, so on the GPU machine the path is "mixed" (fla for the
        # delta rule, torch for the convolution), which the model refuses on CUDA unless told otherwise. The check
        # serves knowingly on that path, and the report says so in bold.
        env["INTERN_DECISION_ALLOW_SLOW_KERNELS"] = "1"
        ctx.slow_kernels_allowed = True
    if ctx.cuda:
        if ctx.cap is None:
            index = json.loads((ctx.pins.checkpoint / "model.safetensors.index.json").read_text())
            ctx.cap = fallback_cap(index["metadata"]["total_size"])
        env["INTERN_DECISION_VRAM_CAP_GIB"] = f"{ctx.cap['cap_gib']:.2f}"
    if ctx.kernels_bound and ctx.kernels is not None:
        install.expose_kernels(ctx.python, ctx.kernels, ctx.out / "install.log")
    if ctx.gpu:
        attempts = [("production", None), ("variant", VARIANT)]
    else:
        attempts = [("cpu", "cpu")]
    started = time.monotonic()
    server, label, tried = start_server(attempts, env, repository, ctx.server_root, ctx.python, ctx.out,
                                        ctx.budget)
    ready_seconds = round(time.monotonic() - started, 1)
    token = secrets.token_urlsafe(32)
    shim = ShimServer(server, {"INTERN_DECISION_API_TOKEN": token}, ctx.out / "shim.log", python=ctx.python)
    ctx.stack = Stack(server, shim, label, tried)  # from here on, the teardown stops both
    ctx.token_file = ctx.options.scratch / "api-token"
    ctx.token_file.write_text(token)
    ctx.token_file.chmod(0o600)
    shim.start().wait_ready(timeout=ctx.budget())
    facts = health(shim)
    if ctx.cuda:
        nvidia_smi(ctx.out / "nvidia-smi.txt", "serving (after startup)")
    served = (facts.get("model") or {}).get("linear_attention")
    step.data = {"config": label, "attempts": tried, "ready_seconds": ready_seconds, "cap": ctx.cap,
                 "kernels_exposed": bool(ctx.kernels_bound and ctx.kernels), "health": facts,
                 "linear_attention": served, "slow_kernels_allowed": ctx.slow_kernels_allowed,
                 "triton": server.http_url, "metrics": server.metrics_url, "shim": shim.url}
    cap = f", VRAM cap {ctx.cap['cap_gib']} GiB" if ctx.cap else ""
    slow = ", INTERN_DECISION_ALLOW_SLOW_KERNELS=1 set by the check" if ctx.slow_kernels_allowed else ""
    return (f"config {label} ready after {ready_seconds} s{cap}; linear attention {served}{slow}; "
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


def acceptance_step(ctx: Context, step: Step) -> str:
    if not acceptance_kit.present():
        raise Skip("acceptance kit not present (no acceptance/ package in this checkout)")
    server, shim = ctx.stack.server, ctx.stack.shim
    step.data = {"checks_requested": ctx.options.kit_checks, "cap": ctx.cap}
    try:
        report = acceptance_kit.run(ctx.python, shim.url, ctx.token_file, server.metrics_url, ctx.options.kit_checks,
                                    ctx.options.kit_n, ctx.out / "acceptance", ctx.out / "acceptance.log",
                                    ctx.budget())
    except acceptance_kit.KitFailed as exc:
        step.data["checks"] = acceptance_kit.check_statuses(exc.report)
        raise RuntimeError(f"the kit failed: {step.data['checks']}") from None
    step.data["checks"] = acceptance_kit.check_statuses(report)
    return "checks " + ", ".join(f"{check} {status}" for check, status in step.data["checks"].items())


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
    essential: bool = True  # False: skipped, not failed, when the time left is below its budget


# In the order of their value: the served stack and the acceptance kit before the torch-only comparison.
STEPS = (
    StepSpec("environment", "the machine, its Python, torch and CUDA, the GPU, fla and causal_conv1d", environment,
             ()),
    StepSpec("install", "the carried wheels installed offline into a fresh environment, the trimmed server unpacked",
             install_step, ()),
    StepSpec("stub", "the python backend stub for the service's Python in place; the server's libraries found",
             stub_step, ("install",)),
    StepSpec("checkpoint", "the synthetic full-size checkpoint (GPU) or the tiny fixture (CPU) built into scratch",
             checkpoint_step, ()),
    StepSpec("shapes", "the request shapes fitted to their token counts with the checkpoint's own tokenizer",
             shapes_step, ("checkpoint",)),
    StepSpec("inprocess", "predict() in-process at the shapes, warmed up, with the kernels transformers binds; "
             "memory for the cap", inprocess_step, ("shapes",)),
    StepSpec("server", "tritonserver with the model (production config, else the variant) and the shim, ready",
             server_step, ("stub", "checkpoint")),
    StepSpec("service", "the shapes through the shim and Triton, timed at the client", service_step,
             ("server", "shapes")),
    StepSpec("acceptance", "the acceptance kit's checks that need no real weights", acceptance_step, ("server",)),
    StepSpec("inprocess_torch", "predict() in-process with fla and causal_conv1d hidden (when the first run used "
             "fla)", inprocess_torch_step, ("shapes",), essential=False),
)

# Seconds per step, per mode. A step runs only when the deadline leaves it its whole budget, and every command it
# runs is cut to what its budget leaves, so the essential steps' budgets must add up to no more than the deadline
# less the teardown's reserve (tests/unit/test_gpucheck_budgets.py holds that arithmetic).
BUDGETS = {
    "gpu": {"environment": 15, "install": 45, "stub": 5, "checkpoint": 65, "shapes": 20, "inprocess": 125,
            "server": 80, "service": 35, "acceptance": 85, "inprocess_torch": 60},
    "cpu": {"environment": 15, "install": 0, "stub": 10, "checkpoint": 25, "shapes": 15, "inprocess": 35,
            "server": 40, "service": 25, "acceptance": 30, "inprocess_torch": 30},
}
DEADLINES = {"gpu": 525.0, "cpu": 240.0}
# The teardown, bounded: the shim, then tritonserver (each killed past its timeout), every child group still
# running, nvidia-smi, the report and the archive.
TEARDOWN_SECONDS = {"shim": 5 + 5, "server": 15 + 5, "children": 5, "nvidia_smi": 5, "archive": 5}
RESERVE_SECONDS = sum(TEARDOWN_SECONDS.values())


def _time_refusal(spec: StepSpec, budget: float, left: float) -> str | None:
    if budget <= left:
        return None
    return f"{left:.0f} s of the deadline left, below this step's budget of {budget:.0f} s"


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
    report.write()
    deadline.arm()
    budgets = BUDGETS[options.mode]
    try:
        for spec in STEPS:
            step = report.step(spec.name)
            missing = [need for need in spec.needs if report.step(need).status not in (PASS, SKIPPED)]
            if missing:
                step.detail = f"not run: needs {', '.join(missing)}"
                report.write()
                continue
            refusal = _time_refusal(spec, budgets[spec.name], deadline.remaining())
            if refusal:
                step.status = NOT_RUN if spec.essential else SKIPPED
                step.detail = ("not run: " if spec.essential else "skipped: ") + refusal
                report.write()
                continue
            started = time.monotonic()
            ctx.step_end = started + budgets[spec.name]
            try:
                step.detail = spec.function(ctx, step) or ""
                step.status = PASS
            except Skip as exc:
                step.status, step.detail = SKIPPED, str(exc)
            except DeadlineReached as exc:
                step.status, step.detail = FAIL, f"{exc} during this step"
                raise
            except Exception as exc:  # a failed step is reported, and the steps that do not need it still run
                step.status, step.detail = FAIL, f"{type(exc).__name__}: {exc}"
            finally:
                step.seconds = round(time.monotonic() - started, 1)
                step.data.setdefault("budget_seconds", budgets[spec.name])
                report.write()
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
        report.facts.update(_facts(ctx))
        plan = archive.plan(options.files)
        report.facts["archive"] = archive.describe(plan, ARCHIVE_NAME)
        report.finished = time.time()
        report.write()
        copies = []
        for name in ("report.json", "report.md"):
            shutil.copy2(options.out / name, options.files / name)
            copies.append(archive.Member(name, (options.files / name).stat().st_size,
                                         (options.files / name).stat().st_size))
        archive.write(plan + copies, options.files, options.out / ARCHIVE_NAME)
    return report


def _facts(ctx: Context) -> dict:
    steps = {name: {"data": step.data} for name, step in ctx.report.steps.items()}
    def data_of(name: str) -> dict:
        return ctx.report.steps[name].data if name in ctx.report.steps else {}

    server = data_of("server")
    facts = {
        "service_python": ctx.python,
        "served_config": server.get("config"),
        "vram_cap_gib": (ctx.cap or {}).get("cap_gib"),
        "cap_choice": (ctx.cap or {}).get("why"),
        "over_cap_call_expected": (ctx.cap or {}).get("separable"),
        "kernels_in_service": "fla" if ctx.kernels_bound else "torch (transformers' reference)",
        "linear_attention_inprocess": ctx.inprocess_path,
        "linear_attention_served": server.get("linear_attention"),
        "slow_kernels_allowed": ctx.slow_kernels_allowed,
        "hidden_from_service": [entry["distribution"] for entry in
                                data_of("install").get("hidden", [])] or None,
        "latency": latency_rows(steps),
    }
    return {key: value for key, value in facts.items() if value is not None}
