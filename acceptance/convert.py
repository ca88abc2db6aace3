"""python -m acceptance.convert: the bench's rows and predictions in the kit's input format (docs/acceptance.md).

    python -m acceptance.convert --pooled POOLED.jsonl --wyrd WYRD.jsonl --negative AUTHORED144.jsonl \
        [--predictions PREDICTIONS.jsonl ...] --rows-out bench-rows.jsonl [--reference-out bench-reference.jsonl]

Each input is JSON Lines or one JSON array of rows. A row is read in any of the shapes the bench's sets come in:
the kit's own ({id, state, question, options: [{id, description}], label: option id}); SemIf's (label the index
of the correct option); options as an object {id: description}; or a Jev question (question: {type, instructions,
criteria: {id: description}}, the gold in expected, label or labels). A row that appears in several sets (a Wyrd
row in the pooled set) becomes one row with both suites. A prediction is {id, top | choice | prediction,
probabilities} (an object by option id or a list in option order), a /decide result ({id, option_ids,
probabilities, top}) or predict()'s answer ({id, answers: {field: {choice, probabilities}}}), optionally under
"result". The counts per suite are printed against the contract's; the kit judges them again.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .pass_rules import NEGATIVE, POOLED, REQUIRED_ROWS, SUITES, WYRD
from .rows import DataError, parse_reference, parse_row

GOLD_KEYS = ("label", "expected", "labels", "answer", "gold")
TOP_KEYS = ("top", "choice", "prediction", "predicted")


def read_records(path: Path) -> list[tuple[str, dict]]:
    """(where, record) for each row of a JSON Lines file or of a file holding one JSON array."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DataError(f"{path}: {exc.strerror or exc}") from None
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: not JSON ({exc.msg})") from None
        pairs = [(f"{path}[{index}]", record) for index, record in enumerate(records)]
    else:
        pairs = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    pairs.append((f"{path}:{number}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{number}: not JSON ({exc.msg})") from None
    for where, record in pairs:
        if not isinstance(record, dict):
            raise DataError(f"{where}: each row must be a JSON object")
    return pairs


def _options_and_question(record: dict, where: str) -> tuple[list[dict], object]:
    question = record.get("question")
    if isinstance(question, dict):  # a Jev question: the options are its criteria
        criteria = question.get("criteria")
        if not isinstance(criteria, dict):
            raise DataError(f"{where}: a question object needs 'criteria' {{id: description}}")
        return [{"id": key, "description": value} for key, value in criteria.items()], question.get("instructions")
    options = record.get("options")
    if isinstance(options, dict):
        options = [{"id": key, "description": value} for key, value in options.items()]
    if not isinstance(options, list):
        raise DataError(f"{where}: no options (a list of {{id, description}}, an object, or question.criteria)")
    return options, question


def _gold(record: dict, option_ids: list[str], where: str) -> str:
    for key in GOLD_KEYS:
        value = record.get(key)
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int):
            if not 0 <= value < len(option_ids):
                raise DataError(f"{where}: {key} {value} is not an option index (0..{len(option_ids) - 1})")
            return option_ids[value]
        if isinstance(value, str):
            return value
    raise DataError(f"{where}: no gold label (one of {', '.join(GOLD_KEYS)})")


def normalise_row(record: dict, suite: str, where: str) -> dict:
    """One row of the bench in the kit's format, checked as the kit checks it."""
    options, question = _options_and_question(record, where)
    option_ids = [option.get("id") if isinstance(option, dict) else None for option in options]
    row_id = record.get("id", record.get("row_id"))
    row = {"suites": [suite], "set": record.get("set") or record.get("family") or suite,
           "id": str(row_id) if isinstance(row_id, (str, int)) and not isinstance(row_id, bool) else row_id,
           "state": record.get("state"), "question": question,
           "options": [{"id": option.get("id"), "description": option.get("description")}
                       if isinstance(option, dict) else option for option in options],
           "label": _gold(record, option_ids, where)}
    parse_row(row, where)  # refuses what the kit would refuse, naming where it came from
    return row


