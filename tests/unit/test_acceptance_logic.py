"""The acceptance kit's pure parts: statistics, rows and rotation, comparisons, growth, memory, metrics, report."""
from __future__ import annotations

import ast
import json
import math
import sys
from pathlib import Path

import pytest

from acceptance.compare import (
    accuracy,
    chunk_differences,
    compare_predictions,
    facts_differences,
    negative_control,
    rotation_outcome,
)
from acceptance.memory import GIB, parse_nvidia_smi, suggest_cap_gib
from acceptance.metrics import memory_bytes, parse_samples
from acceptance.options import parse_options
from acceptance.report import CheckResult, Report, exit_code, render_json, render_markdown
from acceptance.rows import DataError, Prediction, parse_reference, parse_rows, rotate_descriptions
from acceptance.shapes import GrowthFailed, filler_state, grow, path_for
from acceptance.stats import percentile, summarize_ms

KIT = Path(__file__).resolve().parents[2] / "acceptance"


def row_line(row_id="r1", set_name="s", options=("a", "b", "c"), label="a", **extra) -> str:
    record = {"suites": ["pooled"], "set": set_name, "id": row_id, "state": {"k": 1}, "question": "Which?",
              "options": [{"id": o, "description": f"desc {o}"} for o in options], "label": label, **extra}
    return json.dumps(record)


def rows_of(*lines: str):
    return parse_rows(list(lines), "rows.jsonl")


def pred(row_id: str, top: str, **probabilities: float) -> Prediction:
    return Prediction(row_id, top, probabilities)


# statistics

def test_percentile_interpolates_linearly_between_ranks():
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 5.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 95) == pytest.approx(4.8)
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile([7.0], 95) == 7.0


@pytest.mark.parametrize("values, q", [([], 50), ([1.0], -1), ([1.0], 101)])
def test_percentile_refuses_nothing_and_out_of_range(values, q):
    with pytest.raises(ValueError):
        percentile(values, q)


def test_summary_is_in_milliseconds():
    assert summarize_ms([0.010, 0.020, 0.030]) == {"n": 3, "p50": 20.0, "p95": 29.0, "max": 30.0}
    assert summarize_ms([]) is None


# rows

def test_rows_parse_with_their_options_in_order():
    (row,) = rows_of(row_line(options=("x", "y"), label="y"))
    assert row.option_ids == ["x", "y"] and row.label == "y" and row.state == {"k": 1}
    assert row.decide_body() == {"id": "r1", "state": {"k": 1}, "question": "Which?",
                                 "options": [{"id": "x", "description": "desc x"},
                                             {"id": "y", "description": "desc y"}]}


@pytest.mark.parametrize("line, message", [
    (row_line(label="z"), "label 'z' is not one of the option ids"),
    (row_line(options=("a",)), "2..16"),
    (row_line(options=tuple("abcdefghijklmnopq")), "2..16"),
    (row_line(options=("a", "a")), "option ids must be unique"),
    (row_line(state=""), "'state' must be a nonempty"),
    (json.dumps({"id": "r"}), "'options' must be a list"),
    (row_line(suites=[]), "'suites' must be a nonempty list of pooled, wyrd, negative"),
    (row_line(suites=["bench"]), "'suites' must be"),
    ("[1, 2]", "each line must be a JSON object"),
    ("{not json", "not JSON"),
])
def test_bad_rows_are_refused_with_file_and_line(line, message):
    with pytest.raises(DataError, match=message) as info:
        rows_of(line)
    assert "rows.jsonl:1" in str(info.value)


def test_duplicate_row_ids_and_empty_files_are_refused():
    with pytest.raises(DataError, match="appears twice"):
        rows_of(row_line(), "", row_line())
    with pytest.raises(DataError, match="no rows"):
        rows_of("", "  ")


def test_bundled_smoke_rows_parse_across_two_sets_and_every_suite():
    rows = parse_rows((KIT / "data" / "smoke_rows.jsonl").read_text(encoding="utf-8").splitlines(), "smoke")
    assert 6 <= len(rows) <= 10
    assert {row.set for row in rows} == {"everyday", "support"}
    assert set().union(*(row.suites for row in rows)) == {"pooled", "wyrd", "negative"}


def test_reference_takes_an_object_or_a_list_in_row_order():
    rows = rows_of(row_line("r1", options=("a", "b")), row_line("r2", options=("a", "b")))
    lines = [json.dumps({"id": "r1", "top": "b", "probabilities": {"b": 0.7, "a": 0.3}}),
             json.dumps({"id": "r2", "top": "a", "probabilities": [0.6, 0.4]})]
    reference = parse_reference(lines, "ref", rows)
    assert reference["r1"] == pred("r1", "b", a=0.3, b=0.7)
    assert reference["r2"] == pred("r2", "a", a=0.6, b=0.4)


