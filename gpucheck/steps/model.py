"""The steps that prepare the model's inputs: the checkpoint built into scratch (with the kernel warm-up started beside
it), the request shapes fitted to their token counts, and the warm-up waited for."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from devstack.fixture import BUILD_SCRIPT, FixturePins
from gpucheck import kernel_lengths
from gpucheck.carry import REPO_ROOT
from gpucheck.context import Context, Skip, dtype_of, keeping, script_environment, written_so_far
from gpucheck.deadline import StepTimeout, finish_logged, kill_group, run_logged, start_logged
from gpucheck.findings import Found

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
    found = written_so_far(ctx.out / "kernel-warmup.json")
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
