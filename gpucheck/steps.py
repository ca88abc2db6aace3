"""The check's steps, each a function of the context that returns a Found: its one-line detail, what it measured
(its report entry's data) and what it found for the steps after it (gpucheck.findings). A step raises Skip or
Inconclusive (with its data), or any error; what it measured before an error travels with it (context.keeping).
Steps read what earlier steps found (ctx.findings) and never write it, nor their report entry: gpucheck.check
records both. They hand the runner its resources (the served stack, the kernel warm-up) through the context's
methods. gpucheck.check runs them in order under their allowances."""
from __future__ import annotations

import importlib.util
import json
import os
import secrets
import time
from pathlib import Path

from devstack.fixture import BUILD_SCRIPT, FixturePins
from devstack.shim import ShimServer
from devstack.triton import bundled_server_root, interpreter_libdir
from gpucheck import acceptance_kit, budgets, install, kernel_lengths, libpython, libraries, stub
from gpucheck.cap import plan_caps, unmeasured
from gpucheck.carry import REPO_ROOT
from gpucheck.context import Context, Inconclusive, ServiceFault, Skip, dtype_of, keeping, script_environment
from gpucheck.deadline import StepTimeout, finish_logged, kill_group, run_logged, start_logged
from gpucheck.environment import nvidia_smi
from gpucheck.findings import Found
from gpucheck.report import PASS
from gpucheck.service import time_shape
from gpucheck.stack import VARIANT, Stack, health, prepare_repository, start_server
from intern_decision_model.kernels import FAST


def environment_step(ctx: Context) -> Found:
    path = ctx.out / "environment.json"
    ctx.script("gpucheck.environment", ["--out", path], "environment.log", python=ctx.machine_python)
    facts = json.loads(path.read_text())
    facts["nvidia_smi"] = nvidia_smi(ctx.out / "nvidia-smi.txt", "at start")
    gpu = facts.get("gpu")
    card = f"{gpu['name']} ({gpu['capability']}, {gpu['memory_gib']} GiB)" if gpu else "none"
    kernels = facts.get("kernels", {})
    detail = (f"Python {facts['python']}, torch {facts.get('torch')} (CUDA {facts.get('torch_cuda')}), "
              f"transformers {facts.get('transformers')}, numpy {facts.get('numpy')}; GPU: {card}; "
              + "; ".join(f"{name} {'imports, ' + str(entry['version']) if entry['importable'] else 'does not import'}"
                          for name, entry in kernels.items()))
    if ctx.cuda and not facts.get("cuda_available"):
        with keeping(facts):
            raise RuntimeError(f"torch sees no CUDA device. {detail}")
    return Found(detail, facts)


def install_step(ctx: Context) -> Found:
    if not ctx.gpu:
        raise Skip(".venv (scripts/bootstrap.sh) has everything the CPU run needs")
    facts = install.install(ctx.machine_python, ctx.options.carry, ctx.options.scratch, ctx.out / "install.log",
                            ctx.budget)
    manifest = ctx.options.carry / "manifest.json"
    if manifest.is_file():
        carried = json.loads(manifest.read_text())
        facts["carried_bytes"] = carried.get("carry_bytes")
        facts["carried_with_repository_bytes"] = carried.get("total_bytes")
    python, kernels = facts["python"], Path(facts["kernels"]) if facts["kernels"] else None
    return Found(f"environment {python}: " + ", ".join(f"{k} {v}" for k, v in facts["versions"].items())
                 + f"; server unpacked; kernel packages {'installed apart' if kernels else 'not carried'}", facts,
                 python=python, server_root=Path(facts["server_root"]), kernels=kernels)


