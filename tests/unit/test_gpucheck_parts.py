"""The GPU check's parts that need no server: the VRAM cap, the variant config, the carry selection, the kit's
report, the summary, step results, the deadline and the subprocess runner."""
import io
import json
import sys
import tarfile
import time

import pytest

from gpucheck import acceptance_kit, carry, stack, stats, summary
from gpucheck.deadline import Deadline, DeadlineReached, StepTimeout, run_logged
from gpucheck.install import unpack_server
from gpucheck.report import FAIL, NOT_RUN, PASS, REFERENCE, SKIPPED, Report, Step

PRODUCTION_CONFIG = (carry.REPO_ROOT / "model_repository" / "intern_decision" / "config.pbtxt").read_text()


def test_the_variant_config_is_production_with_a_model_placed_instance():
    variant = stack.variant_config(PRODUCTION_CONFIG)
    assert "kind: KIND_MODEL" in variant and "KIND_GPU" not in variant.split("\n", 2)[2]
    assert "gpus:" not in variant
    strip = lambda text: [line for line in text.splitlines() if "kind:" not in line and "gpus:" not in line  # noqa
                          and not line.startswith("#")]
    assert strip(variant) == strip(PRODUCTION_CONFIG)
    with pytest.raises(ValueError):
        stack.variant_config(PRODUCTION_CONFIG.replace("KIND_GPU", "KIND_CPU"))


def test_the_trimmed_server_keeps_what_runs_and_the_312_stub_only():
    wanted = carry.server_member_wanted
    assert wanted("pytriton/tritonserver/bin/tritonserver")
    assert wanted("pytriton/tritonserver/backends/python/libtriton_python.so")
    assert wanted("pytriton/tritonserver/backends/python/triton_python_backend_utils.py")
    assert wanted("pytriton/tritonserver/python_backend_stubs/3.12/triton_python_backend_stub")
    assert wanted("nvidia_pytriton.libs/libtritonserver-717102f0.so")
    assert not wanted("pytriton/tritonserver/python_backend_stubs/3.11/triton_python_backend_stub")
    assert not wanted("nvidia_pytriton.libs/libpython3-419a3a08.13.so.1.0")
    assert not wanted("nvidia_pytriton.libs/")
    assert not wanted("pytriton/proxy/model.py")


def test_unpacking_refuses_paths_outside_the_folder(tmp_path):
    tarball = tmp_path / "evil.tar.xz"
    with tarfile.open(tarball, "w:xz") as archive:
        member = tarfile.TarInfo("../outside")
        member.size = 1
        archive.addfile(member, io.BytesIO(b"x"))
    with pytest.raises(RuntimeError, match="refusing"):
        unpack_server(tarball, tmp_path / "server")
    assert not (tmp_path / "outside").exists()


def test_kit_statuses_are_read_from_a_mapping_or_a_list():
    assert acceptance_kit.check_statuses({"checks": {"4": {"status": "pass"}, "6": {"status": "fail"}}}) == {
        "4": "pass", "6": "fail"}
    assert acceptance_kit.check_statuses({"checks": [{"check": 5, "status": "not_run"}]}) == {"5": "not_run"}
    command = acceptance_kit.command("py", "http://s", carry.REPO_ROOT / "t", "http://m/metrics", "4,7", 3,
                                     carry.REPO_ROOT / "o")
    assert command[1:3] == ["-m", "acceptance"]
    assert command[3:] == ["--url", "http://s", "--token-file", str(carry.REPO_ROOT / "t"), "--metrics-url",
                           "http://m/metrics", "--checks", "4,7", "--n", "3", "--out", str(carry.REPO_ROOT / "o")]


def test_a_kit_run_with_nothing_failed_but_something_unproven_is_not_a_failure():
    def report(*statuses):
        return {"checks": {str(n): {"status": status} for n, status in enumerate(statuses, start=4)}}

    assert acceptance_kit.unproven_only(report("inconclusive", "pass", "pass"))
    assert acceptance_kit.unproven_only(report("pass", "not_run"))
    assert not acceptance_kit.unproven_only(report("inconclusive", "fail"))
    assert not acceptance_kit.unproven_only(report("pass", "pass"))


def test_latency_rows_put_service_and_inprocess_side_by_side():
    steps = {
        "shapes": {"data": {"shapes": {"anchor": {"title": "anchor", "tokens": [289], "timed": True},
                                       "probe": {"title": "probe", "tokens": [7900], "timed": False}}}},
        "inprocess": {"data": {"shapes": {"anchor": {"predict": {"p50": 40.0, "mean": 41.0}}}}},
        "service": {"data": {"shapes": {"anchor": {"client": {"p50": 43.5, "mean": 45.0, "p95": 50.0}}}}},
    }
    [row] = summary.latency_rows(steps)
    assert row["shape"] == "anchor" and row["added_p50_ms"] == 3.5 and row["added_mean_ms"] == 4.0
    assert row["inprocess_torch_p50_ms"] is None


