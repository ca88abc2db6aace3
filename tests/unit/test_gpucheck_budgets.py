"""The GPU check's time arithmetic, and the run loop's rules about it: the steps that must run fit the deadline,
the teardown fits its reserve, a step never starts without its whole budget, and everything comes back as at most
three files."""
import json
import tarfile
import time

import pytest

from gpucheck import archive, budgets, check
from gpucheck.__main__ import parse
from gpucheck.context import Options
from gpucheck.findings import Found
from gpucheck.stack import Stack


def essential_expected(mode: str) -> float:
    return sum(budgets.TIMINGS[mode][spec.name].expected for spec in check.STEPS if spec.essential)


@pytest.mark.parametrize("mode", sorted(budgets.TIMINGS))
def test_every_step_has_its_times_and_a_rank(mode):
    assert set(budgets.TIMINGS[mode]) == {spec.name for spec in check.STEPS} == set(budgets.VALUE)


@pytest.mark.parametrize("mode", sorted(budgets.TIMINGS))
def test_the_essential_steps_expected_times_fit_the_deadline_less_the_reserve(mode):
    assert essential_expected(mode) + check.RESERVE_SECONDS <= check.DEADLINES[mode]


@pytest.mark.parametrize("mode", sorted(budgets.TIMINGS))
def test_a_limit_catches_a_hang_and_never_cuts_a_step_at_twice_its_measured_time(mode):
    assert budgets.SAFETY >= 2
    for name, timing in budgets.TIMINGS[mode].items():
        assert timing.limit >= 2 * max(timing.expected, timing.rehearsed), name
        assert timing.limit <= check.DEADLINES[mode], name


def test_the_served_stack_is_worth_more_than_the_in_process_figures_and_the_refinements():
    rank = budgets.VALUE.index
    for prerequisite in ("install", "stub", "checkpoint", "shapes"):
        assert rank(prerequisite) < rank("server")
    assert rank("server") < rank("acceptance") < rank("service") < rank("inprocess")
    assert rank("inprocess") < rank("kernel_warmup") < rank("overcap") < rank("inprocess_torch")


def test_the_default_deadlines_are_the_ones_the_budgets_were_made_for(tmp_path):
    assert parse(["--out", str(tmp_path)]).deadline == check.DEADLINES["gpu"]
    assert parse(["--out", str(tmp_path), "--cpu"]).deadline == check.DEADLINES["cpu"]
    # The GPU machine runs commands of at most 10 minutes: the check, python's start and the archive fit in it.
    assert check.DEADLINES["gpu"] + 30 <= 600


def test_the_reserve_covers_the_teardowns_own_timeouts(monkeypatch):
    waits = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def stop(self, timeout):
            waits.append((self.name, timeout))

    Stack(Recorder("server"), Recorder("shim"), "cpu", []).stop()
    from devstack.process import KILL_WAIT_SECONDS

    assert dict(waits) == {"shim": check.TEARDOWN_SECONDS["shim"] - KILL_WAIT_SECONDS,
                           "server": check.TEARDOWN_SECONDS["server"] - KILL_WAIT_SECONDS}


def test_the_steps_run_in_an_order_that_puts_the_served_stack_before_the_comparisons():
    names = [spec.name for spec in check.STEPS]
    assert names.index("acceptance") < names.index("overcap") < names.index("inprocess_torch")
    assert names.index("service") < names.index("inprocess_torch") < names.index("inprocess_mixed")
    assert names.index("service") < names.index("graphs")  # the graph runs stop the served stack
    assert names.index("checkpoint") < names.index("kernel_warmup") < names.index("inprocess")
    assert {spec.name for spec in check.STEPS if not spec.essential} == {"kernel_warmup", "overcap",
                                                                         "inprocess_torch", "inprocess_mixed",
                                                                         "graphs", "inprocess_shared"}


