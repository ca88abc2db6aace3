"""Labelled rows and reference predictions: the JSONL files the kit reads, and the negative control's rotation.

A row is one line: {"suites", "set", "id", "state", "question", "options": [{"id", "description"}, ...], "label"},
where label is the id of the correct option and suites names the bench's sets the row belongs to (pooled, wyrd,
negative; a row may be in several). A reference line is {"id", "top", "probabilities"}, the probabilities either
an object keyed by option id or a list in the row's option order. acceptance/convert.py writes both from the
bench's own files.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .pass_rules import SUITES


class DataError(ValueError):
    """A rows or reference file that the kit cannot use; the message names the file and line."""


@dataclass(frozen=True)
class Row:
    set: str
    id: str
    state: object
    question: str
    options: tuple[tuple[str, str], ...]  # (option id, description), in the row's order
    label: str
    suites: frozenset[str] = frozenset()  # the bench's sets it belongs to

    @property
    def option_ids(self) -> list[str]:
        return [option_id for option_id, _ in self.options]

    def decide_body(self) -> dict:
        return {"id": self.id, "state": self.state, "question": self.question,
                "options": [{"id": option_id, "description": text} for option_id, text in self.options]}


@dataclass(frozen=True)
class Prediction:
    id: str
    top: str
    probabilities: dict[str, float]  # by option id


def _nonempty_string(record: dict, key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value:
        raise DataError(f"{where}: {key!r} must be a nonempty string")
    return value


def _json_lines(lines: Iterable[str], source: str) -> Iterable[tuple[str, dict]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise DataError(f"{where}: each line must be a JSON object")
        yield where, record


def parse_row(record: dict, where: str) -> Row:
    options = record.get("options")
    if not isinstance(options, list) or not 2 <= len(options) <= 16:
        raise DataError(f"{where}: 'options' must be a list of 2..16 {{id, description}} objects")
    pairs = []
    for index, option in enumerate(options):
        if not isinstance(option, dict):
            raise DataError(f"{where}: options[{index}] must be an object")
        pairs.append((_nonempty_string(option, "id", f"{where} options[{index}]"),
                      _nonempty_string(option, "description", f"{where} options[{index}]")))
    ids = [option_id for option_id, _ in pairs]
    if len(set(ids)) != len(ids):
        raise DataError(f"{where}: option ids must be unique")
    label = _nonempty_string(record, "label", where)
    if label not in ids:
        raise DataError(f"{where}: label {label!r} is not one of the option ids {ids}")
    state = record.get("state")
    if state in (None, "", {}, []):
        raise DataError(f"{where}: 'state' must be a nonempty string, object or array")
    return Row(set=_nonempty_string(record, "set", where), id=_nonempty_string(record, "id", where), state=state,
               question=_nonempty_string(record, "question", where), options=tuple(pairs), label=label,
               suites=_suites(record.get("suites"), where))


def _suites(value: object, where: str) -> frozenset[str]:
    if (not isinstance(value, list) or not value or not all(isinstance(name, str) for name in value)
            or not set(value) <= set(SUITES)):
        raise DataError(f"{where}: 'suites' must be a nonempty list of {', '.join(SUITES)}")
    return frozenset(value)


def in_suite(rows: list[Row], suite: str) -> list[Row]:
    return [row for row in rows if suite in row.suites]


def parse_rows(lines: Iterable[str], source: str) -> list[Row]:
    rows = [parse_row(record, where) for where, record in _json_lines(lines, source)]
    if not rows:
        raise DataError(f"{source}: no rows")
    seen: set[str] = set()
    for row in rows:
        if row.id in seen:
            raise DataError(f"{source}: row id {row.id!r} appears twice")
        seen.add(row.id)
    return rows


def parse_reference(lines: Iterable[str], source: str, rows: list[Row]) -> dict[str, Prediction]:
    """Reference predictions keyed by row id; lines whose id is not a row are refused."""
    by_id = {row.id: row for row in rows}
    predictions: dict[str, Prediction] = {}
    for where, record in _json_lines(lines, source):
        row_id = _nonempty_string(record, "id", where)
        row = by_id.get(row_id)
        if row is None:
            raise DataError(f"{where}: id {row_id!r} is not in the rows")
        top = _nonempty_string(record, "top", where)
        if top not in row.option_ids:
            raise DataError(f"{where}: top {top!r} is not one of the row's option ids")
        predictions[row_id] = Prediction(row_id, top, _reference_probabilities(record.get("probabilities"), row, where))
    return predictions


def _reference_probabilities(value: object, row: Row, where: str) -> dict[str, float]:
    if isinstance(value, list) and len(value) == len(row.options):
        pairs = zip(row.option_ids, value)
    elif isinstance(value, dict) and set(value) == set(row.option_ids):
        pairs = value.items()
    else:
        raise DataError(f"{where}: 'probabilities' must be an object keyed by the row's option ids "
                        f"or a list of {len(row.options)} numbers in the row's option order")
    probabilities = {}
    for option_id, p in pairs:
        if isinstance(p, bool) or not isinstance(p, (int, float)):
            raise DataError(f"{where}: probability for {option_id!r} is not a number")
        probabilities[option_id] = float(p)
    return probabilities


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DataError(f"{path}: {exc.strerror or exc}") from None


def rotate_descriptions(row: Row, places: int = 1) -> Row:
    """The row with each description moved `places` options later (cyclically); ids and their order stay."""
    ids = row.option_ids
    descriptions = [text for _, text in row.options]
    count = len(ids)
    moved = [descriptions[(index - places) % count] for index in range(count)]
    return Row(set=row.set, id=row.id, state=row.state, question=row.question,
               options=tuple(zip(ids, moved)), label=row.label, suites=row.suites)
