"""A slow or cut GPU check ends with the card's limit named, never a FAIL of its own making: a kernel warm-up still
running at its limit or failing at some lengths is recorded and skipped, an optional step that runs out of time is
skipped with what it measured, only a fault of the service fails a step that is not essential, the production
config's attempt leaves the KIND_MODEL variant its time, and the warm-up covers every length bucket the check
sends."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

import pytest

from gpucheck import budgets, check, kernel_lengths, shapes, stack
from gpucheck.context import Context, Inconclusive, Options, ServiceFault, Skip, keeping
from gpucheck.deadline import Deadline, run_logged, start_logged
from gpucheck.findings import Findings, Found
from gpucheck.report import FAIL, FINDING, INCONCLUSIVE, PASS, SKIPPED, Report
from gpucheck.steps import baseline, model, served


def _options(tmp_path, deadline=100.0):
    return Options(mode="cpu", device="cpu", out=tmp_path / "out", scratch=tmp_path / "scratch",
                   carry=tmp_path / "carry", checkpoint="fixture", rounds=1, warmup=0, kit_checks="4", kit_n=1,
                   deadline=deadline)


def _context(tmp_path, step_seconds=100.0, **findings) -> Context:
    options = _options(tmp_path)
    options.files.mkdir(parents=True, exist_ok=True)
    ctx = Context(options, Report(tmp_path, "cpu", 100, []), Deadline(1000, 0), findings=Findings(**findings))
    ctx.step_end = time.monotonic() + step_seconds
    return ctx


# A stand-in for python -m gpucheck.warm_kernels: writes its JSON as the real one does (after every length), then
# exits with the given status or keeps running.
FAKE_WARMUP = """
import json, sys, time
out, lengths, warmed, then = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
open(out, "w").write(json.dumps({"fla": "0.5.2", "lengths": lengths, "warmed": warmed, "seconds": 1.0,
                                 "reason": None}))
if then == "hang":
    time.sleep(60)