@pytest.mark.parametrize("record, message", [
    ({"id": "zz", "top": "a", "probabilities": [0.5, 0.5]}, "not in the rows"),
    ({"id": "r1", "top": "q", "probabilities": [0.5, 0.5]}, "top 'q'"),
    ({"id": "r1", "top": "a", "probabilities": [1.0]}, "'probabilities' must be"),
    ({"id": "r1", "top": "a", "probabilities": {"a": 0.5, "c": 0.5}}, "'probabilities' must be"),
    ({"id": "r1", "top": "a", "probabilities": [True, 0.5]}, "not a number"),
])
def test_bad_reference_lines_are_refused(record, message):
    rows = rows_of(row_line("r1", options=("a", "b")))
    with pytest.raises(DataError, match=message):
        parse_reference([json.dumps(record)], "ref", rows)


def test_rotation_moves_each_description_one_option_later_and_keeps_the_ids():
    (row,) = rows_of(row_line(options=("a", "b", "c")))
    rotated = rotate_descriptions(row)
    assert rotated.options == (("a", "desc c"), ("b", "desc a"), ("c", "desc b"))
    assert rotated.label == row.label and rotated.id == row.id
    assert rotate_descriptions(row, 3).options == row.options


# comparisons

def test_accuracy_overall_and_per_set_counts_missing_as_wrong():
    rows = rows_of(row_line("r1", "x", label="a"), row_line("r2", "x", label="b"), row_line("r3", "y", label="c"))
    counts = accuracy(rows, {"r1": pred("r1", "a"), "r2": pred("r2", "a")})
    assert counts["overall"] == {"correct": 1, "total": 3, "missing": 1, "accuracy": 1 / 3}
    assert counts["per_set"]["x"] == {"correct": 1, "total": 2, "missing": 0, "accuracy": 0.5}
    assert counts["per_set"]["y"] == {"correct": 0, "total": 1, "missing": 1, "accuracy": 0.0}


def test_comparison_counts_differing_tops_and_the_largest_gap():
    rows = rows_of(row_line("r1", options=("a", "b")), row_line("r2", options=("a", "b")),
                   row_line("r3", options=("a", "b")))
    first = {"r1": pred("r1", "a", a=0.9, b=0.1), "r2": pred("r2", "a", a=0.6, b=0.4),
             "r3": pred("r3", "a", a=0.5, b=0.5)}
    second = {"r1": pred("r1", "a", a=0.85, b=0.15), "r2": pred("r2", "b", a=0.3, b=0.7)}
    result = compare_predictions(rows, first, second)
    assert result["compared"] == 2 and result["tops_differ"] == 1 and result["differing_ids"] == ["r2"]
    assert result["missing_ids"] == ["r3"]
    assert result["max_probability_gap"] == pytest.approx(0.3) and result["max_gap_at"]["id"] == "r2"


def test_identical_runs_compare_as_equal():
    rows = rows_of(row_line("r1", options=("a", "b")))
    run = {"r1": pred("r1", "a", a=0.7, b=0.3)}
    result = compare_predictions(rows, run, dict(run))
    assert result["tops_differ"] == 0 and result["max_probability_gap"] == 0.0 and result["max_gap_at"] is None


def test_rotation_outcome_follow_stay_other():
    (row,) = rows_of(row_line(options=("a", "b", "c")))
    assert rotation_outcome(row, "a", "b") == "follow"  # a's description now sits on b
    assert rotation_outcome(row, "c", "a") == "follow"  # wraps around
    assert rotation_outcome(row, "a", "a") == "stay"
    assert rotation_outcome(row, "a", "c") == "other"


def test_negative_control_counts_every_scored_row():
    rows = rows_of(row_line("r1", options=("a", "b"), label="a"), row_line("r2", options=("a", "b"), label="a"),
                   row_line("r3", options=("a", "b", "c"), label="a"))
    original = {"r1": pred("r1", "a"), "r2": pred("r2", "a"), "r3": pred("r3", "b")}
    rotated = {"r1": pred("r1", "b"), "r2": pred("r2", "a"), "r3": pred("r3", "a")}
    result = negative_control(rows, original, rotated)
    assert (result["follow"], result["stay"], result["other"]) == (1, 1, 1)
    assert result["scored"] == 3 and result["label_follows"] == 1
    assert result["follow_rate"] == pytest.approx(1 / 3) and result["stay_rate"] == pytest.approx(1 / 3)


