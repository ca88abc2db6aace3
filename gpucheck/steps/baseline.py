"""The in-process figures: predict() in one process with the kernels transformers binds (inprocess), again with
them hidden (inprocess_torch) and with causal-conv1d alone hidden (inprocess_mixed), and eager against CUDA graphs
(graphs); each a gpucheck.inprocess run under what the step has left."""
from __future__ import annotations

import json
import time
from pathlib import Path

from gpucheck import budgets, interpreter_rounds, kernel_lengths, shared_launcher
from gpucheck.cap import plan_caps, unmeasured
from gpucheck.carry import REPO_ROOT
from gpucheck.context import Context, Inconclusive, Skip, dtype_of, keeping, script_environment, written_so_far
from gpucheck.deadline import kill_group
from gpucheck.findings import Found
from intern_decision_model.kernels import FAST

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


def _run_inprocess(ctx: Context, out_name: str, block: bool, seconds: float | None = None,
                   extra: tuple[str, ...] = (), python: str | None = None) -> dict:
    path = ctx.out / out_name
    budget = ctx.budget(_left(ctx) if seconds is None else seconds)
    arguments = _inprocess_arguments(ctx, path, budget, block, extra)
    try:
        ctx.script("gpucheck.inprocess", arguments, out_name.replace(".json", ".log"), limit=budget, python=python)
    finally:
        result = json.loads(path.read_text()) if path.is_file() else {}
    return result


def _inprocess_arguments(ctx: Context, path: Path, budget: float, block: bool, extra: tuple[str, ...]) -> list:
    own = budget - INPROCESS_IMPORTS_SECONDS - INPROCESS_LAST_ROUNDS_SECONDS
    arguments = ["--checkpoint", ctx.findings.pins.checkpoint, "--shapes", ctx.findings.shapes_path, "--out", path,
                 "--device", ctx.options.device, "--dtype", dtype_of(ctx),
                 "--rounds", str(ctx.options.rounds), "--warmup", str(ctx.options.warmup),
                 "--budget", str(max(5, int(own)))]
    if ctx.cuda and "--serve-rounds" not in extra:
        arguments.append("--probe")
    if ctx.findings.kernels is not None:
        arguments += ["--kernels", ctx.findings.kernels]
    if block:
        arguments.append("--block-kernels")
    return arguments + list(extra)


def _describe_inprocess(result: dict) -> str:
    parts = [f"{name} p50 {entry['predict'].get('p50')} ms (n={entry['predict'].get('count')})"
             for name, entry in result.get("shapes", {}).items()]
    bound = ", ".join(f"{name} {entry.get('path')} ({entry.get('bound') or '?'})"
                      for name, entry in (result.get("bound") or {}).items())
    return ("; ".join(parts) + f"; load {result.get('load_seconds')} s, warm-up {result.get('warmup_seconds')} s "
            f"(first call {result.get('first_call_seconds')} s); "
            f"linear attention {result.get('linear_attention')}: {bound}")


def _conv_bound(result: dict) -> bool:
    return ((result.get("bound") or {}).get("causal_conv1d_fn") or {}).get("path") == FAST


def _fallbacks(first: dict) -> list[tuple[str, bool, tuple[str, ...]]]:
    """What to measure, in order, after a run with the kernels failed: (the path's name, block every kernel, extra
    arguments). causal-conv1d failing alone leaves fla's delta rule, which served on the card before it: the mixed
    path first, then torch's."""
    mixed = [("the mixed path (fla kept, torch's conv)", False, ("--block-conv",))] if _conv_bound(first) else []
    return mixed + [("torch's implementations", True, ())]


def inprocess_step(ctx: Context) -> Found:
    leftover = ctx.take_warmup()  # a warm-up whose step gave way (time was short) does not share the card with it
    if leftover is not None:
        kill_group(leftover)
    note = ""
    try:
        result = _run_inprocess(ctx, "inprocess.json", block=False,
                                seconds=_with_kernels_seconds(ctx) if ctx.findings.kernels is not None else None)
    except (RuntimeError, TimeoutError) as exc:
        first = written_so_far(ctx.out / "inprocess.json")
        if not first.get("kernels", {}).get("fla", {}).get("importable") or first.get("kernels_blocked"):
            with keeping(first):  # what was measured before the failure
                raise
        (ctx.out / "inprocess.json").rename(ctx.out / "inprocess-with-kernels-failed.json")
        result, note = _measure_fallbacks(ctx, first, exc)
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


