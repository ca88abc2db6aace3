"""Who writes the GPU check's context: each step returns what it found, and the runner alone records it; the served
stack and the kernel warm-up are the runner's resources, handed over through the context."""
import dataclasses

import pytest

from gpucheck import budgets, check
from gpucheck.context import Context, Options, Skip
from gpucheck.findings import Findings, Found
from gpucheck.report import Report
from gpucheck.steps import baseline, machine, model, served


def _options(tmp_path, device="cpu"):
    return Options(mode="cpu" if device == "cpu" else "gpu", device=device, out=tmp_path / "out",
                   scratch=tmp_path / "scratch", carry=tmp_path / "carry", checkpoint="fixture", rounds=1, warmup=0,
                   kit_checks="4", kit_n=1, deadline=100)


def _run(monkeypatch, tmp_path, specs):
    monkeypatch.setattr(check, "STEPS", tuple(specs))
    monkeypatch.setitem(budgets.TIMINGS, "cpu", {spec.name: budgets.Timing(1, 1) for spec in specs})
    monkeypatch.setattr(budgets, "VALUE", tuple(spec.name for spec in specs))
    return check.run(_options(tmp_path))


def test_the_runner_records_what_a_step_found_for_the_steps_after_it(monkeypatch, tmp_path):
    seen = {}

    def finds(ctx):
        with pytest.raises(dataclasses.FrozenInstanceError):
            ctx.findings.python = "/elsewhere/python"  # a step cannot write what was found
        return Found("found it", python="/env/bin/python", kernels_bound=True)

    def reads(ctx):
        seen["python"], seen["bound"] = ctx.findings.python, ctx.findings.kernels_bound
        return Found("read it")

    report = _run(monkeypatch, tmp_path, [check.StepSpec("finds", "finds", finds, ()),
                                          check.StepSpec("reads", "reads", reads, ("finds",))])
    assert seen == {"python": "/env/bin/python", "bound": True}
    assert report.steps["finds"].detail == "found it" and report.steps["finds"].status == check.PASS
    assert report.facts["service_python"] == "/env/bin/python"
    assert report.facts["kernels_in_service"] == "fla"


def test_a_failed_steps_findings_are_not_recorded_but_what_it_decided_as_it_started_is(monkeypatch, tmp_path):
    def fails(ctx):
        assert ctx.findings.slow_kernels_allowed  # recorded before the step runs
        raise RuntimeError("the server did not get ready")

    report = _run(monkeypatch, tmp_path, [check.StepSpec("serves", "serves", fails, (),
                                                         decide=lambda ctx: {"slow_kernels_allowed": True})])
    assert report.steps["serves"].status == check.FAIL
    assert report.steps["serves"].detail == "RuntimeError: the server did not get ready"
    assert report.facts["slow_kernels_allowed"] is True


def test_a_found_names_only_findings():
    with pytest.raises(TypeError, match="not a finding: stack"):
        Found("x", stack=object())
    assert dict(Found("x", caps={}).facts) == {"caps": {}}
    assert {field.name for field in dataclasses.fields(Findings)}.isdisjoint({"stack", "warmup_job", "step_end"})


@pytest.mark.parametrize("device, path, allowed", [("cuda", "mixed", True), ("cuda", None, True),
                                                   ("cuda", baseline.FAST, False), ("cpu", "reference", False)])
def test_the_server_step_allows_the_slow_path_only_on_a_card_without_the_fast_one(tmp_path, device, path, allowed):
    ctx = Context(_options(tmp_path, device), Report(tmp_path, "cpu", 100, []), deadline=None,
                  findings=Findings(inprocess_path=path))
    assert served.serving_choice(ctx) == {"slow_kernels_allowed": allowed}


def test_the_warm_up_is_the_contexts_from_its_start_and_the_kernel_warmup_steps_once_taken(tmp_path):
    ctx = Context(_options(tmp_path), Report(tmp_path, "cpu", 100, []), deadline=None)
    with pytest.raises(Skip, match="the checkpoint step did not run"):
        model.kernel_warmup_step(ctx)

    def fails_to_start():
        raise OSError("no interpreter")

    with pytest.raises(OSError):
        ctx.start_warmup(fails_to_start)
    with pytest.raises(Skip, match="neither carried nor installed"):
        model.kernel_warmup_step(ctx)
    job = object()
    ctx.start_warmup(lambda: job)
    assert ctx.take_warmup() is job and ctx.take_warmup() is None


def test_the_runner_records_a_steps_data_from_what_it_returns_or_raises(monkeypatch, tmp_path):
    from gpucheck.context import keeping

    def measures(ctx):
        return Found("measured", {"anchor": {"p50": 40.0}})

    def cut(ctx):
        with keeping({"shapes": {"anchor": {"p50": 41.0}}}):
            raise RuntimeError("the service stopped answering")

    report = _run(monkeypatch, tmp_path, [check.StepSpec("measures", "measures", measures, ()),
                                          check.StepSpec("cut", "cut", cut, ())])
    assert report.steps["measures"].data["anchor"] == {"p50": 40.0}
    assert report.steps["cut"].status == check.FAIL
    assert report.steps["cut"].data["shapes"] == {"anchor": {"p50": 41.0}}


def test_no_step_writes_its_report_entry():
    import inspect

    for phase in (baseline, machine, model, served):
        source = inspect.getsource(phase)
        assert "step.data" not in source and "step: Step" not in source, phase.__name__
