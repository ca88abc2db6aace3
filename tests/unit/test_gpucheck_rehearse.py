"""The rehearsal's cut cases: a case counts as played only when the report shows it as meant, and the warm-up hold acts
on the warm-up alone."""
from __future__ import annotations

import os
import subprocess
import sys

from gpucheck import rehearse
from gpucheck.carry import REPO_ROOT

ARCHIVED = ["gpucheck-files/kernel-warmup.log", "gpucheck-files/ldd.txt"]


def _report(**steps) -> dict:
    return {"result": "pass", "steps": [{"name": name, **step} for name, step in steps.items()]}


def test_a_warm_up_stopped_at_its_allowance_is_the_case_played():
    report = _report(kernel_warmup={"status": "skipped", "detail": "recorded, not a failure: the warm-up still running",
                                    "data": {"cut": "still running at its 100 s allowance: stopped"}})
    assert rehearse.cuts_played(["warmup"], report, ARCHIVED)["warmup"][0]


def test_a_warm_up_that_finished_or_failed_in_time_is_not_the_case_played():
    finished = _report(kernel_warmup={"status": "skipped", "detail": "no CUDA device", "data": {}})
    failed = _report(kernel_warmup={"status": "fail", "detail": "StepTimeout",
                                    "data": {"cut": "still running at its 100 s allowance: stopped"}})
    assert not rehearse.cuts_played(["warmup"], finished, ARCHIVED)["warmup"][0]
    assert not rehearse.cuts_played(["warmup"], failed, ARCHIVED)["warmup"][0]
    stopped = _report(kernel_warmup={"status": "skipped", "data": {"cut": "still running at its 100 s allowance"}})
    assert not rehearse.cuts_played(["warmup"], stopped, ["gpucheck-files/ldd.txt"])["warmup"][0]  # log not back


def test_no_libpython_is_played_only_when_the_carried_one_served():
    carried = _report(stub={"status": "pass", "data": {"libpython": "carried"}}, server={"status": "pass"})
    machine = _report(stub={"status": "pass", "data": {"libpython": "machine"}}, server={"status": "pass"})
    unserved = _report(stub={"status": "pass", "data": {"libpython": "carried"}}, server={"status": "fail"})
    assert rehearse.cuts_played(["libpython"], carried, ARCHIVED)["libpython"][0]
    assert not rehearse.cuts_played(["libpython"], machine, ARCHIVED)["libpython"][0]
    assert not rehearse.cuts_played(["libpython"], unserved, ARCHIVED)["libpython"][0]
    assert rehearse.cuts_played([], carried, ARCHIVED) == {}


def test_the_warm_up_hold_holds_the_warm_up_and_nothing_else(tmp_path):
    warm_up = [sys.executable, "-m", "gpucheck.warm_kernels", "--help"]
    env = {**os.environ, "PYTHONPATH": str(rehearse.held_warmup(tmp_path))}
    held = subprocess.Popen(warm_up, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        other = subprocess.run([sys.executable, "-m", "gpucheck.budgets"], cwd=REPO_ROOT, env=env, timeout=60)
        unheld = subprocess.run(warm_up, cwd=REPO_ROOT, capture_output=True, timeout=60)
        assert other.returncode == 0 and unheld.returncode == 0
        assert held.poll() is None  # started first, still held after the same command ran through without the hold
    finally:
        held.kill()
        held.wait(10)
