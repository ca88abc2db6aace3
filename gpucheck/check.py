"""The check's steps, in order: each named, with its own budget under the overall deadline, its dependencies, and
its entry in the report (written after every step, and at the end whatever happened)."""
from __future__ import annotations

import json
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from devstack.fixture import BUILD_SCRIPT, FixturePins
from devstack.shim import ShimServer
from devstack.triton import bundled_server_root, interpreter_libdir
from gpucheck import acceptance_kit, install, shapes, stub
from gpucheck.cap import choose_cap, fallback_cap
from gpucheck.carry import REPO_ROOT
from gpucheck.deadline import Deadline, DeadlineReached, kill_all, run_logged
from gpucheck.environment import nvidia_smi
from gpucheck.report import FAIL, NOT_RUN, PASS, SKIPPED, Report, Step
from gpucheck.service import time_shape
from gpucheck.stack import VARIANT, Stack, health, prepare_repository, start_server
from gpucheck.summary import latency_rows


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

    @property
    def gpu(self) -> bool:
        return self.options.mode == "gpu"

    @property
    def cuda(self) -> bool:
        return self.options.device == "cuda"

    @property
    def out(self) -> Path:
        return self.options.out

    def budget(self, limit: float) -> float:
        return self.deadline.budget(limit)

    def script(self, module: str, arguments: list, log: str, limit: float, python: str | None = None) -> str:
        """Run one of the check's scripts (or another module) in the service's interpreter, from the repository."""
        return run_logged([python or self.python, "-m", module, *arguments], self.out / log, self.budget(limit),
                          env=script_environment(self.threads()), cwd=REPO_ROOT)

    def threads(self) -> dict:
        # On the CPU, one torch thread for the model in-process and in the stub alike: the two are compared, and
        # on a small machine the stub, the server, the shim and the client share the cores.
        return {} if self.cuda else {"OMP_NUM_THREADS": "1"}

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
    ctx.script("gpucheck.environment", ["--out", path], "environment.log", 120, python=ctx.machine_python)
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
                            ctx.budget(240))
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
    output = run_logged(command, ctx.out / "checkpoint.log", ctx.budget(240), env=script_environment(),
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
    ctx.script("gpucheck.fit", ["--checkpoint", ctx.pins.checkpoint, "--out", path], "shapes.log", 120)
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


def _run_inprocess(ctx: Context, out_name: str, limit: float, block: bool) -> dict:
    path = ctx.out / out_name
    budget = ctx.budget(limit)
    allowance = 60 if ctx.cuda else 25  # importing torch and transformers, loading the model
    arguments = ["--checkpoint", ctx.pins.checkpoint, "--shapes", ctx.shapes_path, "--out", path,
                 "--device", ctx.options.device, "--dtype", dtype_of(ctx),
                 "--rounds", str(ctx.options.rounds), "--warmup", str(ctx.options.warmup),
                 "--budget", str(max(5, int(budget - allowance)))]
    if ctx.cuda:
        arguments.append("--probe")
    if ctx.kernels is not None:
        arguments += ["--kernels", ctx.kernels]
    if block:
        arguments.append("--block-kernels")
    try:
        ctx.script("gpucheck.inprocess", arguments, out_name.replace(".json", ".log"), budget)
    finally:
        result = json.loads(path.read_text()) if path.is_file() else {}
    return result


def _describe_inprocess(result: dict) -> str:
    parts = [f"{name} p50 {entry['predict'].get('p50')} ms (n={entry['predict'].get('count')})"
             for name, entry in result.get("shapes", {}).items()]
    bound = ", ".join(f"{k}: {v}" for k, v in (result.get("bound") or {}).items())
    return "; ".join(parts) + f"; load {result.get('load_seconds')} s; bound {bound}"


def inprocess_step(ctx: Context, step: Step) -> str:
    note = ""
    try:
        result = _run_inprocess(ctx, "inprocess.json", 150, block=False)
    except (RuntimeError, TimeoutError) as exc:
        first = _partial(ctx.out / "inprocess.json")
        if not first.get("kernels", {}).get("fla", {}).get("importable") or first.get("kernels_blocked"):
            step.data = first  # what was measured before the failure
            raise
        # fla imported but the run with it failed: measure with transformers' torch implementations instead.
        (ctx.out / "inprocess.json").rename(ctx.out / "inprocess-with-fla-failed.json")
        note = f"; with fla it failed ({exc}), measured without it"
        try:
            result = _run_inprocess(ctx, "inprocess.json", 150, block=True)
        except (RuntimeError, TimeoutError):
            step.data = _partial(ctx.out / "inprocess.json")
            raise
    ctx.inprocess = result
    ctx.kernels_bound = any("fla" in str(value) for value in (result.get("bound") or {}).values())
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
               HF_HUB_DISABLE_PROGRESS_BARS="1", **ctx.threads())
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
                                        lambda: ctx.budget(300))
    ready_seconds = round(time.monotonic() - started, 1)
    token = secrets.token_urlsafe(32)
    shim = ShimServer(server, {"INTERN_DECISION_API_TOKEN": token}, ctx.out / "shim.log", python=ctx.python)
    ctx.stack = Stack(server, shim, label, tried)  # from here on, the teardown stops both
    ctx.token_file = ctx.options.scratch / "api-token"
    ctx.token_file.write_text(token)
    ctx.token_file.chmod(0o600)
    shim.start().wait_ready(timeout=ctx.budget(60))
    facts = health(shim)
    if ctx.cuda:
        nvidia_smi(ctx.out / "nvidia-smi.txt", "serving (after startup)")
    step.data = {"config": label, "attempts": tried, "ready_seconds": ready_seconds, "cap": ctx.cap,
                 "kernels_exposed": bool(ctx.kernels_bound and ctx.kernels), "health": facts,
                 "triton": server.http_url, "metrics": server.metrics_url, "shim": shim.url}
    cap = f", VRAM cap {ctx.cap['cap_gib']} GiB" if ctx.cap else ""
    return f"config {label} ready after {ready_seconds} s{cap}; shim on {shim.url}; /health {facts.get('status')}"