def test_chunk_differences_compare_exact_numbers():
    answer = {"probabilities": [0.25, 0.75], "top": "no", "confidence": 0.75, "input_tokens": 900, "call": {"i": 0}}
    assert chunk_differences(answer, {**answer, "call": {"i": 1}}) == []
    assert chunk_differences(answer, {**answer, "probabilities": [0.25, 0.7500000001]}) == ["probabilities"]
    assert chunk_differences(answer, {**answer, "input_tokens": 901, "top": "yes"}) == ["top", "input_tokens"]


def test_facts_differences_name_changed_keys():
    before = {"model": {"revision": "a"}, "max_tokens": 8192}
    assert facts_differences(before, dict(before)) == {}
    assert facts_differences(before, {"model": {"revision": "b"}, "max_tokens": 8192}) == {
        "model": {"before": {"revision": "a"}, "after": {"revision": "b"}}}


# growing a state to a token count

def linear(floor: int, per_unit: float, limit: int | None = None, calls: list | None = None):
    def measure(units: int):
        if calls is not None:
            calls.append(units)
        tokens = floor + math.floor(units * per_unit)
        return None if limit is not None and tokens > limit else tokens
    return measure


@pytest.mark.parametrize("floor, per_unit", [(200, 17.3), (900, 3.1), (50, 41.0)])
def test_growth_lands_in_the_window_under_the_target(floor, per_unit):
    growth = grow(linear(floor, per_unit), target=3900, tolerance=50)
    assert growth.reached and 3850 <= growth.tokens <= 3900
    assert len(growth.probes) <= 6


def test_growth_treats_a_refusal_as_too_long_and_stays_under_the_limit():
    calls: list[int] = []
    growth = grow(linear(300, 20.0, limit=4096, calls=calls), target=4080, tolerance=64, first_guess=1000)
    assert growth.reached and 4016 <= growth.tokens <= 4080
    assert calls[1] == 1000  # the first guess was refused, and the search came back under it


def test_growth_reports_a_shape_already_over_the_target():
    growth = grow(linear(460, 12.0), target=289, tolerance=15)
    assert not growth.reached and growth.tokens == 460 and growth.units == 0 and len(growth.probes) == 1


def test_growth_with_a_refused_smallest_request_fails():
    with pytest.raises(GrowthFailed):
        grow(lambda units: None, target=100, tolerance=10)


def test_growth_stops_when_no_unit_fits_the_window():
    growth = grow(linear(100, 100.0), target=1050, tolerance=10)
    assert not growth.reached and growth.tokens == 1000 and growth.units == 9


def test_filler_state_is_never_empty_and_grows():
    assert filler_state(0) and len(filler_state(3)) > len(filler_state(2))


def test_bodies_with_decisions_go_to_the_shared_path():
    assert path_for({"decisions": []}) == "/decide/shared" and path_for({"id": "x"}) == "/decide"


# memory and metrics

@pytest.mark.parametrize("peak_gib, cap", [(10.0, 12.0), (10.1, 12.5), (0.0, 1.0), (20.0, 23.0), (8.5, 10.5)])
def test_cap_is_peak_plus_ten_percent_plus_one_gib_rounded_up_to_half_a_gib(peak_gib, cap):
    assert suggest_cap_gib(peak_gib * GIB) == cap


def test_nvidia_smi_lines_are_per_gpu():
    assert parse_nvidia_smi("1024, 143771\n 2048 , 143771\n") == [
        {"index": 0, "used_mib": 1024.0, "total_mib": 143771.0},
        {"index": 1, "used_mib": 2048.0, "total_mib": 143771.0}]
    with pytest.raises(ValueError):
        parse_nvidia_smi("N/A\n")


METRICS = """# HELP intern_decision_gpu_memory_bytes Device memory after the last call
# TYPE intern_decision_gpu_memory_bytes gauge
intern_decision_gpu_memory_bytes{model="intern_decision",kind="reserved"} 9.663676416e+09
intern_decision_gpu_memory_bytes{kind="allocated",model="intern_decision"} 8589934592
intern_decision_model_info{model="intern_decision",name="a \\"quoted\\" {name}",vram_cap_gib=""} 1
nv_inference_count{model="intern_decision",version="1"} 42 1700000000000
plain_metric 3.5
"""


def test_metrics_parse_labels_with_escapes_and_braces():
    samples = parse_samples(METRICS)
    info = next(sample for sample in samples if sample.name == "intern_decision_model_info")
    assert info.labels == {"model": "intern_decision", "name": 'a "quoted" {name}', "vram_cap_gib": ""}
    assert any(sample.name == "nv_inference_count" and sample.value == 42 for sample in samples)
    assert any(sample.name == "plain_metric" and sample.labels == {} for sample in samples)