def merge_rows(sets: list[tuple[str, Path]]) -> list[dict]:
    """Rows of every set, one per id; a row in several sets carries every suite, and must be the same row."""
    merged: dict[str, dict] = {}
    for suite, path in sets:
        for where, record in read_records(path):
            row = normalise_row(record, suite, where)
            known = merged.get(row["id"])
            if known is None:
                merged[row["id"]] = row
                continue
            same = {key: value for key, value in row.items() if key not in ("suites", "set")}
            if same != {key: value for key, value in known.items() if key not in ("suites", "set")}:
                raise DataError(f"{where}: row {row['id']!r} differs from the row of that id in another set")
            if suite in known["suites"]:
                raise DataError(f"{where}: row id {row['id']!r} appears twice in the {suite} rows")
            known["suites"].append(suite)
    return list(merged.values())


def _answer(record: dict) -> dict:
    result = record.get("result") if isinstance(record.get("result"), dict) else record
    answers = result.get("answers")
    if isinstance(answers, dict) and len(answers) == 1:
        (answer,) = answers.values()
        if isinstance(answer, dict):
            return answer
    return result


def normalise_prediction(record: dict, row: dict, where: str) -> dict:
    answer = _answer(record)
    top = next((answer[key] for key in TOP_KEYS if isinstance(answer.get(key), str)), None)
    probabilities = answer.get("probabilities")
    option_ids = answer.get("option_ids")
    if isinstance(probabilities, list) and isinstance(option_ids, list) and len(option_ids) == len(probabilities):
        probabilities = dict(zip(option_ids, probabilities))
    if top is None:
        raise DataError(f"{where}: no top choice (one of {', '.join(TOP_KEYS)})")
    return {"id": row["id"], "top": top, "probabilities": probabilities}


def convert_predictions(paths: list[Path], rows: list[dict]) -> list[dict]:
    by_id = {row["id"]: row for row in rows}
    predictions: dict[str, dict] = {}
    for path in paths:
        for where, record in read_records(path):
            row_id = record.get("id", record.get("row_id"))
            row = by_id.get(str(row_id))
            if row is None:
                raise DataError(f"{where}: id {row_id!r} is not one of the rows")
            predictions[row["id"]] = normalise_prediction(record, row, where)
    return list(predictions.values())


def counts(rows: list[dict]) -> dict[str, int]:
    return {suite: sum(1 for row in rows if suite in row["suites"]) for suite in SUITES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acceptance.convert",
                                     description="Write the bench's rows and predictions in the kit's format.")
    parser.add_argument("--pooled", type=Path, action="append", default=[], help="the pooled rows (259)")
    parser.add_argument("--wyrd", type=Path, action="append", default=[], help="the Wyrd rows (84)")
    parser.add_argument("--negative", type=Path, action="append", default=[],
                        help="the negative control's rows (144)")
    parser.add_argument("--predictions", type=Path, action="append", default=[],
                        help="the bench's own predictions per row")
    parser.add_argument("--rows-out", type=Path, required=True)
    parser.add_argument("--reference-out", type=Path)
    args = parser.parse_args(argv)
    if args.predictions and args.reference_out is None:
        parser.error("--predictions needs --reference-out")
    sets = [(POOLED, path) for path in args.pooled] + [(WYRD, path) for path in args.wyrd] + \
           [(NEGATIVE, path) for path in args.negative]
    if not sets:
        parser.error("give at least one of --pooled, --wyrd, --negative")
    try:
        rows = merge_rows(sets)
        lines = [json.dumps(row, ensure_ascii=False) for row in rows]
        predictions = convert_predictions(args.predictions, rows)
        reference = [json.dumps(prediction, ensure_ascii=False) for prediction in predictions]
        kit_rows = [parse_row(row, f"{args.rows_out}:{index + 1}") for index, row in enumerate(rows)]
        parse_reference(reference, str(args.reference_out), kit_rows)  # the kit must read what is written
    except DataError as exc:
        print(f"cannot convert: {exc}", file=sys.stderr)
        return 1
    args.rows_out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if args.reference_out is not None:
        args.reference_out.write_text("\n".join(reference) + ("\n" if reference else ""), encoding="utf-8")
    for suite, count in counts(rows).items():
        note = "" if count == REQUIRED_ROWS[suite] else f" (the contract's set has {REQUIRED_ROWS[suite]})"
        print(f"{suite}: {count} rows{note}", file=sys.stderr)
    print(f"predictions: {len(predictions)} of {len(rows)} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