def stub_step(ctx: Context) -> Found:
    root = ctx.options.server_root or ctx.findings.server_root or bundled_server_root()
    version = install.version_of(ctx.findings.python)
    placed = stub.place(root, version)
    chosen = libpython.choose(interpreter_libdir(ctx.findings.python), version, ctx.options.carry,
                              ctx.options.scratch)
    problems = stub.linkage_problems(root, chosen["libdir"], ctx.out / "ldd.txt")
    data = {"server_root": str(root), "python_version": version, "stub": str(placed), "libdir": chosen["libdir"],
            "libpython": chosen["used"], "libpython_detail": chosen["detail"], "linkage_problems": problems}
    if problems:
        with keeping(data):
            raise RuntimeError("the server or its stub cannot load: " + "; ".join(problems))
    return Found(f"stub for Python {version} in place; libpython: {chosen['detail']}; every library of the server "
                 f"and the stub found (ldd.txt)", data, server_root=root,
                 libpython_dir=chosen["libdir"] if chosen["used"] == "carried" else None)


# The sequence lengths the kernels are warmed at, in the order they are warmed: the shapes' calls, then one length
# in each of fla's length buckets that the kit's growth probes reach and the shapes do not (gpucheck.kernel_lengths).
WARM_LENGTHS = kernel_lengths.warm_lengths()


def start_kernel_warmup(ctx: Context):
    """flash-linear-attention's compiles and autotuning, in the background while the checkpoint is built (the
    kernel_warmup step waits for it). Not started where fla is neither carried nor installed (the CPU run): None."""
    kernels = ctx.findings.kernels
    if kernels is None and importlib.util.find_spec("fla") is None:
        return None
    size = "full" if ctx.options.checkpoint == "synthetic-full" else "small"
    arguments = ["--size", size, "--device", ctx.options.device, "--dtype", dtype_of(ctx),
                 "--lengths", ",".join(map(str, WARM_LENGTHS)), "--out", ctx.out / "kernel-warmup.json"]
    if kernels is not None:
        arguments += ["--kernels", kernels]
    env = script_environment({**ctx.threads(), **ctx.kernel_cache(), "TRITON_PRINT_AUTOTUNING": "1"})
    return start_logged([ctx.findings.python, "-m", "gpucheck.warm_kernels", *arguments],
                        ctx.out / "kernel-warmup.log", env=env, cwd=REPO_ROOT, stdout_to_log=True)


def checkpoint_step(ctx: Context) -> Found:
    ctx.start_warmup(lambda: start_kernel_warmup(ctx))  # the runner's from here on, whatever the build does
    python = ctx.findings.python
    root = ctx.options.scratch / "hf"
    kind = ctx.options.checkpoint
    if kind == "fixture":
        command = [python, BUILD_SCRIPT, "--root", root]
    else:
        command = [python, "-m", "fixture_checkpoint.synthetic", "--root", root, "--size", kind.split("-")[1]]
    output = run_logged(command, ctx.out / "checkpoint.log", ctx.budget(), env=script_environment(),
                        cwd=REPO_ROOT)
    facts = json.loads(output.strip().splitlines()[-1])
    pins = FixturePins(Path(facts["checkpoint"]), facts["revision"], facts["inference_sha256"])
    if kind == "fixture":
        return Found(f"tiny fixture, revision {facts['revision'][:12]}", facts, pins=pins)
    return Found(f"{kind}: {facts['parameters']:,} parameters, {facts['weight_bytes'] / 1e9:.2f} GB in "
                 f"{facts['shards']} shards, revision {facts['revision'][:12]}, built in "
                 f"{facts['seconds']['total']} s (weights {facts['seconds']['weights']} s)", facts, pins=pins)


def shapes_step(ctx: Context) -> Found:
    path = ctx.options.scratch / "shapes.json"
    ctx.script("gpucheck.fit", ["--checkpoint", ctx.findings.pins.checkpoint, "--out", path], "shapes.log")
    written = json.loads(path.read_text())
    fitted = written["shapes"]
    data = {"tokenizer_size": written["tokenizer_size"],
            "shapes": {name: {key: value for key, value in shape.items() if key != "body"}
                       for name, shape in fitted.items()}}
    missed = [f"{name} {shape['tokens'][0]} tokens for {shape['target_tokens']}"
              for name, shape in fitted.items() if not shape["reached"]]
    detail = "; ".join(f"{name} {'+'.join(map(str, shape['tokens']))} tokens" for name, shape in fitted.items())
    if missed and ctx.options.checkpoint != "fixture":
        with keeping(data):
            raise RuntimeError("targets not reached: " + "; ".join(missed))
    if missed:
        detail += " (the tiny fixture's tokenizer cannot reach: " + "; ".join(missed) + ")"
    return Found(detail, data, shapes_path=path, fitted=fitted)