def test_memory_kinds_not_published_are_absent():
    assert memory_bytes(parse_samples(METRICS)) == {"reserved": 9663676416.0, "allocated": 8589934592.0}
    with_peak = METRICS + 'intern_decision_gpu_memory_bytes{kind="peak_reserved",model="intern_decision"} 1e10\n'
    assert memory_bytes(parse_samples(with_peak))["peak_reserved"] == 1e10


# report

def sample_report() -> Report:
    return Report({"url": "http://svc", "health": {"status": "ok"}}, [
        CheckResult(1, "positive_control", "Positive control", "fail", "accuracy 0.5 | low",
                    {"overall": {"correct": 1, "total": 2, "accuracy": 0.5}, "ratio": float("nan")}),
        CheckResult(4, "latency", "Latency", "pass", None, {"n": 3, "shapes": {"one": {
            "path": "/decide", "input_tokens": 374, "requests": 4, "non_200": 0,
            "client_ms": {"n": 3, "p50": 13.5, "p95": 14.1, "max": 14.2}, "server_total_ms": None,
            "server_inference_ms": {"n": 3, "p50": 9.4, "p95": 9.7, "max": 9.8}}}}),
        CheckResult(5, "vram", "VRAM", "not_run", "the model runs on the CPU"),
    ])


def test_report_renders_markdown_with_a_summary_and_a_latency_table():
    markdown = render_markdown(sample_report())
    assert markdown.startswith("# Acceptance report")
    assert "**1 pass, 1 fail, 0 inconclusive, 1 not run: not accepted: a check failed.**" in markdown
    assert "| 1 | Positive control | FAIL | accuracy 0.5 \\| low |" in markdown
    assert "| one | /decide | 374 | 4 | 0 | 13.5 / 14.1 / 14.2 | — | 9.4 / 9.7 / 9.8 |" in markdown
    assert "## 5. VRAM: NOT_RUN" in markdown and "Reason: the model runs on the CPU" in markdown
    assert "  - correct: 1" in markdown


def test_report_json_has_every_check_keyed_by_number_and_no_nan():
    data = json.loads(render_json(sample_report()))
    assert sorted(data["checks"]) == ["1", "4", "5"]
    assert data["checks"]["1"]["numbers"]["ratio"] is None
    assert data["summary"] == {"pass": 1, "fail": 1, "inconclusive": 0, "not_run": 1}
    assert data["verdict"] == "not accepted: a check failed"


def test_exit_code_is_zero_only_when_every_selected_check_passed():
    report = sample_report()
    assert exit_code(report) == 1
    report.checks = [check for check in report.checks if check.status != "fail"]
    assert exit_code(report) == 3 and report.verdict().startswith("not proven")
    report.selected = (4,)
    assert exit_code(report) == 0 and report.summary() == {"pass": 1, "fail": 0, "inconclusive": 0, "not_run": 0}
    report.checks.append(CheckResult(1, "positive_control", "Positive control", "inconclusive", "8 rows"))
    report.selected = (1, 4)
    assert exit_code(report) == 3 and report.summary()["inconclusive"] == 1


def test_a_check_that_did_not_pass_needs_a_reason():
    with pytest.raises(ValueError):
        CheckResult(2, "negative_control", "Negative", "fail")
    with pytest.raises(ValueError):
        CheckResult(2, "negative_control", "Negative", "maybe", "why")


# the command line and the kit's own imports

def test_options_read_the_token_file_and_the_checks(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("secret-token\n")
    options = parse_options(["--url", "http://h:1", "--token-file", str(token_file), "--metrics-url", "http://h:2/m",
                             "--checks", "8,4,5", "--n", "20", "--out", str(tmp_path / "out")])
    assert options.token == "secret-token" and options.checks == (4, 5, 8) and options.n == 20
    assert options.restart_command is None and not options.restart_prompt and options.flood == 64
    assert options.restarts == 1 and options.client_host and not options.client_host_given
    caller = parse_options(["--url", "http://h:1", "--token", "t", "--checks", "4", "--client-host", "nh3-dev",
                            "--out", str(tmp_path)])
    assert (caller.client_host, caller.client_host_given, caller.metrics_url) == ("nh3-dev", True, None)


@pytest.mark.parametrize("extra", [["--checks", "0,1"], ["--checks", "x"], ["--n", "0"], ["--restarts", "0"],
                                   ["--min-accuracy", "0.5"],
                                   ["--restart-command", "true", "--restart-prompt"]])
def test_bad_options_are_usage_errors(tmp_path, extra):
    with pytest.raises(SystemExit) as info:
        parse_options(["--url", "http://h:1", "--token", "t", "--metrics-url", "http://h:2", "--out", str(tmp_path),
                       *extra])
    assert info.value.code == 2


def test_the_kit_imports_only_the_standard_library():
    for path in KIT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top == "__future__" or top in sys.stdlib_module_names, f"{path.name} imports {name}"
