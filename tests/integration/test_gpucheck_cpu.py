"""The GPU check's CPU rehearsal, end to end: the same command and steps as on the GPU, with the tiny fixture, a real
tritonserver and shim, and the report it writes."""
import json
import subprocess
import sys
import tarfile

import pytest

from gpucheck.carry import REPO_ROOT
from gpucheck.check import STEPS
from gpucheck.report import STATUSES

pytestmark = pytest.mark.triton

# What each step must come to on a CPU machine (acceptance is checked separately: it depends on the kit's presence).
EXPECTED = {
    "environment": "pass",
    "install": "skipped",  # the development environment has everything
    "stub": "pass",
    "checkpoint": "pass",
    "shapes": "pass",
    "kernel_warmup": "skipped",  # no flash-linear-attention on CPU machines: the warm-up says so and stops
    "inprocess": "pass",
    "server": "pass",
    "service": "pass",
    "overcap": "skipped",  # check 6 needs a card
    "inprocess_torch": "skipped",  # no flash-linear-attention on CPU machines
}


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpucheck-report")
    scratch = tmp_path_factory.mktemp("gpucheck-scratch")
    done = subprocess.run([sys.executable, "-m", "gpucheck", "--cpu", "--out", str(out), "--scratch", str(scratch),
                           "--deadline", "240"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    report = json.loads((out / "report.json").read_text())
    return done, out, report, {step["name"]: step for step in report["steps"]}


def test_it_exits_zero_with_a_passing_report(rehearsal):
    done, _, report, _ = rehearsal
    assert done.returncode == 0, done.stdout + done.stderr
    assert report["result"] == "pass" and report["mode"] == "cpu"
    assert report["wall_seconds"] < report["deadline_seconds"]


def test_every_step_has_a_status(rehearsal):
    _, _, _, steps = rehearsal
    assert list(steps) == [spec.name for spec in STEPS]
    for step in steps.values():
        assert step["status"] in STATUSES
        assert step["detail"], step["name"]


def test_the_steps_that_can_pass_on_a_cpu_pass(rehearsal):
    _, _, _, steps = rehearsal
    assert {name: steps[name]["status"] for name in EXPECTED} == EXPECTED
    acceptance = steps["acceptance"]
    if (REPO_ROOT / "acceptance" / "__main__.py").is_file():
        assert acceptance["status"] == "pass", acceptance["detail"]
    else:
        assert acceptance["status"] == "skipped"
        assert "acceptance kit not present" in acceptance["detail"]


def test_shapes_are_measured_on_both_sides_with_the_same_prompts(rehearsal):
    _, _, report, steps = rehearsal
    fitted = steps["shapes"]["data"]["shapes"]
    assert fitted["long16"]["reached"] and abs(fitted["long16"]["tokens"][0] - 3900) <= 39
    assert len(fitted["criteria21"]["tokens"]) == 2
    for name, entry in steps["service"]["data"]["shapes"].items():
        assert entry["tokens_match"] and entry["tokens"] == fitted[name]["tokens"]
    rows = report["facts"]["latency"]
    assert [row["shape"] for row in rows] == ["anchor", "criteria21", "long16"]
    for row in rows:
        assert row["inprocess_p50_ms"] > 0 and row["service_p50_ms"] > 0 and row["added_p50_ms"] is not None


def test_the_cpu_config_served_and_the_files_come_back_as_one_archive(rehearsal):
    _, out, report, steps = rehearsal
    assert steps["server"]["data"]["config"] == "cpu"
    assert steps["server"]["data"]["health"]["status"] == "ok"
    assert sorted(path.name for path in out.iterdir()) == ["gpucheck-files.tar.gz", "report.json", "report.md"]
    with tarfile.open(out / "gpucheck-files.tar.gz") as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames()}
        kept = json.loads(archive.extractfile("gpucheck-files/report.json").read())
    for name in ("report.md", "report.json", "environment.json", "inprocess.json", "tritonserver-cpu.log",
                 "shim.log", "ldd.txt"):
        assert name in names, name
    assert kept["result"] == report["result"] and report["facts"]["archive"]["files"] == len(names) - 2
    assert "## Latency (ms)" in (out / "report.md").read_text()


def test_every_step_ran_inside_its_allowance_and_the_kernel_paths_are_reported(rehearsal):
    _, out, report, steps = rehearsal
    for step in steps.values():
        if step["seconds"] is not None:
            assert step["seconds"] <= step["data"]["allowance_seconds"] + 1, step["name"]
            assert step["data"]["allowance_seconds"] <= step["data"]["limit_seconds"], step["name"]
    facts = report["facts"]
    assert facts["linear_attention_inprocess"] == facts["linear_attention_served"] == "reference"
    assert facts["slow_kernels_allowed"] is False  # the CPU is never refused the reference path
    assert steps["server"]["data"]["health"]["model"]["linear_attention"] == "reference"
    assert "Linear attention: served on the reference path; in-process figures on the reference path." \
        in (out / "report.md").read_text()
    assert steps["kernel_warmup"]["detail"] == "flash-linear-attention is neither carried nor installed"
    assert "**flash-linear-attention did not serve; warm-up: not run; first in-process call" \
        in (out / "report.md").read_text()
