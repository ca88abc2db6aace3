"""The GPU check's time arithmetic, and the run loop's rules about it: the steps that must run fit the deadline,
the teardown fits its reserve, a step never starts without its whole budget, and everything comes back as at most
three files."""
import json
import tarfile
import time

import pytest

from gpucheck import archive, check
from gpucheck.__main__ import parse
from gpucheck.stack import Stack


@pytest.mark.parametrize("mode", sorted(check.BUDGETS))
def test_the_essential_steps_fit_the_deadline_less_the_reserve(mode):
    budgets = check.BUDGETS[mode]
    assert set(budgets) == {spec.name for spec in check.STEPS}
    essential = sum(budgets[spec.name] for spec in check.STEPS if spec.essential)
    assert essential <= check.DEADLINES[mode] - check.RESERVE_SECONDS


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


def test_the_steps_are_ordered_by_value():
    names = [spec.name for spec in check.STEPS]
    assert names.index("acceptance") < names.index("inprocess_torch")
    assert names.index("service") < names.index("inprocess_torch")
    assert [spec.name for spec in check.STEPS if not spec.essential] == ["inprocess_torch"]


def _fake_steps(monkeypatch, budgets, sleeps):
    ran = []

    def make(name):
        def function(ctx, step):
            ran.append(name)
            time.sleep(sleeps.get(name, 0))
            return f"{name} done, {ctx.budget():.0f} s left to it"
        return function

    specs = tuple(check.StepSpec(name, name, make(name), (), essential=name != "optional") for name in budgets)
    monkeypatch.setattr(check, "STEPS", specs)
    monkeypatch.setitem(check.BUDGETS, "cpu", budgets)
    monkeypatch.setattr(check, "RESERVE_SECONDS", 0.5)
    return ran


def _options(tmp_path, deadline):
    return check.Options(mode="cpu", device="cpu", out=tmp_path / "out", scratch=tmp_path / "scratch",
                         carry=tmp_path / "carry", checkpoint="fixture", rounds=1, warmup=0, kit_checks="4",
                         kit_n=1, deadline=deadline)


def test_a_step_without_its_whole_budget_left_does_not_start_and_says_why(monkeypatch, tmp_path):
    ran = _fake_steps(monkeypatch, {"first": 1, "second": 1, "long": 60, "optional": 60}, {"first": 0.2})
    report = check.run(_options(tmp_path, deadline=5))
    assert ran == ["first", "second"]
    steps = report.steps
    assert steps["first"].status == steps["second"].status == check.PASS
    assert steps["long"].status == check.NOT_RUN
    assert "below this step's budget of 60 s" in steps["long"].detail
    assert steps["optional"].status == check.SKIPPED and steps["optional"].detail.startswith("skipped: ")
    assert report.result == check.FAIL  # an essential step that could not run is not a pass
    assert steps["second"].detail == "second done, 1 s left to it"


def test_a_step_is_cut_to_its_own_budget(monkeypatch, tmp_path):
    seen = {}

    def measure(ctx, step):
        seen["budget"] = ctx.budget()
        return ""

    monkeypatch.setattr(check, "STEPS", (check.StepSpec("only", "only", measure, ()),))
    monkeypatch.setitem(check.BUDGETS, "cpu", {"only": 3})
    check.run(_options(tmp_path, deadline=100))
    assert 2 < seen["budget"] <= 3


def test_the_report_folder_holds_three_files_and_the_archive_holds_the_rest(monkeypatch, tmp_path):
    def writes_logs(ctx, step):
        (ctx.out / "a.log").write_text("x" * 10)
        (ctx.out / "acceptance").mkdir()
        (ctx.out / "acceptance" / "report.json").write_text("{}")
        return "wrote"

    monkeypatch.setattr(check, "STEPS", (check.StepSpec("only", "only", writes_logs, ()),))
    monkeypatch.setitem(check.BUDGETS, "cpu", {"only": 3})
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


def test_the_operators_page_gives_the_budgets_in_force():
    import re

    from gpucheck.carry import REPO_ROOT

    page = (REPO_ROOT / "docs" / "gpu-check.md").read_text()
    documented = {name: int(seconds) for name, seconds in re.findall(r"^\| `(\w+)` \| .* \| (\d+) \|$", page, re.M)}
    assert documented == check.BUDGETS["gpu"]
    essential = sum(check.BUDGETS["gpu"][spec.name] for spec in check.STEPS if spec.essential)
    assert f"| {essential} |" in page and f"{essential + check.RESERVE_SECONDS:.0f} ≤ {check.DEADLINES['gpu']:.0f}" in page