def _fake_steps(monkeypatch, timings, sleeps, essential=None):
    """Steps named as timings' keys, in that order and worth that order; each sleeps its given seconds."""
    ran = []

    def make(name):
        def function(ctx):
            ran.append(name)
            time.sleep(sleeps.get(name, 0))
            return Found(f"{name} done, {ctx.budget():.0f} s left to it")
        return function

    optional = set(timings) - set(essential if essential is not None else timings)
    specs = tuple(check.StepSpec(name, name, make(name), (), essential=name not in optional) for name in timings)
    monkeypatch.setattr(check, "STEPS", specs)
    monkeypatch.setitem(budgets.TIMINGS, "cpu", {name: budgets.Timing(expected, expected)
                                                 for name, expected in timings.items()})
    monkeypatch.setattr(budgets, "VALUE", tuple(timings))
    monkeypatch.setattr(check, "RESERVE_SECONDS", 0.5)
    return ran


def _options(tmp_path, deadline):
    return Options(mode="cpu", device="cpu", out=tmp_path / "out", scratch=tmp_path / "scratch",
                   carry=tmp_path / "carry", checkpoint="fixture", rounds=1, warmup=0, kit_checks="4",
                   kit_n=1, deadline=deadline)


def test_a_slow_but_healthy_step_runs_past_its_expected_time_on_what_earlier_steps_left(monkeypatch, tmp_path):
    # "slow" expects 0.2 s and takes 1 s: within its limit (2.5 x 0.2 = 5 s minimum), and the time the first
    # step did not use carries forward, so it is not cut, and the step after it still runs.
    ran = _fake_steps(monkeypatch, {"first": 2, "slow": 0.2, "last": 1}, {"slow": 1})
    report = check.run(_options(tmp_path, deadline=8))
    assert ran == ["first", "slow", "last"]
    assert {step.status for step in report.steps.values()} == {check.PASS}
    assert report.steps["slow"].seconds >= 1


def test_when_the_deadline_nears_the_least_valuable_steps_give_way_first(monkeypatch, tmp_path):
    # Worth: first > valuable > cheap > optional. "cheap" runs before "valuable" but gives way to it.
    ran = _fake_steps(monkeypatch, {"first": 1, "valuable": 3, "cheap": 2, "optional": 2}, {"first": 1.5},
                      essential=("first", "valuable", "cheap"))
    monkeypatch.setattr(check, "STEPS", tuple(sorted(check.STEPS, key=lambda spec: ["first", "cheap", "optional",
                                                                                    "valuable"].index(spec.name))))
    report = check.run(_options(tmp_path, deadline=6))
    assert ran == ["first", "valuable"]
    steps = report.steps
    assert steps["cheap"].status == check.NOT_RUN
    assert "below its expected 2 s (time kept for valuable)" in steps["cheap"].detail
    assert steps["optional"].status == check.SKIPPED and steps["optional"].detail.startswith("skipped: ")
    assert steps["valuable"].status == check.PASS
    assert report.result == check.FAIL  # an essential step that could not run is not a pass


def test_a_step_is_cut_to_its_limit(monkeypatch, tmp_path):
    seen = {}

    def measure(ctx):
        seen["budget"] = ctx.budget()
        return Found("")

    monkeypatch.setattr(check, "STEPS", (check.StepSpec("only", "only", measure, ()),))
    monkeypatch.setitem(budgets.TIMINGS, "cpu", {"only": budgets.Timing(expected=2, rehearsed=1)})
    monkeypatch.setattr(budgets, "VALUE", ("only",))
    check.run(_options(tmp_path, deadline=100))
    assert 4 < seen["budget"] <= 5  # 2.5 x 2


def test_the_archive_comes_back_with_every_finished_steps_logs_while_a_later_step_runs(monkeypatch, tmp_path):
    seen = {}

    def first(ctx):
        (ctx.out / "first.log").write_text("first's log")
        return Found("wrote")

    def second(ctx):  # what a run cut from outside now would return
        with tarfile.open(ctx.options.out / check.ARCHIVE_NAME) as opened:
            seen["names"] = sorted(opened.getnames())
            seen["report"] = json.loads(opened.extractfile("gpucheck-files/report.json").read())
        return Found("")

    monkeypatch.setattr(check, "STEPS", (check.StepSpec("first", "first", first, ()),
                                         check.StepSpec("second", "second", second, ())))
    monkeypatch.setitem(budgets.TIMINGS, "cpu", {name: budgets.Timing(1, 1) for name in ("first", "second")})
    monkeypatch.setattr(budgets, "VALUE", ("first", "second"))
    check.run(_options(tmp_path, deadline=100))
    assert seen["names"] == ["gpucheck-files/first.log", "gpucheck-files/report.json", "gpucheck-files/report.md"]
    assert {step["name"]: step["status"] for step in seen["report"]["steps"]}["first"] == check.PASS