def kernel_warmup_step(ctx: Context) -> Found:
    """Waits for the warm-up up to this step's allowance. A warm-up still running then, one that exits with an error
    or one that fails at some lengths is recorded and skipped, never a failure: the in-process run compiles what it
    did not reach (or measures with torch where fla fails), and says which lengths compiled where."""
    job = ctx.take_warmup()
    if job is None:
        raise Skip("flash-linear-attention is neither carried nor installed" if ctx.warmup_started
                   else "the warm-up did not start (the checkpoint step did not run)")
    allowance = ctx.budget()
    cut = None
    try:
        finish_logged(job, allowance)
    except StepTimeout:
        cut = f"still running at its {allowance:.0f} s allowance: stopped"
    except RuntimeError as exc:
        cut = f"exited with an error: {exc}"
    finally:
        kill_group(job)  # cut at this step's allowance: the in-process run compiles what is left itself
    found = _partial(ctx.out / "kernel-warmup.json")
    data = {**found, "cut": cut} if cut else found
    lengths = found.get("lengths") or {}
    warmed = [length for length, entry in lengths.items() if "second_seconds" in entry]
    failed = {length: entry["error"] for length, entry in lengths.items() if "error" in entry}
    if not cut and not failed and found.get("warmed"):
        firsts = ", ".join(f"{length} tokens {entry['first_seconds']} s (then {entry['second_seconds']} s)"
                           for length, entry in lengths.items())
        return Found(f"fla {found['fla']} compiled and autotuned in {found['seconds']} s: first calls {firsts}", data)
    if not cut and not lengths:
        raise Skip(found.get("reason") or "the warm-up wrote no result", data)
    parts = [f"the warm-up {cut}"] if cut else []
    parts.append(f"warmed at {', '.join(warmed)} tokens" if warmed else "warmed at no length")
    if failed:
        parts.append("fla failed at " + "; ".join(f"{length} tokens ({error})" for length, error in failed.items()))
    raise Skip("recorded, not a failure: " + "; ".join(parts)
               + "; the in-process run compiles the rest, or measures with torch where fla fails", data)


# Of an in-process run's budget: importing torch and transformers before the script's own clock starts, and the
# last round of each shape, which may start just before that clock runs out.
INPROCESS_IMPORTS_SECONDS = 15
INPROCESS_LAST_ROUNDS_SECONDS = 10


# With flash-linear-attention the run may still fail (or compile what the warm-up did not reach); it gets this share
# of the step's allowance, and never so much that the measurement with the torch implementations would be left less
# than it needs (budgets.need_of "inprocess_torch"). The allowance's expected 60 s on the GPU machine: imports ~15,
# loading 9 GB ~15, the warm-ups from a warm kernel cache and the rounds ~30.
WITH_KERNELS_SHARE = 0.65


def _left(ctx: Context) -> float:
    return max(0.0, ctx.step_end - time.monotonic())


def _torch_need(ctx: Context) -> float:
    return budgets.need_of(ctx.options.mode, "inprocess_torch")


def _with_kernels_seconds(ctx: Context) -> float:
    """The run with fla: its share of what is left, less what the torch fallback would need after it."""
    left = _left(ctx)
    return max(0.0, min(WITH_KERNELS_SHARE * left, left - _torch_need(ctx)))