def test_latency_rows_split_the_service_time_down_to_the_forward_in_the_stub_and_in_process():
    steps = {
        "shapes": {"data": {"shapes": {"anchor": {"title": "anchor", "tokens": [289], "timed": True}}}},
        "inprocess": {"data": {
            "shapes": {"anchor": {"predict": {"p50": 88.6, "mean": 89.0}, "forward": {"p50": 79.9}}}}},
        "graphs": {"data": {"graphs": {"shapes": {"anchor": {"exact": {"predict": {"p50": 24.0}},
                                                             "bucketed": {"predict": {"p50": 25.5}}}}}}},
        "service": {"data": {"shapes": {"anchor": {"client": {"p50": 105.7, "mean": 106.0, "p95": 110.0},
                                                   "server": {"p50": 101.2}, "forward": {"p50": 93.0}}}}},
    }
    [row] = summary.latency_rows(steps)
    assert (row["inprocess_forward_p50_ms"], row["shim_p50_ms"], row["stub_forward_p50_ms"]) == (79.9, 101.2, 93.0)
    assert (row["graphs_exact_p50_ms"], row["graphs_bucketed_p50_ms"]) == (24.0, 25.5)
    markdown = summary.render_markdown({"mode": "gpu", "result": "pass", "started": "t", "wall_seconds": 1,
                                        "deadline_seconds": 525,
                                        "steps": [{"name": name, "status": "pass", "seconds": 1.0, "detail": "",
                                                   "data": step["data"]} for name, step in steps.items()],
                                        "reference": REFERENCE, "facts": {}})
    assert "| 88.6 / 89.0 | 79.9 | — | 24.0 / 25.5 | 105.7 / 106.0 / 110.0 | 101.2 | 93.0 | 17.1 / 17.0 | — |" \
        in markdown


def test_report_passes_only_when_every_step_passed_or_was_skipped(tmp_path):
    report = Report(tmp_path, "cpu", 60, [Step("a", "A", PASS), Step("b", "B", SKIPPED)])
    assert report.result == PASS
    report.step("b").status = NOT_RUN
    assert report.result == FAIL
    report.write()
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["result"] == FAIL and [s["name"] for s in written["steps"]] == ["a", "b"]
    assert "| b | not_run |" in (tmp_path / "report.md").read_text()


def test_stats_percentiles():
    assert stats.percentile([1, 2, 3, 4], 50) == 2.5
    assert stats.summary([10.0, 20.0, 30.0]) == {"count": 3, "mean": 20.0, "p50": 20.0, "p95": 29.0,
                                                 "min": 10.0, "max": 30.0}
    assert stats.summary([]) == {"count": 0}


def test_a_step_past_its_budget_is_killed_with_its_children(tmp_path):
    marker = tmp_path / "child-alive"
    child = tmp_path / "child.py"
    child.write_text(f"import time\ntime.sleep(3)\nopen({str(marker)!r}, 'w').close()\n")
    parent = tmp_path / "parent.py"
    parent.write_text(f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, {str(child)!r}])\n"
                      "time.sleep(30)\n")
    started = time.monotonic()
    with pytest.raises(StepTimeout):
        run_logged([sys.executable, parent], tmp_path / "log", timeout=1)
    assert time.monotonic() - started < 10
    time.sleep(3.5)
    assert not marker.exists()  # the whole process group went


def test_a_failing_command_raises_with_its_log(tmp_path):
    assert run_logged([sys.executable, "-c", "print('out')"], tmp_path / "ok.log", timeout=30) == "out\n"
    with pytest.raises(RuntimeError, match="exited with 3.*boom"):
        run_logged([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"],
                   tmp_path / "bad.log", timeout=30)


def test_the_deadline_cuts_budgets_and_stops():
    deadline = Deadline(seconds=100, reserve=20)
    assert deadline.budget(30) == 30
    assert 79 < deadline.budget(1000) <= 80
    with pytest.raises(DeadlineReached):
        Deadline(seconds=10, reserve=10).budget(5)


def test_preflight_stops_by_name_without_libpython_or_disk_and_leaves_a_report(tmp_path, monkeypatch):
    from gpucheck import preflight

    out = tmp_path / "out"
    arguments = ["--out", str(out), "--scratch", str(tmp_path / "scratch"), "--carry", str(tmp_path / "carry")]
    assert preflight.main(arguments) == 0
    assert not out.exists()
    monkeypatch.setattr(preflight, "libpython", lambda: [])
    monkeypatch.setattr(preflight, "free_bytes", lambda folder: 9 * preflight.GIB)
    assert preflight.main(arguments) == 1
    written = json.loads((out / "report.json").read_text())
    assert written["result"] == FAIL
    detail = written["steps"][0]["detail"]
    assert "libpython %d.%d is missing" % sys.version_info[:2] in detail
    assert "9.0 GiB free" in detail and "below the 10 GiB the synthetic-full checkpoint needs" in detail
    assert "| preflight | fail |" in (out / "report.md").read_text()


def test_the_kernel_warmup_builds_the_models_own_shapes_and_says_why_it_stops_without_cuda(tmp_path, monkeypatch):
    import torch

    from gpucheck import warm_kernels
    from intern_decision_model import kernels

    dims = warm_kernels.head_dims("full")
    assert dims == {"heads": 32, "key_dim": 128, "value_dim": 128}  # Qwen3.5-4B's keys repeated to its 32 value heads
    tensors = warm_kernels.inputs(torch, 64, warm_kernels.head_dims("small"), "cpu", torch.bfloat16)
    assert tensors["query"].shape == tensors["key"].shape == (1, 64, 4, 16)
    assert tensors["g"].dtype == torch.float32 and bool((tensors["g"] < 0).all())
    assert tensors["beta"].dtype == torch.bfloat16

    out = tmp_path / "warm.json"
    arguments = ["--size", "small", "--device", "cpu", "--dtype", "float32", "--lengths", "289,64", "--out", str(out)]
    assert warm_kernels.main(arguments) == 0
    found = json.loads(out.read_text())
    assert found["bound"] == kernels.REFERENCE and not found["warmed"]
    assert found["reason"].startswith("transformers did not bind fla's gated delta rule")
    monkeypatch.setattr(kernels, "implementation_of", lambda function: kernels.FAST)  # as where fla imports
    assert warm_kernels.main(arguments) == 0
    found = json.loads(out.read_text())
    assert not found["warmed"] and found["reason"].startswith("no CUDA device")
