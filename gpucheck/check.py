"""The check's runner: its steps in order (gpucheck.steps), each named, with its time allowance under the overall
deadline (gpucheck.budgets), its dependencies, and its entry in the report. It is the one place that records what
the steps found into the context (each step returns a gpucheck.findings.Found), and it owns what outlives a step:
the teardown stops the served stack and every process still running, the warm-up included. The reports and the
archive of every log are rewritten after every step, and at the end whatever happened, so that a run cut from
outside still returns what was done."""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, replace

from gpucheck import archive, budgets, diagnosis, graph_health
from gpucheck.context import Context, Inconclusive, Options, ServiceFault, Skip
from gpucheck.deadline import Deadline, DeadlineReached, kill_all
from gpucheck.environment import nvidia_smi
from gpucheck.report import FAIL, FINDING, INCONCLUSIVE, NOT_RUN, PASS, SKIPPED, Report, Step
from gpucheck.steps import (
    acceptance_step,
    checkpoint_step,
    environment_step,
    graphs_step,
    inprocess_mixed_step,
    inprocess_shared_step,
    inprocess_step,
    inprocess_torch_step,
    install_step,
    kernel_warmup_step,
    overcap_step,
    server_step,
    service_step,
    serving_choice,
    shapes_step,
    stub_step,
)
from gpucheck.summary import latency_rows

ARCHIVE_NAME = "gpucheck-files.tar.gz"
OUT_FILES = ("report.json", "report.md", ARCHIVE_NAME)  # everything the check leaves in --out


@dataclass(frozen=True)
class StepSpec:
    name: str
    title: str
    function: object  # (ctx) -> gpucheck.findings.Found; raises Skip, Inconclusive or an error, with its data
    needs: tuple  # the steps it needs (passed or skipped)
    # False: skipped, not failed, when time is short or it runs out; a fault of the service it sees is a finding
    # (outcome_of_error); none of its outcomes decides the run
    essential: bool = True
    decide: object = None  # ctx -> findings the step acts on, recorded as it starts (kept when it fails)


# In the order they run; gpucheck.budgets.VALUE ranks them for the time they may take.
STEPS = (
    StepSpec("environment", "the machine, its Python, torch and CUDA, the GPU, fla and causal_conv1d",
             environment_step, ()),
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
             "and the shim, ready", server_step, ("stub", "checkpoint"), decide=serving_choice),
    StepSpec("service", "the shapes through the shim and Triton, timed at the client", service_step,
             ("server", "shapes")),
    StepSpec("acceptance", "the acceptance kit's checks that need no real weights (4, 5, 7, 8) on the service as "
             "deployed", acceptance_step, ("server",)),
    StepSpec("overcap", "acceptance check 6 on an instance restarted under a test cap between the normal shapes' "
             "peak and the largest call's", overcap_step, ("server", "inprocess"), essential=False),
    StepSpec("inprocess_torch", "predict() in-process with fla and causal_conv1d hidden (when the first run used "
             "fla)", inprocess_torch_step, ("shapes",), essential=False),
    StepSpec("inprocess_mixed", "predict() in-process with causal_conv1d alone hidden: the mixed path beside the "
             "production one (when the first run used causal-conv1d)", inprocess_mixed_step, ("shapes",),
             essential=False),
    StepSpec("graphs", "predict() in-process at each timed shape, eager and replayed from CUDA graphs (exact, "
             "bucketed): p50, max |Δp|, labels, bit-identity", graphs_step, ("shapes",), essential=False),
    StepSpec("inprocess_shared", "predict() in-process on the shared libpython the stub runs on, beside the "
             "interpreter's own binary", inprocess_shared_step, ("shapes", "stub", "inprocess"), essential=False),
)

DEADLINES = {"gpu": 525.0, "cpu": 240.0}
# The teardown, bounded: the shim, then tritonserver (each killed past its timeout), every child group still
# running, nvidia-smi, the report and the archive.
TEARDOWN_SECONDS = {"shim": 5 + 5, "server": 15 + 5, "children": 5, "nvidia_smi": 5, "archive": 5}
RESERVE_SECONDS = sum(TEARDOWN_SECONDS.values())


