"""What every check shares: the options, the service, /health as first read, and results computed once."""
from __future__ import annotations

import json
from pathlib import Path

from ..client import Reply, Service, fetch_text
from ..metrics import memory_bytes, parse_samples
from ..options import Options
from ..report import FAIL, INCONCLUSIVE, PASS
from ..rows import DataError, Prediction, Row, parse_reference, parse_rows, read_lines
from ..scoring import ScoredRun, score_rows
from ..shapes import LONG_STATE_TOKENS, Growth, GrowthFailed, binary_criteria, filler_state, grow, shared_body


class CheckFailed(Exception):
    def __init__(self, reason: str, numbers: dict | None = None):
        super().__init__(reason)
        self.reason = reason
        self.numbers = numbers or {}


class NotRun(Exception):
    def __init__(self, reason: str, numbers: dict | None = None):
        super().__init__(reason)
        self.reason = reason
        self.numbers = numbers or {}


class ProbeFailed(Exception):
    """A request while growing a state came back with neither 200 nor 422."""

    def __init__(self, reply: Reply):
        super().__init__(reply.describe())
        self.reply = reply


# Token targets stay this far under the service's limit, so that a shape never lands exactly on it.
LIMIT_MARGIN = 16


class Verdict:
    """What a check found: failures (the service is wrong) and what kept it from proving anything (inconclusive).

    A failure outranks an unproven point: whatever the data, a wrong answer is wrong.
    """

    def __init__(self):
        self.failures: list[str] = []
        self.unproven: list[str] = []

    def fail(self, reason: str) -> None:
        self.failures.append(reason)

    def unprove(self, reason: str) -> None:
        self.unproven.append(reason)

    def result(self, numbers: dict) -> tuple[str, str | None, dict]:
        if self.failures:
            also = f"; inconclusive besides: {'; '.join(self.unproven)}" if self.unproven else ""
            return FAIL, "; ".join(self.failures) + also, numbers
        if self.unproven:
            return INCONCLUSIVE, "; ".join(self.unproven), numbers
        return PASS, None, numbers


class Context:
    def __init__(self, options: Options, service: Service):
        self.options = options
        self.service = service
        self.health: Reply = service.health()
        self._rows: list[Row] | None = None
        self._first = ScoredRun()
        self._first_scored: set[str] = set()
        self._grown: dict[tuple, tuple[str, Growth]] = {}

    # /health

    def facts(self) -> dict:
        """The /health body read at start; a check that needs it fails when the service was not healthy."""
        if self.health.status != 200 or not isinstance(self.health.body, dict):
            raise CheckFailed(f"/health did not answer 200 at start: {self.health.describe()}")
        return self.health.body

    def max_tokens(self) -> int:
        value = self.facts().get("max_tokens")
        if not isinstance(value, int) or value < 1:
            raise CheckFailed(f"/health.max_tokens is not a positive integer: {value!r}")
        return value

    # rows

    def rows(self) -> list[Row]:
        if self._rows is None:
            try:
                self._rows = parse_rows(read_lines(self.options.rows), str(self.options.rows))
            except DataError as exc:
                raise CheckFailed(f"rows: {exc}") from None
        return self._rows

    def reference(self) -> dict[str, Prediction] | None:
        if self.options.reference is None:
            return None
        try:
            return parse_reference(read_lines(self.options.reference), str(self.options.reference), self.rows())
        except DataError as exc:
            raise CheckFailed(f"reference: {exc}") from None

    def first_scoring(self, rows: list[Row]) -> ScoredRun:
        """These rows' first scoring as given, each row scored once however many checks ask (1, 2 and 3 start
        from it)."""
        missing = [row for row in rows if row.id not in self._first_scored]
        if missing:
            run = score_rows(self.service, missing)
            self._first.predictions.update(run.predictions)
            self._first.failures.update(run.failures)
            self._first_scored.update(row.id for row in missing)
        ids = {row.id for row in rows}
        return ScoredRun({key: value for key, value in self._first.predictions.items() if key in ids},
                         {key: value for key, value in self._first.failures.items() if key in ids})

    # metrics

    def memory(self) -> dict[str, float]:
        if self.options.metrics_url is None:
            raise NotRun("no --metrics-url given: the model's memory gauges cannot be read")
        try:
            text = fetch_text(self.options.metrics_url, self.options.timeout)
        except OSError as exc:
            raise CheckFailed(f"metrics: {exc}") from None
        return memory_bytes(parse_samples(text))

    # bodies

    def body_from_file(self, path: Path) -> dict:
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CheckFailed(f"{path}: not a readable JSON body ({exc})") from None
        if not isinstance(body, dict):
            raise CheckFailed(f"{path}: the body must be a JSON object")
        return body

    def long_state(self) -> tuple[list[dict], str, Growth, bool]:
        """Check 4's 16 criteria over a state of about 3,900 tokens of its own (the contract's shape), within
        max_tokens: (criteria, state, growth of the state's tokens, whether the contract's size was reached)."""
        criteria16 = binary_criteria(16)
        state, growth = self.grown_state(criteria16, LONG_STATE_TOKENS, tolerance=50, state_tokens=True)
        return criteria16, state, growth, growth.target == LONG_STATE_TOKENS and growth.reached

    def grown_state(self, decisions: list[dict], target: int, tolerance: int, before_probe=None,
                    state_tokens: bool = False) -> tuple[str, Growth]:
        """A filler state that brings a /decide/shared call of these decisions to about target input tokens.

        state_tokens: the target counts the tokens the state adds over the smallest one (the call's input tokens
        less those of the same call over the one-line state), and is lowered to what still fits max_tokens.
        Cached per (questions, target), so later checks reuse what an earlier one grew.
        """
        key = (json.dumps(decisions, sort_keys=True), target, tolerance, state_tokens)
        if key not in self._grown:
            refused: list[str] = []

            def measure(units: int) -> int | None:
                if before_probe is not None:
                    before_probe()
                reply = self.service.post("/decide/shared", shared_body(filler_state(units), decisions))
                if reply.status == 200:
                    return max(reply.body["timing"]["input_tokens"])
                if reply.status == 422:
                    refused.append(reply.describe())
                    return None
                raise ProbeFailed(reply)

            try:
                if state_tokens:
                    floor = measure(0)
                    if floor is None:
                        raise GrowthFailed("the smallest request of this shape is already refused as too long")
                    fits = self.max_tokens() - LIMIT_MARGIN - floor
                    growth = grow(lambda units: None if (tokens := measure(units)) is None else tokens - floor,
                                  min(target, fits), tolerance)
                    growth.floor_tokens = floor
                else:
                    growth = grow(measure, target, tolerance)
            except GrowthFailed as exc:
                raise CheckFailed(f"{exc}: {refused[-1] if refused else ''}") from None
            self._grown[key] = (filler_state(growth.units), growth)
        return self._grown[key]
