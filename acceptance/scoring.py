"""Scoring labelled rows through /decide, one row at a time, in the caller's option order."""
from __future__ import annotations

from dataclasses import dataclass, field

from .client import Service
from .rows import Prediction, Row


@dataclass
class ScoredRun:
    predictions: dict[str, Prediction] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # row id -> what came back instead of a 200

    def failure_reason(self) -> str | None:
        if not self.failures:
            return None
        first_id, first = next(iter(self.failures.items()))
        return f"{len(self.failures)} row(s) not scored, e.g. {first_id}: {first}"


def prediction_from(row: Row, result: dict) -> Prediction:
    probabilities = dict(zip(result["option_ids"], result["probabilities"]))
    if set(probabilities) != set(row.option_ids):
        raise ValueError(f"answer for {row.id} has option ids {result['option_ids']}, asked {row.option_ids}")
    return Prediction(row.id, result["top"], probabilities)


def score_rows(service: Service, rows: list[Row]) -> ScoredRun:
    run = ScoredRun()
    for row in rows:
        reply = service.post("/decide", row.decide_body())
        if reply.status != 200:
            run.failures[row.id] = reply.describe()
            continue
        try:
            run.predictions[row.id] = prediction_from(row, reply.body)
        except (KeyError, TypeError, ValueError) as exc:
            run.failures[row.id] = f"unusable answer: {exc}"
    return run