def wanted(only: tuple[str, ...]) -> set[str]:
    """The steps a run with --only runs: those named, every step they need (transitively), and the environment
    (what the machine is, for the report); every step when none is named."""
    if not only:
        return {spec.name for spec in STEPS}
    by_name = {spec.name: spec for spec in STEPS}
    unknown = sorted(set(only) - set(by_name))
    if unknown:
        raise ValueError(f"no such step: {', '.join(unknown)} (the steps: {', '.join(by_name)})")
    chosen, pending = set(), list(only)
    while pending:
        name = pending.pop()
        if name not in chosen:
            chosen.add(name)
            pending.extend(by_name[name].needs)
    return chosen | {"environment"}


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


def _data_of(exc: Exception) -> dict:
    """What a step measured before it raised (gpucheck.context.keeping), for its report entry."""
    return dict(getattr(exc, "data", None) or {})


def outcome_of_error(spec: StepSpec, exc: Exception) -> tuple[str, str]:
    """(status, detail) of a step that raised. An essential step fails. An optional one never decides the run: a
    fault of the service it saw (ServiceFault: check 6's kit failing on its first run on a card) is a finding,
    reported with everything the step saw; one that ran out of time is skipped, and one the check could not finish
    for another reason (a server that did not start under the test cap, a measurement that broke) is inconclusive:
    what it measured up to then stays in its data."""
    described = f"{type(exc).__name__}: {exc}"
    if spec.essential:
        return FAIL, described
    if isinstance(exc, ServiceFault):
        return FINDING, f"a finding on this card's first look, not a verdict on the run: {described}"
    if isinstance(exc, TimeoutError):
        return SKIPPED, f"ran out of time, recorded and skipped ({described})"
    return INCONCLUSIVE, f"could not be finished, not a fault of the service ({described})"


def run(options: Options) -> Report:
    report = Report(options.out, options.mode, options.deadline,
                    [Step(spec.name, spec.title, essential=spec.essential) for spec in STEPS])
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
    chosen = wanted(options.only)
    try:
        for position, spec in enumerate(STEPS):
            step = report.step(spec.name)
            if spec.name not in chosen:
                step.status, step.detail = SKIPPED, f"not asked for (--only {','.join(options.only)})"
                _write_out(ctx)
                continue
            missing = [need for need in spec.needs if report.step(need).status not in (PASS, SKIPPED)]
            if missing:
                step.detail = f"not run: needs {', '.join(missing)}"
                _write_out(ctx)
                continue
            later = [other.name for other in STEPS[position + 1:] if other.name in chosen and _could_run(other, report)]
            allowed = budgets.allowance(options.mode, spec.name, deadline.remaining(), later)
            refusal = _time_refusal(options.mode, spec, allowed, later)
            if refusal:
                step.status = NOT_RUN if spec.essential else SKIPPED
                step.detail = ("not run: " if spec.essential else "skipped: ") + refusal
                _write_out(ctx)
                continue
            started = time.monotonic()
            ctx.step_end = started + allowed
            logs_before = diagnosis.snapshot(options.files)
            try:
                if spec.decide is not None:
                    ctx.findings = replace(ctx.findings, **spec.decide(ctx))
                found = spec.function(ctx)
                ctx.findings = replace(ctx.findings, **found.facts)
                step.data = dict(found.data)
                step.detail = found.summary or ""
                step.status = PASS
            except Skip as exc:
                step.status, step.detail, step.data = SKIPPED, str(exc), _data_of(exc)
            except Inconclusive as exc:
                step.status, step.detail, step.data = INCONCLUSIVE, str(exc), _data_of(exc)
            except DeadlineReached as exc:
                step.status = FAIL if spec.essential else SKIPPED
                step.detail, step.data = f"{exc} during this step", _data_of(exc)
                raise
            except Exception as exc:  # a failed step is reported, and the steps that do not need it still run
                step.status, step.detail = outcome_of_error(spec, exc)
                step.data = _data_of(exc)
            finally:
                step.seconds = round(time.monotonic() - started, 1)
                step.data.setdefault("allowance_seconds", round(allowed, 1))
                step.data.setdefault("limit_seconds", timings[spec.name].limit)
                if step.status not in (PASS, SKIPPED):
                    _diagnose(step, options, diagnosis.written_since(options.files, logs_before))
                _write_out(ctx)
    except (DeadlineReached, KeyboardInterrupt) as exc:
        for step in report.steps.values():
            if step.status == NOT_RUN and not step.detail:
                if step.essential:
                    step.detail = f"not run: {exc or 'interrupted'}"
                else:
                    step.status, step.detail = SKIPPED, f"skipped: {exc or 'interrupted'}"
    finally:
        Deadline.disarm()
        kill_all()
        ctx.stop_stack()
        if ctx.cuda:
            nvidia_smi(ctx.out / "nvidia-smi.txt", "at the end", timeout=TEARDOWN_SECONDS["nvidia_smi"])
        report.finished = time.time()
        _write_out(ctx)
    return report