def _run_inprocess(ctx: Context, out_name: str, block: bool, seconds: float | None = None) -> dict:
    path = ctx.out / out_name
    budget = ctx.budget(_left(ctx) if seconds is None else seconds)
    own = budget - INPROCESS_IMPORTS_SECONDS - INPROCESS_LAST_ROUNDS_SECONDS
    arguments = ["--checkpoint", ctx.findings.pins.checkpoint, "--shapes", ctx.findings.shapes_path, "--out", path,
                 "--device", ctx.options.device, "--dtype", dtype_of(ctx),
                 "--rounds", str(ctx.options.rounds), "--warmup", str(ctx.options.warmup),
                 "--budget", str(max(5, int(own)))]
    if ctx.cuda:
        arguments.append("--probe")
    if ctx.findings.kernels is not None:
        arguments += ["--kernels", ctx.findings.kernels]
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


def inprocess_step(ctx: Context) -> Found:
    leftover = ctx.take_warmup()  # a warm-up whose step gave way (time was short) does not share the card with it
    if leftover is not None:
        kill_group(leftover)
    note = ""
    try:
        result = _run_inprocess(ctx, "inprocess.json", block=False,
                                seconds=_with_kernels_seconds(ctx) if ctx.findings.kernels is not None else None)
    except (RuntimeError, TimeoutError) as exc:
        first = _partial(ctx.out / "inprocess.json")
        if not first.get("kernels", {}).get("fla", {}).get("importable") or first.get("kernels_blocked"):
            with keeping(first):  # what was measured before the failure
                raise
        # fla imported but the run with it failed: measure with transformers' torch implementations instead.
        (ctx.out / "inprocess.json").rename(ctx.out / "inprocess-with-fla-failed.json")
        if _left(ctx) < _torch_need(ctx):
            with keeping(first):
                raise RuntimeError(f"with fla it failed ({exc}); {_left(ctx):.0f} s were left, below the "
                                   f"{_torch_need(ctx):.0f} s the measurement with torch's implementations needs: "
                                   f"not started") from exc
        note = f"; with fla it failed ({exc}), measured without it"
        try:
            result = _run_inprocess(ctx, "inprocess.json", block=True)
        except (RuntimeError, TimeoutError):
            with keeping(_partial(ctx.out / "inprocess.json")):
                raise
    caps = ctx.findings.caps
    if ctx.cuda:
        try:
            caps = plan_caps(result)
        except (KeyError, TypeError):  # a shape or the probe is missing: served uncapped, check 6 inconclusive
            caps = unmeasured()
    compiled = _where_compiled(ctx, result)
    data = {**result, "caps": caps, "compiled": compiled}
    if compiled:
        here = sorted({tokens for calls in compiled.values() for tokens, where in calls.items() if where != "warm-up"},
                      key=int)
        note += (f"; fla compiled in-process at {', '.join(here)} tokens (the warm-up did not reach them)" if here
                 else "; every length's fla kernels came from the warm-up")
    return Found(_describe_inprocess(result) + note, data, inprocess=result,
                 inprocess_path=result.get("linear_attention"),
                 kernels_bound=any(entry.get("path") == "fast" for entry in (result.get("bound") or {}).values()),
                 caps=caps)


def _where_compiled(ctx: Context, result: dict) -> dict | None:
    """Which lengths' fla kernels the warm-up compiled and which the in-process run did (None without fla): from what
    the warm-up wrote, so a warm-up cut or failed at some lengths shows here."""
    if not any(entry.get("path") == FAST for entry in (result.get("bound") or {}).values()):
        return None
    warm = _partial(ctx.out / "kernel-warmup.json")
    warmed = [int(length) for length, entry in (warm.get("lengths") or {}).items() if "second_seconds" in entry]
    calls = {name: shape["tokens"] for name, shape in ctx.findings.fitted.items()}
    return kernel_lengths.where_compiled(calls, warmed)