def test_the_report_folder_holds_three_files_and_the_archive_holds_the_rest(monkeypatch, tmp_path):
    def writes_logs(ctx):
        (ctx.out / "a.log").write_text("x" * 10)
        (ctx.out / "acceptance").mkdir()
        (ctx.out / "acceptance" / "report.json").write_text("{}")
        return Found("wrote")

    monkeypatch.setattr(check, "STEPS", (check.StepSpec("only", "only", writes_logs, ()),))
    monkeypatch.setitem(budgets.TIMINGS, "cpu", {"only": budgets.Timing(1, 1)})
    monkeypatch.setattr(budgets, "VALUE", ("only",))
    options = _options(tmp_path, deadline=100)
    options.out.mkdir(parents=True)
    (options.out / "report.md").write_text("an earlier run's")
    check.run(options)
    assert sorted(path.name for path in options.out.iterdir()) == sorted(check.OUT_FILES)
    with tarfile.open(options.out / check.ARCHIVE_NAME) as opened:
        assert sorted(opened.getnames()) == ["gpucheck-files/a.log", "gpucheck-files/acceptance/report.json",
                                             "gpucheck-files/report.json", "gpucheck-files/report.md"]
        kept = json.loads(opened.extractfile("gpucheck-files/report.json").read())
    assert kept["facts"]["archive"] == {"name": check.ARCHIVE_NAME, "files": 2, "cut": []}
    assert "an earlier run's" not in (options.out / "report.md").read_text()


def test_a_log_too_large_keeps_its_tail_and_the_report_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(archive, "MEMBER_LIMIT_BYTES", 10)
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "big.log").write_text("0123456789abcdefghij")
    (folder / "small.json").write_text("{}")
    members = archive.plan(folder)
    assert archive.describe(members, "x.tar.gz")["cut"] == ["big.log: last 10 of 20 bytes"]
    archive.write(members, folder, tmp_path / "x.tar.gz")
    with tarfile.open(tmp_path / "x.tar.gz") as opened:
        assert opened.extractfile("gpucheck-files/big.log").read() == b"abcdefghij"
        assert opened.extractfile("gpucheck-files/small.json").read() == b"{}"


def test_the_operators_page_gives_the_times_in_force():
    import re

    from gpucheck.carry import REPO_ROOT

    page = (REPO_ROOT / "docs" / "gpu-check.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| .* \| (\d+) \| (\d+) \| (\d+) \|$", page, re.M)
    documented = {name: tuple(map(int, numbers)) for name, *numbers in rows}
    assert documented == {name: (int(timing.expected), int(timing.rehearsed), timing.limit)
                          for name, timing in budgets.TIMINGS["gpu"].items()}
    essential = essential_expected("gpu")
    assert f"{essential:.0f} + {check.RESERVE_SECONDS} = {essential + check.RESERVE_SECONDS:.0f} ≤ " \
           f"{check.DEADLINES['gpu']:.0f}" in page


def test_the_warm_up_fact_is_absent_when_the_warm_up_wrote_nothing():
    assert check._warmup_fact({}) is None
    assert check._warmup_fact({"allowance_seconds": 3.0, "limit_seconds": 5}) is None  # a skipped step's times
    assert check._warmup_fact({"warmed": False, "reason": "no CUDA device"}) == "not warmed: no CUDA device"
    assert check._warmup_fact({"warmed": True, "fla": "0.5.2", "seconds": 61.2, "lengths": {"289": {}, "7900": {}}}) \
        == "fla 0.5.2 warmed in 61.2 s at 289, 7900 tokens"