def _measure_fallbacks(ctx: Context, first: dict, failure: Exception) -> tuple[dict, str]:
    """The in-process figures on the next path that works, after the kernels' run failed: (its result, the note that
    says each path tried and why it did not serve)."""
    note, last = f"; with the kernels it failed ({failure})", failure
    fallbacks = _fallbacks(first)
    for position, (path, block, extra) in enumerate(fallbacks):
        final = position == len(fallbacks) - 1
        if _left(ctx) < _torch_need(ctx):
            with keeping(first):
                raise RuntimeError(f"{note[2:]}; {_left(ctx):.0f} s were left, below the {_torch_need(ctx):.0f} s "
                                   f"the measurement on {path} needs: not started") from last
        try:
            # a path that may fail leaves what the next one needs; the last one gets all that is left
            result = _run_inprocess(ctx, "inprocess.json", block=block, extra=extra,
                                    seconds=None if final else _with_kernels_seconds(ctx))
        except (RuntimeError, TimeoutError) as exc:
            if final:
                with keeping(written_so_far(ctx.out / "inprocess.json")):
                    raise
            (ctx.out / "inprocess.json").rename(ctx.out / "inprocess-mixed-failed.json")
            note, last = note + f"; on {path} it failed ({exc})", exc
            continue
        return result, note + f"; measured on {path}"
    raise AssertionError("the last fallback returns or raises")


def _where_compiled(ctx: Context, result: dict) -> dict | None:
    """Which lengths' fla kernels the warm-up compiled and which the in-process run did (None without fla): from what
    the warm-up wrote, so a warm-up cut or failed at some lengths shows here."""
    if not any(entry.get("path") == FAST for entry in (result.get("bound") or {}).values()):
        return None
    warm = written_so_far(ctx.out / "kernel-warmup.json")
    warmed = [int(length) for length, entry in (warm.get("lengths") or {}).items() if "second_seconds" in entry]
    calls = {name: shape["tokens"] for name, shape in ctx.findings.fitted.items()}
    return kernel_lengths.where_compiled(calls, warmed)



def inprocess_torch_step(ctx: Context) -> Found:
    if not ctx.findings.kernels_bound:
        fla = ((ctx.findings.inprocess or {}).get("kernels") or {}).get("fla", {})
        reason = "fla does not import" if not fla.get("importable") else "transformers did not bind fla"
        raise Skip(f"the in-process run already used transformers' torch implementations ({reason})")
    ctx.stop_stack()  # a quiet GPU for the measurement
    try:
        result = _run_inprocess(ctx, "inprocess-torch.json", block=True)
    except Exception:
        with keeping(written_so_far(ctx.out / "inprocess-torch.json")):  # cut or failed: what it measured before
            raise
    return Found(_describe_inprocess(result), result)


def _blocked(ctx: Context) -> bool:
    """Whether the in-process figures were measured with the kernels hidden (their forward failed): the runs
    compared with them do the same."""
    return bool((ctx.findings.inprocess or {}).get("kernels_blocked"))


def inprocess_mixed_step(ctx: Context) -> Found:
    """The path served without causal-conv1d (fla's delta rule, torch's conv), beside the production path."""
    bound = (ctx.findings.inprocess or {}).get("bound") or {}
    if (bound.get("causal_conv1d_fn") or {}).get("path") != FAST:
        raise Skip("the in-process run did not bind causal-conv1d: its figures are already the mixed path's")
    ctx.stop_stack()
    try:
        result = _run_inprocess(ctx, "inprocess-mixed.json", block=False, extra=("--block-conv",))
    except Exception:
        with keeping(written_so_far(ctx.out / "inprocess-mixed.json")):
            raise
    return Found(_describe_inprocess(result), result)


def graphs_step(ctx: Context) -> Found:
    """Each timed shape in process, eager and from CUDA graphs (exact, bucketed): p50, max |Δp|, labels,
    bit-identity."""
    if not ctx.cuda:
        raise Skip("CUDA graphs need a CUDA device")
    ctx.stop_stack()
    try:
        result = _run_inprocess(ctx, "inprocess-graphs.json", block=_blocked(ctx), extra=("--graphs",))
    except Exception:
        with keeping(written_so_far(ctx.out / "inprocess-graphs.json")):
            raise
    graphs = result.get("graphs") or {}
    if "skipped" in graphs:
        raise Skip(graphs["skipped"])
    return Found(describe_graphs(graphs), result)