def _partial(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


# The share of the server step's allowance an attempt that another follows may take (the production config, with
# the KIND_MODEL variant after it): a production server that hangs leaves the variant the other half, which on the
# GPU machine (150 s) is 75 s against the 60 s a start is expected to take.
FIRST_ATTEMPT_SHARE = 0.5


def attempt_timeout(ctx: Context, allowance: float, position: int, attempts: int) -> float:
    """Seconds attempt number `position` of `attempts` may take to get ready: at most FIRST_ATTEMPT_SHARE of the
    step's allowance while another attempt follows it, all that is left for the last one."""
    left = ctx.budget()
    if position < attempts - 1:
        return min(left, FIRST_ATTEMPT_SHARE * allowance)
    return left


def _serve(ctx: Context, cap_gib: float | None, attempts: list, shim_log: str) -> tuple[float, dict]:
    """tritonserver with the model (under cap_gib on CUDA, uncapped when None) and the shim in front, ready; the
    context holds the stack (ctx.stack, with its token) from the moment the server is up, so that the teardown
    stops it. Returns (seconds to ready, /health)."""
    findings = ctx.findings
    repository = prepare_repository(ctx.options.scratch)
    env = findings.pins.env()
    env.update(INTERN_DECISION_DEVICE=ctx.options.device, INTERN_DECISION_DTYPE=dtype_of(ctx),
               HF_HUB_DISABLE_PROGRESS_BARS="1", **ctx.threads(), **ctx.kernel_cache())
    if findings.slow_kernels_allowed:
        env["INTERN_DECISION_ALLOW_SLOW_KERNELS"] = "1"
    if cap_gib is not None:
        env["INTERN_DECISION_VRAM_CAP_GIB"] = f"{cap_gib:.2f}"
    if findings.libpython_dir:  # the carried libpython, for an interpreter without its own
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            part for part in (findings.libpython_dir, os.environ.get("LD_LIBRARY_PATH", "")) if part)
    started = time.monotonic()
    allowance = ctx.step_end - started
    server, label, tried = start_server(attempts, env, repository, findings.server_root, findings.python, ctx.out,
                                        lambda position: attempt_timeout(ctx, allowance, position, len(attempts)))
    ready_seconds = round(time.monotonic() - started, 1)
    token = secrets.token_urlsafe(32)
    # The carry holds the shim's packages but not mcp's (its closure would not fit): the check serves without /mcp.
    shim = ShimServer(server, {"INTERN_DECISION_API_TOKEN": token, "INTERN_DECISION_MCP": "0"}, ctx.out / shim_log,
                      python=findings.python)
    token_file = ctx.options.scratch / "api-token"
    ctx.hold_stack(Stack(server, shim, label, tried, token_file))  # from here on, the teardown stops both
    token_file.write_text(token)
    token_file.chmod(0o600)
    shim.start().wait_ready(timeout=ctx.budget())
    return ready_seconds, health(shim)


def serving_choice(ctx: Context) -> dict:
    """What the server step serves with, decided as it starts: the runner records it before the step runs, so that
    the report says it even when serving fails (gpucheck.check.StepSpec.decide)."""
    # causal-conv1d has no wheel and is not carried, so on the GPU machine the path is "mixed" (fla for the delta
    # rule, torch for the convolution), which the model refuses on CUDA unless told otherwise. The check serves
    # knowingly on that path, and the report says so in bold.
    return {"slow_kernels_allowed": ctx.cuda and ctx.findings.inprocess_path != FAST}