def service_step(ctx: Context, step: Step) -> str:
    timed = [name for name, shape in ctx.fitted.items() if shape["timed"]]
    budget = ctx.budget(120)
    deadline = time.monotonic() + budget
    results, mismatched = {}, []
    token = ctx.token_file.read_text()
    for position, name in enumerate(timed):
        seconds = max(1.0, (deadline - time.monotonic()) / (len(timed) - position) - 5)
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
                                    ctx.budget(150))
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
    result = _run_inprocess(ctx, "inprocess-torch.json", 150, block=True)
    step.data = result
    return _describe_inprocess(result)


# name, what it checks, function, the steps it needs (passed or skipped)
STEPS = (
    ("environment", "the machine, its Python, torch and CUDA, the GPU, fla and causal_conv1d", environment, ()),
    ("install", "the carried wheels installed offline into a fresh environment, the trimmed server unpacked",
     install_step, ()),
    ("stub", "the python backend stub for the service's Python in place; the server's libraries found", stub_step,
     ("install",)),
    ("checkpoint", "the synthetic full-size checkpoint (GPU) or the tiny fixture (CPU) built into scratch",
     checkpoint_step, ()),
    ("shapes", "the request shapes fitted to their token counts with the checkpoint's own tokenizer", shapes_step,
     ("checkpoint",)),
    ("inprocess", "predict() in-process at the shapes, with the kernels transformers binds; memory for the cap",
     inprocess_step, ("shapes",)),
    ("server", "tritonserver with the model (production config, else the variant) and the shim, ready",
     server_step, ("stub", "checkpoint")),
    ("service", "the shapes through the shim and Triton, timed at the client", service_step, ("server", "shapes")),
    ("acceptance", "the acceptance kit's checks that need no real weights", acceptance_step, ("server",)),
    ("inprocess_torch", "predict() in-process with fla and causal_conv1d hidden (when the first run used fla)",
     inprocess_torch_step, ("shapes",)),
)


def run(options: Options) -> Report:
    report = Report(options.out, options.mode, options.deadline, [Step(name, title) for name, title, _, _ in STEPS])
    report.facts.update(mode=options.mode, device=options.device, checkpoint=options.checkpoint,
                        out=str(options.out))
    deadline = Deadline(options.deadline, reserve=25)
    ctx = Context(options, report, deadline)
    options.out.mkdir(parents=True, exist_ok=True)
    options.scratch.mkdir(parents=True, exist_ok=True)
    report.write()
    deadline.arm()
    try:
        for name, _, function, needs in STEPS:
            step = report.step(name)
            missing = [need for need in needs if report.step(need).status not in (PASS, SKIPPED)]
            if missing:
                step.detail = f"not run: needs {', '.join(missing)}"
                report.write()
                continue
            started = time.monotonic()
            try:
                step.detail = function(ctx, step) or ""
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
            nvidia_smi(options.out / "nvidia-smi.txt", "at the end")
        report.facts.update(_facts(ctx))
        report.finished = time.time()
        report.write()
    return report


def _facts(ctx: Context) -> dict:
    steps = {name: {"data": step.data} for name, step in ctx.report.steps.items()}
    server = ctx.report.step("server").data
    facts = {
        "service_python": ctx.python,
        "served_config": server.get("config"),
        "vram_cap_gib": (ctx.cap or {}).get("cap_gib"),
        "cap_choice": (ctx.cap or {}).get("why"),
        "over_cap_call_expected": (ctx.cap or {}).get("separable"),
        "kernels_in_service": "fla" if ctx.kernels_bound else "torch (transformers' reference)",
        "latency": latency_rows(steps),
    }
    return {key: value for key, value in facts.items() if value is not None}