def describe_graphs(graphs: dict) -> str:
    parts = []
    for name, modes in (graphs.get("shapes") or {}).items():
        cells = []
        for mode in ("exact", "bucketed"):
            entry = modes.get(mode) or {}
            if entry:
                labels = entry.get("labels_differing")
                cells.append(f"{mode} {entry.get('predict', {}).get('p50')} against eager "
                             f"{entry.get('eager', {}).get('p50')}, alternated (|Δp| {entry.get('max_abs_dp'):.2g}, "
                             f"{'bit-identical' if entry.get('bit_identical') else 'not bit-identical'}"
                             f"{', labels differ: ' + ', '.join(labels) if labels else ''})")
        parts.append(f"{name} p50 ms: " + ", ".join(cells))
    for mode in ("exact", "bucketed"):
        facts = graphs.get(mode) or {}
        if facts.get("off_reason"):
            parts.append(f"{mode} off: {facts['off_reason']}")
        if facts.get("refused"):
            parts.append(f"{mode} refused: " + ", ".join(f"{shape} ({why})" for shape, why in facts["refused"].items()))
    return "; ".join(parts)


def inprocess_shared_step(ctx: Context) -> Found:
    """predict() in process on the shared libpython the stub runs on, against the interpreter's own binary and, as
    the A/A control, that binary again: three workers timed round by round (gpucheck.interpreter_rounds)."""
    if not ctx.gpu:
        raise Skip("compares the GPU machine's static interpreter with its shared libpython")
    stub = ctx.report.step("stub").data
    try:
        library = shared_launcher.shared_library(stub.get("libdir") or "", stub.get("python_version") or "")
        launcher = shared_launcher.build(library, Path(ctx.findings.python).parent)
        runtime = shared_launcher.runs_shared(launcher)
        own_runtime = shared_launcher.runs_shared(Path(ctx.findings.python))
    except shared_launcher.LauncherUnavailable as exc:
        raise Skip(str(exc)) from None
    ctx.stop_stack()
    timed_shapes = [name for name, shape in ctx.findings.fitted.items() if shape["timed"]]
    interpreters = {interpreter_rounds.OWN: ctx.findings.python, interpreter_rounds.OWN_AGAIN: ctx.findings.python,
                    interpreter_rounds.SHARED: str(launcher)}
    env = script_environment({**ctx.threads(), **ctx.kernel_cache()})
    workers = {}
    try:
        for arm, python in interpreters.items():
            arguments = _inprocess_arguments(ctx, ctx.out / f"inprocess-shared-{arm}.json", ctx.budget(), _blocked(ctx),
                                             ("--serve-rounds",))
            workers[arm] = interpreter_rounds.Worker([python, "-m", "gpucheck.inprocess", *arguments],
                                                     ctx.out / "inprocess-shared.log", env, REPO_ROOT)
        for worker in workers.values():
            worker.wait_ready()
        timed = interpreter_rounds.alternated({arm: worker.round for arm, worker in workers.items()}, timed_shapes,
                                              ctx.options.rounds, max(1.0, _left(ctx) - SHARED_CLOSE_SECONDS))
    finally:
        for worker in workers.values():
            worker.close()
    result = {**interpreter_rounds.verdict(timed, not own_runtime.get("shared")), "libpython": str(library),
              "runtime": runtime, "own_runtime": own_runtime, "round_ms": timed}
    (ctx.out / "inprocess-shared.json").write_text(json.dumps(result, indent=2) + "\n")
    line = f"on {library.name}, alternated with the interpreter's own binary: " + "; ".join(
        f"{name} p50 shared {entry['shared'].get('p50')} ms, own {entry['own'].get('p50')}, own again "
        f"{entry['own_again'].get('p50')} (A/B {entry['ab_percent']} %, A/A control {entry['aa_percent']} %)"
        for name, entry in result["shapes"].items())
    if result["void"]:
        raise Inconclusive(f"{result['void']}; {line}", result)
    return Found(line, result)


SHARED_CLOSE_SECONDS = 15  # the workers' last rounds and their exit