def server_step(ctx: Context) -> Found:
    findings = ctx.findings
    if findings.kernels_bound and findings.kernels is not None:
        install.expose_kernels(findings.python, findings.kernels, ctx.out / "install.log")
    attempts = [("production", None), ("variant", VARIANT)] if ctx.gpu else [("cpu", "cpu")]
    cap = findings.caps["production_gib"] if ctx.cuda else None
    ready_seconds, facts = _serve(ctx, cap, attempts, "shim.log")
    if ctx.cuda:
        nvidia_smi(ctx.out / "nvidia-smi.txt", "serving (after startup)")
    served = (facts.get("model") or {}).get("linear_attention")
    server, shim = ctx.stack.server, ctx.stack.shim
    loaded = _libraries_compared(server.pid, (findings.inprocess or {}).get("libraries") or {})
    data = {"config": ctx.stack.config, "attempts": ctx.stack.attempts, "ready_seconds": ready_seconds,
            "vram_cap_gib": cap, "caps": findings.caps,
            "kernels_exposed": bool(findings.kernels_bound and findings.kernels), "health": facts,
            "linear_attention": served, "slow_kernels_allowed": findings.slow_kernels_allowed,
            "triton": server.http_url, "metrics": server.metrics_url, "shim": shim.url, "libraries": loaded}
    capped = f", production VRAM cap {cap} GiB" if cap else (", uncapped" if ctx.cuda else "")
    slow = ", INTERN_DECISION_ALLOW_SLOW_KERNELS=1 set by the check" if findings.slow_kernels_allowed else ""
    differ = "; ".join(f"{name}: stub {files[0]}, in-process {files[1]}" for name, files in loaded["differ"].items())
    return Found(f"config {ctx.stack.config} ready after {ready_seconds} s{capped}; linear attention {served}{slow}; "
                 f"shim on {shim.url}; /health {facts.get('status')}; "
                 + (f"libraries NOT the in-process run's: {differ}" if differ else
                    f"{len(loaded['stub'])} watched libraries, the same files as in-process where both loaded them"),
                 data)


def _libraries_compared(server_pid: int | None, inprocess: dict) -> dict:
    """The watched libraries the model's stub loaded (gpucheck.libraries), against the in-process run's."""
    stub_libraries: dict = {}
    for pid in libraries.children(server_pid) if server_pid else []:
        stub_libraries.update(libraries.loaded(pid))
    return {"stub": stub_libraries, "inprocess": inprocess,
            "differ": libraries.differences(stub_libraries, inprocess)}


SERVICE_LAST_ROUND_SECONDS = 5  # a shape's last request may start just before its slice ends


def service_step(ctx: Context) -> Found:
    fitted = ctx.findings.fitted
    timed = [name for name, shape in fitted.items() if shape["timed"]]
    deadline = time.monotonic() + ctx.budget()
    results, mismatched = {}, []
    token = ctx.stack.token_file.read_text()
    with keeping({"shapes": results}) as data:  # the shapes timed so far, if the step is cut
        for position, name in enumerate(timed):
            seconds = max(1.0, (deadline - time.monotonic()) / (len(timed) - position) - SERVICE_LAST_ROUND_SECONDS)
            entry = time_shape(ctx.stack.shim.url, token, fitted[name]["body"], ctx.options.rounds, seconds,
                               ctx.options.warmup)
            entry["tokens_match"] = entry["tokens"] == fitted[name]["tokens"]
            if not entry["tokens_match"]:
                mismatched.append(f"{name}: service {entry['tokens']}, fitted {fitted[name]['tokens']}")
            results[name] = entry
        if mismatched:
            raise ServiceFault("the service scored other prompts than predict() in-process: " + "; ".join(mismatched))
    return Found("; ".join(f"{name} p50 {entry['client'].get('p50')} ms (n={entry['client'].get('count')})"
                           for name, entry in results.items()), data)


OVER_CAP_CHECK = "6"  # needs an instance under a cap the largest legal call exceeds: the overcap step


def _kit_checks(ctx: Context) -> list[str]:
    return [check.strip() for check in ctx.options.kit_checks.split(",") if check.strip()]


def _run_kit(ctx: Context, data: dict, checks: list[str], name: str) -> dict:
    """The kit's checks against the stack being served, their statuses into data["checks"] (the calling step's
    data); ServiceFault when one failed."""
    if not acceptance_kit.present():
        raise Skip("acceptance kit not present (no acceptance/ package in this checkout)", data)
    server, shim = ctx.stack.server, ctx.stack.shim
    data.update(checks_requested=",".join(checks))
    try:
        report = acceptance_kit.run(ctx.findings.python, shim.url, ctx.stack.token_file, server.metrics_url,
                                    ",".join(checks), ctx.options.kit_n, ctx.out / name, ctx.out / f"{name}.log",
                                    ctx.budget())
    except acceptance_kit.KitFailed as exc:
        data.update(checks=acceptance_kit.check_statuses(exc.report), kit=exc.report.get("checks"))
        raise ServiceFault(f"the kit failed: {data['checks']}") from None
    data.update(checks=acceptance_kit.check_statuses(report), kit=report.get("checks"))
    return report