def _diagnose(step: Step, options: Options, logs: list[str]) -> None:
    """What one needs to fix a step that did not pass without a second full run (gpucheck.diagnosis)."""
    step.data["diagnosis"] = {"rerun": diagnosis.rerun_command(step.name, options.checkpoint),
                              "environment": diagnosis.environment(),
                              "log_tails": diagnosis.log_tails(options.files, logs)}


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

    server, findings = data_of("server"), ctx.findings
    facts = {
        "service_python": findings.python,
        "served_config": server.get("config"),
        "vram_cap_gib": findings.caps["production_gib"] if ctx.cuda else None,
        "check6_test_cap_gib": findings.caps["test_gib"] if ctx.cuda else None,
        "cap_choice": findings.caps["why"] if ctx.cuda else None,
        "fla_warmup": _warmup_fact(data_of("kernel_warmup")),
        "fla_first_inprocess_call_seconds": (findings.inprocess or {}).get("first_call_seconds"),
        "kernels_in_service": "fla" if findings.kernels_bound else "torch (transformers' reference)",
        "linear_attention_inprocess": findings.inprocess_path,
        "linear_attention_served": server.get("linear_attention"),
        "slow_kernels_allowed": findings.slow_kernels_allowed,
        "cuda_graphs_served": ((server.get("health") or {}).get("model") or {}).get("cuda_graphs"),
        "cuda_graphs_reason": ((server.get("health") or {}).get("model") or {}).get("cuda_graphs_reason") or None,
        "cuda_graphs_after_service": _graphs_after(data_of("service")),
        "cuda_graphs_after_acceptance": _graphs_after(data_of("acceptance")),
        "hidden_from_service": [entry["distribution"] for entry in
                                data_of("install").get("hidden", [])] or None,
        "latency": latency_rows(steps),
    }
    return {key: value for key, value in facts.items() if value is not None}


def _graphs_after(found: dict) -> str | None:
    """/health's graphs as a step left them; None where it did not read them."""
    if "graphs_after" not in found:
        return None
    after = found["graphs_after"]
    return graph_health.describe(after["graphs"]) + ("" if after["caught_up"] else " (not every call counted yet)")


def _warmup_fact(found: dict) -> str | None:
    """The warm-up's result as one line; None when there is none (not started, or the step only holds its times). A
    warm-up stopped before it wrote anything (held up in its imports) is still named, with why it was stopped."""
    if "warmed" not in found and not found.get("cut"):
        return None
    if found.get("warmed") and not found.get("cut"):
        return f"fla {found['fla']} warmed in {found['seconds']} s at {', '.join(found['lengths'])} tokens"
    warmed = [length for length, entry in (found.get("lengths") or {}).items() if "second_seconds" in entry]
    if warmed:
        return (f"partly warmed, at {', '.join(warmed)} tokens: {found.get('cut') or found.get('reason')}; "
                f"the in-process run compiled the rest")
    return f"not warmed: {found.get('cut') or found.get('reason')}"
