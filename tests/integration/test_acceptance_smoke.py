"""The acceptance kit, run as operators run it, against the real CPU stack (fixture checkpoint, no VRAM).

Three runs: the bundled smoke rows through every check (checks 1-3 must come out inconclusive, never pass); rows
of the bench's counts synthesised on the fixture (the contract's rules applied: its random weights are labelled
so that the counts land where the test wants them); and a "restart" that leaves the model process as it was,
which check 3 must fail. The restarts are real: Triton unloads and loads the model, a new model process.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from devstack.triton import MODEL_NAME

from .helpers import AUTH, SHIM_TOKEN

pytestmark = pytest.mark.triton
REPO_ROOT = Path(__file__).resolve().parents[2]
ROWS = REPO_ROOT / "acceptance" / "data" / "smoke_rows.jsonl"
N = 3
FLOOD = 6
OPTIONS = [{"id": "a", "description": "The first way."}, {"id": "b", "description": "The second way."}]

RELOAD = """
import sys, urllib.request
url, key = sys.argv[1], sys.argv[2]
for action in ("unload", "load"):
    request = urllib.request.Request(f"{url}/{action}", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json", "triton-api-key": key})
    urllib.request.urlopen(request, timeout=120).read()
"""


def reload_command(triton) -> str:
    """The restart check 3 runs: Triton unloads the model and loads it again, in a new model process."""
    repository = f"http://{triton.http_url}/v2/repository/models/{MODEL_NAME}"
    return shlex.join([sys.executable, "-c", RELOAD, repository, triton.api_key])


def write_json(path: Path, body: dict) -> Path:
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def run_kit(folder: Path, shim, triton, *extra: str) -> tuple[subprocess.CompletedProcess, dict, Path, float]:
    token_file = folder / "token"
    token_file.write_text(SHIM_TOKEN + "\n", encoding="utf-8")
    out = folder / "report"
    command = [sys.executable, "-m", "acceptance", "--url", shim.url, "--token-file", str(token_file),
               "--metrics-url", triton.metrics_url, "--out", str(out), *extra]
    started = time.monotonic()
    completed = subprocess.run(command, cwd=REPO_ROOT, env=dict(os.environ), capture_output=True, text=True,
                               timeout=300)
    seconds = time.monotonic() - started
    assert (out / "report.json").is_file(), completed.stderr
    return completed, json.loads((out / "report.json").read_text(encoding="utf-8")), out, seconds


@pytest.fixture(scope="module")
def kit_run(shim, triton, tmp_path_factory):
    folder = tmp_path_factory.mktemp("acceptance")
    # The fixture's fault triggers stand in for what the real model does under load: an OOM, a slow call.
    over_cap = write_json(folder / "over-cap.json", {"id": "over-cap", "state": {"__fixture_fault__": "oom"},
                                                     "question": "Which way?", "options": OPTIONS})
    slow = write_json(folder / "slow.json", {"id": "slow", "state": {"__fixture_fault__": {"sleep_seconds": 1.0}},
                                             "question": "Which way?", "options": OPTIONS})
    return run_kit(folder, shim, triton, "--rows", str(ROWS), "--n", str(N),
                   "--restart-command", reload_command(triton), "--restart-timeout", "120",
                   "--over-cap-body", str(over_cap), "--flood", str(FLOOD), "--flood-body", str(slow))


def check(report: dict, number: int) -> dict:
    return report["checks"][str(number)]


def test_every_check_has_a_status_and_the_exit_status_says_nothing_was_proven(kit_run):
    completed, report, out, seconds = kit_run
    assert sorted(report["checks"]) == [str(n) for n in range(1, 9)]
    for number in range(1, 9):
        result = check(report, number)
        assert result["status"] in ("pass", "fail", "inconclusive", "not_run"), result
        assert result["status"] == "pass" or result["reason"], result
    assert report["summary"] == {"pass": 2, "fail": 0, "inconclusive": 5, "not_run": 1}, report["summary"]
    assert completed.returncode == 3, completed.stderr
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "**2 pass, 0 fail, 5 inconclusive, 1 not run: not proven" in markdown and "## 8." in markdown
    print(f"kit ran in {seconds:.1f} s")


def test_the_controls_on_the_smoke_rows_are_inconclusive_never_pass(kit_run):
    _, report, _, _ = kit_run
    rows = sum(1 for line in ROWS.read_text(encoding="utf-8").splitlines() if line.strip())
    positive = check(report, 1)
    assert positive["status"] == "inconclusive"
    assert f"{rows} pooled row(s), not the contract's 259" in positive["reason"]
    assert "4 wyrd row(s), not the contract's 84" in positive["reason"]
    assert "no --reference" in positive["reason"]
    assert positive["numbers"]["pooled"]["overall"]["total"] == rows == positive["numbers"]["scored"]
    negative = check(report, 2)
    assert negative["status"] == "inconclusive" and "not the contract's 144" in negative["reason"]
    assert negative["numbers"]["follow"] + negative["numbers"]["stay"] + negative["numbers"]["other"] == rows
    stability = check(report, 3)
    assert stability["status"] == "inconclusive" and stability["reason"] == \
        f"{rows} pooled row(s), not the contract's 259"


def test_the_restart_brought_a_new_model_process_and_no_label_moved(kit_run):
    _, report, _, _ = kit_run
    numbers = check(report, 3)["numbers"]
    (restart,) = numbers["across_restarts"]
    assert len(numbers["boot_id_before"]) == 32 and restart["boot_id"] != numbers["boot_id_before"]
    assert restart["boot_id_after_scoring"] == restart["boot_id"] and restart["facts_changed"] == {}
    assert numbers["within_process"]["label_flips"] == 0 and restart["label_flips"] == 0


def test_latency_on_the_test_stack_is_inconclusive_and_measures_every_shape(kit_run):
    _, report, _, _ = kit_run
    latency = check(report, 4)
    assert latency["status"] == "inconclusive"
    assert "3 timed request(s) per shape; this kit asks at least 20" in latency["reason"]
    assert "the state reached" in latency["reason"]  # 16 questions and 3,900 state tokens exceed max_tokens 4096
    shapes = latency["numbers"]["shapes"]
    assert len(shapes) == 4 and latency["numbers"]["client_host"]
    for shape in shapes.values():
        assert shape["requests"] == N + 1 and shape["non_200"] == 0
        assert shape["client_ms"]["n"] == shape["server_total_ms"]["n"] == N
    long_shape = shapes["16 criteria, ~3,900-token state"]
    assert long_shape["input_tokens"][0] == long_shape["state_tokens"] + long_shape["growth"][
        "call_tokens_over_smallest_state"] <= 4096
    # the fixture's tokenizer takes more tokens per character than the real one: the state is shortened to fit
    assert "the state was shortened to" in latency["reason"]
    assert 0 < shapes["21 binary criteria, realistic state"]["state_chars"] < 8000


def test_vram_is_not_run_and_over_cap_is_inconclusive_on_the_cpu(kit_run):
    _, report, _, _ = kit_run
    vram = check(report, 5)
    assert vram["status"] == "not_run" and "CPU" in vram["reason"]
    over_cap = check(report, 6)
    assert over_cap["status"] == "inconclusive" and "read 0" in over_cap["reason"]
    assert over_cap["numbers"]["over_cap_reply"] == {"status": 503, "error_code": "out_of_memory", "envelope": True}
    assert over_cap["numbers"]["baseline_gib"] == 0 and over_cap["numbers"]["normal_request_status"] == 200


def test_chunking_and_limits_pass(kit_run):
    _, report, _, _ = kit_run
    chunking = check(report, 7)
    assert chunking["status"] == "pass", chunking
    assert chunking["numbers"]["questions_per_call"] == [16, 5] and chunking["numbers"]["mismatches"] == {}
    limits = check(report, 8)
    assert limits["status"] == "pass", limits
    assert all(entry["status"] == 401 for entry in limits["numbers"]["unauthorized"].values())
    assert limits["numbers"]["flood"]["busy_envelopes"] == limits["numbers"]["flood"]["statuses"]["429"]


# rows of the bench's counts

def synthetic_row(row_id: str, suites: list[str], n: int) -> dict:
    return {"suites": suites, "set": suites[-1], "id": row_id, "state": f"Case {n}: order {n * 7} arrived late.",
            "question": f"Is a refund due for case {n}?",
            "options": [{"id": "yes", "description": "A refund is due."},
                        {"id": "no", "description": "No refund is due."}]}


def bench_files(shim, folder: Path) -> tuple[Path, Path]:
    """259 pooled rows (the first 84 also Wyrd) and 144 negative rows, labelled from the fixture's own answers so
    that 240/259 pooled and 79/84 Wyrd rows are right; the reference is those answers."""
    pooled = [synthetic_row(f"pooled-{n}", ["pooled", "wyrd"] if n < 84 else ["pooled"], n) for n in range(259)]
    negative = [synthetic_row(f"negative-{n}", ["negative"], 1000 + n) for n in range(144)]
    wrong = set(range(5)) | set(range(84, 98))  # 5 Wyrd rows and 14 more pooled rows answered wrong
    reference = []
    with httpx.Client(base_url=shim.url, timeout=60, headers=AUTH) as client:
        for n, row in enumerate(pooled):
            body = {key: row[key] for key in ("id", "state", "question", "options")}
            answer = client.post("/decide", json=body).json()
            other = next(option_id for option_id in answer["option_ids"] if option_id != answer["top"])
            row["label"] = other if n in wrong else answer["top"]
            reference.append({"id": row["id"], "top": answer["top"], "probabilities": answer["probabilities"]})
    for row in negative:
        row["label"] = "yes"
    rows_file, reference_file = folder / "bench-rows.jsonl", folder / "bench-reference.jsonl"
    rows_file.write_text("".join(json.dumps(row) + "\n" for row in pooled + negative), encoding="utf-8")
    reference_file.write_text("".join(json.dumps(line) + "\n" for line in reference), encoding="utf-8")
    return rows_file, reference_file


@pytest.fixture(scope="module")
def bench_run(shim, triton, tmp_path_factory):
    folder = tmp_path_factory.mktemp("acceptance-bench")
    rows_file, reference_file = bench_files(shim, folder)
    return run_kit(folder, shim, triton, "--checks", "1,2,3", "--rows", str(rows_file), "--reference",
                   str(reference_file), "--restart-command", reload_command(triton), "--restart-timeout", "120")


def test_on_the_bench_counts_the_positive_control_applies_the_contracts_windows(bench_run):
    completed, report, _, seconds = bench_run
    positive = check(report, 1)
    assert positive["status"] == "pass", positive
    numbers = positive["numbers"]
    assert (numbers["pooled"]["rows"], numbers["pooled"]["overall"]["correct"]) == (259, 240)
    assert (numbers["wyrd"]["rows"], numbers["wyrd"]["overall"]["correct"]) == (84, 79)
    assert numbers["pooled"]["correct_window"] == [230, 250] and numbers["wyrd"]["correct_window"] == [74, 84]
    row_by_row = numbers["row_by_row"]
    assert row_by_row["compared"] == 259 and row_by_row["tops_differ"] == 0 and row_by_row["missing_ids"] == []
    assert row_by_row["max_probability_gap"] < 1e-6
    print(f"kit on the bench's counts ran in {seconds:.1f} s")


def test_on_the_bench_counts_the_negative_control_is_judged_against_its_floor(bench_run):
    _, report, _, _ = bench_run
    negative = check(report, 2)
    numbers = negative["numbers"]
    assert numbers["rows"] == numbers["scored"] == 144
    assert (numbers["least_follow"], numbers["most_stay"], numbers["floor_rows"]) == (117, 15, 5.76)
    assert numbers["follow"] + numbers["stay"] + numbers["other"] == 144
    # the fixture's random weights decide which; either way the rule was applied, never left inconclusive
    expected = "pass" if numbers["follow"] >= 117 and numbers["stay"] <= 15 else "fail"
    assert negative["status"] == expected, negative


def test_on_the_bench_counts_stability_passes_across_a_real_restart(bench_run):
    completed, report, _, _ = bench_run
    stability = check(report, 3)
    assert stability["status"] == "pass", stability
    numbers = stability["numbers"]
    assert numbers["rows"] == 259 and numbers["within_process"]["label_flips"] == 0
    assert numbers["across_restarts_total"]["restarts_scored"] == 1
    assert numbers["across_restarts_total"]["model_processes"] == 2
    assert completed.returncode == (0 if check(report, 2)["status"] == "pass" else 1), completed.stderr


def test_a_restart_that_leaves_the_model_process_fails_stability(shim, triton, tmp_path):
    completed, report, _, _ = run_kit(tmp_path, shim, triton, "--checks", "3", "--rows", str(ROWS),
                                      "--restart-command", "true", "--restart-timeout", "3")
    stability = check(report, 3)
    assert stability["status"] == "fail", stability
    assert "the restart did not change the model process" in stability["reason"]
    assert completed.returncode == 1
