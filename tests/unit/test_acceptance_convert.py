"""The converter from the bench's files to the kit's rows and reference: the shapes it reads, merging, refusals."""
from __future__ import annotations

import json

import pytest

from acceptance.convert import main, merge_rows, normalise_prediction, normalise_row
from acceptance.rows import DataError, parse_reference, parse_rows

SEMIF = {"id": "a144-001", "state": "The parcel arrived broken.", "question": "What does the evidence show?",
         "options": [{"id": "supported", "description": "It is supported."},
                     {"id": "insufficient", "description": "It cannot be told."},
                     {"id": "contradicted", "description": "It is contradicted."}],
         "label": 2, "family": "evidence_interpretation"}
JEV = {"id": "wyrd-017", "state": {"turn": 3}, "question": {"type": "choice", "instructions": "Which reply fits?",
                                                            "criteria": {"accept": "Accept.", "decline": "Decline."}},
       "expected": "accept"}


def test_semif_rows_take_the_label_as_an_option_index():
    row = normalise_row(SEMIF, "negative", "f:1")
    assert row["label"] == "contradicted" and row["suites"] == ["negative"]
    assert row["set"] == "evidence_interpretation" and [o["id"] for o in row["options"]][0] == "supported"


def test_jev_questions_give_their_criteria_as_options_in_order():
    row = normalise_row(JEV, "wyrd", "f:1")
    assert row["question"] == "Which reply fits?" and row["label"] == "accept" and row["set"] == "wyrd"
    assert row["options"] == [{"id": "accept", "description": "Accept."}, {"id": "decline", "description": "Decline."}]


@pytest.mark.parametrize("record, message", [
    ({**SEMIF, "label": 3}, "label 3 is not an option index"),
    ({key: value for key, value in SEMIF.items() if key != "label"}, "no gold label"),
    ({**SEMIF, "label": "maybe"}, "label 'maybe' is not one of the option ids"),
    ({**SEMIF, "options": None}, "no options"),
    ({**SEMIF, "state": ""}, "'state' must be a nonempty"),
])
def test_rows_the_kit_could_not_use_are_refused_naming_where(record, message):
    with pytest.raises(DataError, match=message) as info:
        normalise_row(record, "pooled", "pooled.jsonl:7")
    assert "pooled.jsonl:7" in str(info.value)


def write(path, records, as_array=False):
    path.write_text(json.dumps(records) if as_array else "".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_row_in_two_sets_becomes_one_row_with_both_suites(tmp_path):
    pooled = write(tmp_path / "pooled.jsonl", [JEV, {**JEV, "id": "other-1"}])
    wyrd = write(tmp_path / "wyrd.json", [JEV], as_array=True)
    rows = merge_rows([("pooled", pooled), ("wyrd", wyrd)])
    assert [(row["id"], row["suites"]) for row in rows] == [("wyrd-017", ["pooled", "wyrd"]),
                                                            ("other-1", ["pooled"])]
    changed = write(tmp_path / "changed.jsonl", [{**JEV, "expected": "decline"}])
    with pytest.raises(DataError, match="differs from the row of that id in another set"):
        merge_rows([("pooled", pooled), ("wyrd", changed)])
    with pytest.raises(DataError, match="appears twice in the pooled rows"):
        merge_rows([("pooled", write(tmp_path / "twice.jsonl", [JEV, JEV]))])


@pytest.mark.parametrize("record", [
    {"id": "wyrd-017", "top": "accept", "probabilities": {"accept": 0.9, "decline": 0.1}},
    {"id": "wyrd-017", "choice": "accept", "probabilities": [0.9, 0.1]},
    {"id": "wyrd-017", "option_ids": ["accept", "decline"], "probabilities": [0.9, 0.1], "top": "accept"},
    {"id": "wyrd-017", "answers": {"q": {"choice": "accept", "probabilities": {"accept": 0.9, "decline": 0.1}}}},
    {"id": "wyrd-017", "result": {"prediction": "accept", "probabilities": {"decline": 0.1, "accept": 0.9}}},
])
def test_predictions_are_read_from_the_shapes_the_bench_keeps_them_in(record):
    row = normalise_row(JEV, "wyrd", "f:1")
    prediction = normalise_prediction(record, row, "p:1")
    (parsed,) = parse_reference([json.dumps(prediction)], "ref", parse_rows([json.dumps(row)], "rows")).values()
    assert parsed.top == "accept" and parsed.probabilities == {"accept": 0.9, "decline": 0.1}


def test_the_command_writes_files_the_kit_reads_and_reports_the_counts(tmp_path, capsys):
    pooled = write(tmp_path / "pooled.jsonl", [JEV, {**SEMIF, "id": "p2"}])
    negative = write(tmp_path / "a144.jsonl", [SEMIF])
    predictions = write(tmp_path / "predictions.jsonl",
                        [{"id": "wyrd-017", "top": "accept", "probabilities": [0.9, 0.1]}])
    rows_out, reference_out = tmp_path / "rows.jsonl", tmp_path / "reference.jsonl"
    code = main(["--pooled", str(pooled), "--wyrd", str(pooled), "--negative", str(negative),
                 "--predictions", str(predictions), "--rows-out", str(rows_out), "--reference-out",
                 str(reference_out)])
    assert code == 0
    rows = parse_rows(rows_out.read_text().splitlines(), "rows")
    assert {row.id: sorted(row.suites) for row in rows} == {
        "wyrd-017": ["pooled", "wyrd"], "p2": ["pooled", "wyrd"], "a144-001": ["negative"]}
    assert set(parse_reference(reference_out.read_text().splitlines(), "ref", rows)) == {"wyrd-017"}
    err = capsys.readouterr().err
    assert "pooled: 2 rows (the contract's set has 259)" in err and "predictions: 1 of 3 rows" in err


def test_the_command_refuses_a_prediction_for_no_row(tmp_path, capsys):
    pooled = write(tmp_path / "pooled.jsonl", [JEV])
    predictions = write(tmp_path / "predictions.jsonl", [{"id": "nobody", "top": "accept"}])
    code = main(["--pooled", str(pooled), "--predictions", str(predictions), "--rows-out", str(tmp_path / "r"),
                 "--reference-out", str(tmp_path / "ref")])
    assert code == 1 and "id 'nobody' is not one of the rows" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