sys.exit(int(then) if then != "hang" else 0)
"""


def _start_fake_warmup(ctx, lengths: dict, warmed: bool, then: str):
    arguments = [sys.executable, "-c", FAKE_WARMUP, ctx.out / "kernel-warmup.json", json.dumps(lengths),
                 "1" if warmed else "0", then]
    ctx.start_warmup(lambda: start_logged(arguments, ctx.out / "kernel-warmup.log", stdout_to_log=True))
    deadline = time.monotonic() + 20
    while not (ctx.out / "kernel-warmup.json").is_file() and time.monotonic() < deadline:
        time.sleep(0.05)


WARMED = {"289": {"first_seconds": 9.1, "second_seconds": 0.01}, "798": {"first_seconds": 2.0, "second_seconds": 0.01}}


def test_a_warm_up_still_running_at_its_limit_is_stopped_recorded_and_skipped(tmp_path):
    ctx = _context(tmp_path, step_seconds=1.0)
    _start_fake_warmup(ctx, WARMED, warmed=False, then="hang")
    job = ctx.warmup_job
    with pytest.raises(Skip) as skipped:
        model.kernel_warmup_step(ctx)
    assert "recorded, not a failure" in str(skipped.value) and "still running at its" in str(skipped.value)
    assert "warmed at 289, 798 tokens" in str(skipped.value)
    assert job.poll() is not None  # stopped, not left compiling beside the in-process run
    data = skipped.value.data
    assert data["lengths"] == WARMED and "still running" in data["cut"]
    assert check._warmup_fact(data).startswith("partly warmed, at 289, 798 tokens")


def test_a_warm_up_stopped_before_it_wrote_anything_is_named_in_the_facts_not_taken_as_not_run(tmp_path):
    ctx = _context(tmp_path, step_seconds=1.0)
    held = [sys.executable, "-c", "import time; time.sleep(60)"]  # still in its imports: no JSON yet
    ctx.start_warmup(lambda: start_logged(held, ctx.out / "kernel-warmup.log", stdout_to_log=True))
    with pytest.raises(Skip) as skipped:
        model.kernel_warmup_step(ctx)
    assert "still running at its" in str(skipped.value) and "warmed at no length" in str(skipped.value)
    assert check._warmup_fact(skipped.value.data) == f"not warmed: {skipped.value.data['cut']}"


def test_a_warm_up_that_fails_at_some_lengths_is_recorded_and_skipped(tmp_path):
    ctx = _context(tmp_path)
    lengths = {**WARMED, "5121": {"error": "OutOfResources: shared memory"}}
    _start_fake_warmup(ctx, lengths, warmed=False, then="0")
    with pytest.raises(Skip, match=r"fla failed at 5121 tokens \(OutOfResources: shared memory\)") as skipped:
        model.kernel_warmup_step(ctx)
    assert skipped.value.data["lengths"] == lengths


def test_a_warm_up_that_exits_with_an_error_is_recorded_and_skipped(tmp_path):
    ctx = _context(tmp_path)
    _start_fake_warmup(ctx, {"289": WARMED["289"]}, warmed=False, then="1")
    with pytest.raises(Skip, match="exited with an error"):
        model.kernel_warmup_step(ctx)


def test_a_whole_warm_up_passes_with_its_first_calls(tmp_path):
    ctx = _context(tmp_path)
    _start_fake_warmup(ctx, WARMED, warmed=True, then="0")
    found = model.kernel_warmup_step(ctx)
    assert "289 tokens 9.1 s (then 0.01 s)" in found.summary


def _run(monkeypatch, tmp_path, specs, deadline=100.0, expected=1.0):
    monkeypatch.setattr(check, "STEPS", tuple(specs))
    monkeypatch.setitem(budgets.TIMINGS, "cpu", {spec.name: budgets.Timing(expected, expected) for spec in specs})
    monkeypatch.setattr(budgets, "VALUE", tuple(spec.name for spec in specs))
    monkeypatch.setattr(check, "RESERVE_SECONDS", 0.5)
    return check.run(_options(tmp_path, deadline))


def _passes(ctx):
    return Found("served")


def _runs_out(ctx):
    with keeping({"measured": {"anchor": 12.5}}):
        run_logged([sys.executable, "-c", "import time; time.sleep(60)"], ctx.out / "slow.log", ctx.budget(1.0))


def test_an_optional_step_that_runs_out_of_time_is_skipped_with_what_it_measured(monkeypatch, tmp_path):
    report = _run(monkeypatch, tmp_path, [check.StepSpec("server", "server", _passes, ()),
                                          check.StepSpec("optional", "optional", _runs_out, (), essential=False)])
    optional = report.steps["optional"]
    assert optional.status == SKIPPED and "ran out of time" in optional.detail
    assert optional.data["measured"] == {"anchor": 12.5}
    assert report.result == PASS


def test_an_essential_step_that_runs_out_of_time_fails(monkeypatch, tmp_path):
    report = _run(monkeypatch, tmp_path, [check.StepSpec("server", "server", _runs_out, ())])
    assert report.steps["server"].status == FAIL and report.result == FAIL


@pytest.mark.parametrize("error, status, result", [
    (RuntimeError("the server under the test cap did not get ready"), INCONCLUSIVE, PASS),
    (Inconclusive("cannot separate on this card"), INCONCLUSIVE, PASS),
    (ServiceFault("the kit failed: {'6': 'fail'}"), FINDING, PASS),
])
def test_an_optional_step_never_decides_the_run_and_a_fault_it_sees_is_a_finding(monkeypatch, tmp_path, error, status,
                                                                                 result):
    def raises(ctx):
        raise error

    report = _run(monkeypatch, tmp_path, [check.StepSpec("server", "server", _passes, ()),
                                          check.StepSpec("overcap", "overcap", raises, (), essential=False)])
    assert report.steps["overcap"].status == status
    assert report.result == result
    if status == FINDING:
        assert report.findings == ["overcap"] and report.headline == "PASS, with findings: overcap"
        assert "the kit failed" in report.steps["overcap"].detail
        assert "with findings: overcap" in (tmp_path / "out" / "report.md").read_text().splitlines()[0]


def test_an_essential_steps_inconclusive_outcome_decides_the_run(monkeypatch, tmp_path):
    def undecided(ctx):
        raise Inconclusive("check 5 not proven")

    report = _run(monkeypatch, tmp_path, [check.StepSpec("acceptance", "acceptance", undecided, ())])
    assert report.result == INCONCLUSIVE


def test_the_deadline_during_an_optional_step_skips_it_and_the_optional_steps_after_it(monkeypatch, tmp_path):
    def sleeps(ctx):
        time.sleep(30)  # the deadline's SIGALRM stops it

    report = _run(monkeypatch, tmp_path, [check.StepSpec("server", "server", _passes, ()),
                                          check.StepSpec("overcap", "overcap", sleeps, (), essential=False),
                                          check.StepSpec("torch", "torch", _passes, (), essential=False)],
                  deadline=2.5, expected=0.1)
    assert report.steps["server"].status == PASS
    assert report.steps["overcap"].status == SKIPPED and "deadline" in report.steps["overcap"].detail
    assert report.steps["torch"].status == SKIPPED
    assert report.result == PASS


class FakeServer:
    """A tritonserver whose production config hangs until its timeout, and whose variant gets ready."""
    waited: list = []

    def __init__(self, env, log_path, model_repository, config_name, root, python):
        self.config_name, self.log_path = config_name, log_path

    def start(self):
        return self

    def wait_ready(self, timeout):
        FakeServer.waited.append((self.config_name, timeout))
        if self.config_name is None:
            raise TimeoutError(f"not ready after {timeout:.0f} s")

    stopped: list = []

    def stop(self, timeout):
        FakeServer.stopped.append((self.config_name, timeout))


def test_the_production_attempt_leaves_the_variant_at_least_half_of_the_server_steps_allowance(monkeypatch, tmp_path):
    ctx = _context(tmp_path, step_seconds=150.0)
    allowance = ctx.step_end - time.monotonic()
    monkeypatch.setattr(stack, "TritonServer", FakeServer)
    FakeServer.waited = []
    attempts = [("production", None), ("variant", stack.VARIANT)]
    server, label, tried = stack.start_server(
        attempts, {}, tmp_path, tmp_path, sys.executable, tmp_path,
        lambda position: served.attempt_timeout(ctx, allowance, position, len(attempts)))
    assert label == "variant" and [entry["ready"] for entry in tried] == [False, True]
    (production, first), (variant, second) = FakeServer.waited
    assert production is None and variant == stack.VARIANT
    assert first <= served.FIRST_ATTEMPT_SHARE * allowance
    assert second >= (1 - served.FIRST_ATTEMPT_SHARE) * allowance - 1  # a hang of the first did not eat it
    assert FakeServer.stopped == [(None, 0)]  # the production server that never got ready is killed at once


def test_a_slow_warm_up_leaves_the_in_process_step_its_whole_limit_and_the_rest_their_expected_times():
    gpu = budgets.TIMINGS["gpu"]
    later = ["inprocess", "server", "service", "acceptance", "overcap", "inprocess_torch"]
    # with too little left, the warm-up gives way rather than eat into the in-process run
    assert budgets.allowance("gpu", "kernel_warmup", 250.0, later) < gpu["kernel_warmup"].expected
    for remaining in (350.0, 378.0, 480.0):
        warmup = budgets.allowance("gpu", "kernel_warmup", remaining, later)
        assert warmup >= gpu["kernel_warmup"].expected
        left = remaining - warmup  # a warm-up that used its whole window
        assert budgets.allowance("gpu", "inprocess", left, later[1:]) == gpu["inprocess"].limit, remaining
        assert left - gpu["inprocess"].limit >= sum(gpu[name].expected for name in ("server", "service", "acceptance"))


def _kernels_fail_then(tmp_path, monkeypatch, left: float, conv_bound: bool = False, mixed_fails: bool = True):
    """The in-process step where the run with the kernels fails with `left` seconds of the step remaining; with
    conv_bound, transformers had bound causal-conv1d too, and the mixed path (conv hidden) then fails or works."""
    ctx = _context(tmp_path, step_seconds=left, kernels=tmp_path / "kernels")
    calls = []
    bound = {"causal_conv1d_fn": {"path": "fast" if conv_bound else "reference"},
             "torch_chunk_gated_delta_rule": {"path": "fast"}}

    def run_inprocess(ctx, out_name, block, seconds=None, extra=()):
        calls.append((block, seconds, extra))
        mixed = "--block-conv" in extra
        if not block and (not mixed or mixed_fails):
            (ctx.out / out_name).write_text(json.dumps({"kernels": {"fla": {"importable": True}}, "bound": bound}))
            raise RuntimeError("the conv's forward failed" if not mixed else "fla's forward failed")
        return {"shapes": {}, "bound": {}, "conv_blocked": mixed}

    monkeypatch.setattr(baseline, "_run_inprocess", run_inprocess)
    return ctx, calls


def test_the_run_with_fla_leaves_the_torch_fallback_its_need(tmp_path, monkeypatch):
    ctx, calls = _kernels_fail_then(tmp_path, monkeypatch, left=100.0)
    found = baseline.inprocess_step(ctx)
    need = budgets.need_of("cpu", "inprocess_torch")
    (first_block, first_seconds, _), (second_block, _, _) = calls
    assert not first_block and second_block
    assert first_seconds <= 100.0 - need
    assert "measured on torch's implementations" in found.summary


def test_a_conv_failure_falls_back_to_the_mixed_path_with_fla_kept(tmp_path, monkeypatch):
    ctx, calls = _kernels_fail_then(tmp_path, monkeypatch, left=200.0, conv_bound=True, mixed_fails=False)
    found = baseline.inprocess_step(ctx)
    assert [(block, extra) for block, _, extra in calls] == [(False, ()), (False, ("--block-conv",))]
    assert calls[1][1] <= 200.0 - budgets.need_of("cpu", "inprocess_torch")  # the torch path's need kept back
    assert "with the kernels it failed (the conv's forward failed)" in found.summary
    assert "measured on the mixed path (fla kept, torch's conv)" in found.summary and found.data["conv_blocked"]


def test_a_mixed_path_that_fails_too_falls_back_to_torch_and_both_failures_are_reported(tmp_path, monkeypatch):
    ctx, calls = _kernels_fail_then(tmp_path, monkeypatch, left=200.0, conv_bound=True, mixed_fails=True)
    found = baseline.inprocess_step(ctx)
    assert [(block, extra) for block, _, extra in calls] == [(False, ()), (False, ("--block-conv",)), (True, ())]
    assert "on the mixed path (fla kept, torch's conv) it failed (fla's forward failed)" in found.summary
    assert "measured on torch's implementations" in found.summary
    assert (ctx.out / "inprocess-mixed-failed.json").is_file()
    assert (ctx.out / "inprocess-with-kernels-failed.json").is_file()


def test_a_torch_fallback_with_less_than_its_need_left_is_not_started_and_says_why(tmp_path, monkeypatch):
    need = budgets.need_of("cpu", "inprocess_torch")
    ctx, calls = _kernels_fail_then(tmp_path, monkeypatch, left=need / 2)
    with pytest.raises(RuntimeError, match="below the .* s the measurement on torch's implementations needs"):
        baseline.inprocess_step(ctx)
    assert [block for block, _, _ in calls] == [False]


def test_a_single_attempt_has_the_whole_allowance(tmp_path):
    ctx = _context(tmp_path, step_seconds=150.0)
    assert served.attempt_timeout(ctx, 150.0, 0, 1) > 140


def test_on_the_gpu_machine_the_variant_has_at_least_its_expected_start():
    limit = budgets.TIMINGS["gpu"]["server"].limit
    assert limit * (1 - served.FIRST_ATTEMPT_SHARE) >= budgets.TIMINGS["gpu"]["server"].expected


def test_every_length_the_check_sends_falls_in_a_bucket_the_warm_up_covers():
    warmed = {kernel_lengths.bucket(length) for length in model.WARM_LENGTHS}
    # the shapes' calls, and check 5's and 6's growth probes: any length up to MAX_TOKENS
    for length in range(1, kernel_lengths.MAX_TOKENS + 1):
        assert kernel_lengths.bucket(length) in warmed, length
    for length in (289, 364, 798, 3900, 7900):
        assert length in model.WARM_LENGTHS  # the shapes' own lengths, compiled exactly as they are sent
    assert any(4097 <= length <= 6144 for length in model.WARM_LENGTHS)  # check 5's probes cross it


def test_the_buckets_are_fla_0_5_2s_l2norm_keys_on_the_models_heads():
    from fixture_checkpoint.synthetic import SIZES

    assert kernel_lengths.HEADS == SIZES["full"]["text"]["linear_num_value_heads"]
    # fla 0.5.2: NB = cdiv(rows, 2048 * 32), rows = tokens x heads: one bucket per 2,048 tokens with 32 heads
    assert [kernel_lengths.bucket(tokens) for tokens in (1, 2048, 2049, 4096, 4097, 6144, 6145, 8192)] == \
        [1, 1, 2, 2, 3, 3, 4, 4]
    assert kernel_lengths.sent_buckets() == {1, 2, 3, 4}


def test_the_shapes_lengths_are_warmed_first_so_a_cut_warm_up_has_done_the_timed_ones():
    timed = [target for _, _, target, is_timed in shapes.SHAPES.values() if target and is_timed]
    assert model.WARM_LENGTHS[:len(timed) + len(kernel_lengths.CRITERIA_CALLS)] == \
        [timed[0], *kernel_lengths.CRITERIA_CALLS, *timed[1:]]


def test_the_in_process_step_says_which_lengths_compiled_where(tmp_path):
    fitted = {"anchor": {"tokens": [289]}, "criteria21": {"tokens": [798, 364]}, "long16": {"tokens": [3900]},
              "probe": {"tokens": [7900]}}
    ctx = _context(tmp_path, fitted=fitted)
    (ctx.out / "kernel-warmup.json").write_text(json.dumps({"lengths": {
        "289": {"first_seconds": 9.0, "second_seconds": 0.01}, "798": {"first_seconds": 1.0, "second_seconds": 0.01},
        "3900": {"error": "CompilationError"}}}))  # cut before 7,900, failed at 3,900
    result = {"bound": {"gated_delta_rule": {"path": baseline.FAST}}}
    assert baseline._where_compiled(ctx, result) == {
        "anchor": {"289": "warm-up"}, "criteria21": {"798": "warm-up", "364": "warm-up"},
        "long16": {"3900": "in-process"}, "probe": {"7900": "in-process"}}
    assert baseline._where_compiled(ctx, {"bound": {"gated_delta_rule": {"path": "reference"}}}) is None


def test_a_run_whose_warm_up_is_cut_and_whose_optional_step_runs_out_passes_with_its_three_files(monkeypatch,
                                                                                                 tmp_path):
    """The cut cases end to end through the runner: the warm-up (started by the checkpoint step) still running at
    its limit, an optional step out of time; the run passes and returns its three files, the archive holding what
    the warm-up wrote."""
    import tarfile

    def checkpoint(ctx):
        _start_fake_warmup(ctx, WARMED, warmed=False, then="hang")
        return Found("built")

    report = _run(monkeypatch, tmp_path, [
        check.StepSpec("checkpoint", "checkpoint", checkpoint, ()),
        check.StepSpec("kernel_warmup", "kernel_warmup", model.kernel_warmup_step, (), essential=False),
        check.StepSpec("server", "server", _passes, ("checkpoint",)),
        check.StepSpec("inprocess_torch", "inprocess_torch", _runs_out, (), essential=False),
    ], expected=0.4)
    statuses = {name: step.status for name, step in report.steps.items()}
    assert statuses == {"checkpoint": PASS, "kernel_warmup": SKIPPED, "server": PASS, "inprocess_torch": SKIPPED}
    assert report.result == PASS
    out = tmp_path / "out"
    assert sorted(path.name for path in out.iterdir()) == sorted(check.OUT_FILES)
    written = json.loads((out / "report.json").read_text())
    assert written["result"] == PASS
    assert written["facts"]["fla_warmup"].startswith("partly warmed, at 289, 798 tokens")
    with tarfile.open(out / check.ARCHIVE_NAME) as archive:
        warm = json.loads(archive.extractfile("gpucheck-files/kernel-warmup.json").read())
    assert warm["lengths"] == WARMED


def test_only_runs_the_named_step_with_what_it_needs_and_says_so_of_the_rest(monkeypatch, tmp_path):
    assert check.wanted(("service",)) == {"environment", "install", "stub", "checkpoint", "shapes", "server", "service"}
    assert check.wanted(()) == {spec.name for spec in check.STEPS}
    with pytest.raises(ValueError, match="no such step: servr"):
        check.wanted(("servr",))
    ran = []

    def records(name):
        def step(ctx):
            ran.append(name)
            return Found(name)
        return step

    specs = [check.StepSpec(spec.name, spec.name, records(spec.name), spec.needs, essential=spec.essential)
             for spec in check.STEPS]
    monkeypatch.setattr(check, "STEPS", tuple(specs))
    monkeypatch.setattr(check, "RESERVE_SECONDS", 0.5)
    options = replace(_options(tmp_path), only=("server",))
    report = check.run(options)
    assert ran == ["environment", "install", "stub", "checkpoint", "server"]
    assert report.steps["acceptance"].status == SKIPPED and "--only server" in report.steps["acceptance"].detail
    assert report.result == PASS


def test_a_step_that_did_not_pass_leaves_its_log_tails_environment_and_the_command_that_re_runs_it(monkeypatch,
                                                                                                   tmp_path):
    def fails_with_a_log(ctx):
        (ctx.out / "server.log").write_text("\n".join(f"line {n}" for n in range(100)) + "\nStartupRefused: cap\n")
        raise RuntimeError("tritonserver did not get ready")

    report = _run(monkeypatch, tmp_path, [check.StepSpec("checkpoint", "checkpoint", _passes, ()),
                                          check.StepSpec("server", "server", fails_with_a_log, ("checkpoint",))])
    found = report.steps["server"].data["diagnosis"]
    assert found["rerun"] == 'bash gpucheck/on_device.sh "$OUT" --only server --checkpoint fixture'
    assert list(found["log_tails"]) == ["server.log"]
    assert found["log_tails"]["server.log"].endswith("StartupRefused: cap")
    assert len(found["log_tails"]["server.log"].splitlines()) == 25
    assert "diagnosis" not in report.steps["checkpoint"].data
    written = (tmp_path / "out" / "report.md").read_text()
    assert "## server: fail" in written and "--only server" in written and "StartupRefused: cap" in written