def acceptance_step(ctx: Context) -> Found:
    checks = [check for check in _kit_checks(ctx) if check != OVER_CAP_CHECK]
    if not checks:
        raise Skip("no acceptance check but check 6 selected")
    with keeping({"vram_cap_gib": ctx.findings.caps["production_gib"] if ctx.cuda else None}) as data:
        _run_kit(ctx, data, checks, "acceptance")
    unproven = [check for check in checks if data["checks"].get(check) in ("inconclusive", "not_run")]
    return Found("checks " + ", ".join(f"{check} {status}" for check, status in data["checks"].items())
                 + (f"; unproven, not deciding: {', '.join(unproven)} (the kit's report says why)" if unproven else ""),
                 data)


SERVED_CONFIGS = {"production": None, "variant": VARIANT, "cpu": "cpu"}


def overcap_step(ctx: Context) -> Found:
    if OVER_CAP_CHECK not in _kit_checks(ctx):
        raise Skip("acceptance check 6 not selected")
    caps = ctx.findings.caps
    with keeping({"caps": caps}) as data:
        return _check_over_cap(ctx, caps, data)


def _check_over_cap(ctx: Context, caps: dict, data: dict) -> Found:
    if not caps.get("separable"):
        raise Inconclusive(f"cannot separate on this card: no VRAM cap lets the model start and serve the normal "
                           f"shapes yet stops the largest legal call (normal {caps['normal_gib']} GiB reserved, "
                           f"largest {caps['largest_gib']} GiB allocated, a margin of {caps['margin_mib']} MiB "
                           f"each side): {caps['why']}")
    config = ctx.stack.config if ctx.stack else "production"
    ctx.stop_stack()
    ready_seconds, facts = _serve(ctx, caps["test_gib"], [("test-cap", SERVED_CONFIGS[config])],
                                  "shim-test-cap.log")
    data.update(test_cap_gib=caps["test_gib"], config=config, ready_seconds=ready_seconds, health=facts)
    try:
        report = _run_kit(ctx, data, [OVER_CAP_CHECK], "acceptance-check6")
    except ServiceFault:  # a finding: what the card's memory looked like goes with the kit's report
        if ctx.cuda:
            data["nvidia_smi_after"] = nvidia_smi(ctx.out / "nvidia-smi.txt", "after check 6 failed")
        raise
    result = (report.get("checks") or {}).get(OVER_CAP_CHECK) or {}
    detail = (f"an instance under the test cap of {caps['test_gib']} GiB (normal shapes {caps['normal_gib']} GiB, "
              f"largest call {caps['largest_gib']} GiB), ready after {ready_seconds} s: check 6 "
              f"{data['checks'].get(OVER_CAP_CHECK)}")
    if data["checks"].get(OVER_CAP_CHECK) != PASS:
        raise Inconclusive(f"{detail}: {result.get('reason')}")
    return Found(detail, data)


def inprocess_torch_step(ctx: Context) -> Found:
    if not ctx.findings.kernels_bound:
        fla = ((ctx.findings.inprocess or {}).get("kernels") or {}).get("fla", {})
        reason = "fla does not import" if not fla.get("importable") else "transformers did not bind fla"
        raise Skip(f"the in-process run already used transformers' torch implementations ({reason})")
    ctx.stop_stack()  # a quiet GPU for the measurement
    try:
        result = _run_inprocess(ctx, "inprocess-torch.json", block=True)
    except Exception:
        with keeping(_partial(ctx.out / "inprocess-torch.json")):  # cut or failed: what it measured before
            raise
    return Found(_describe_inprocess(result), result)
