"""What every check shares: the options, the service, /health as first read, and results computed once."""
from __future__ import annotations

import json
from pathlib import Path

from ..client import Reply, Service, fetch_text
from ..metrics import memory_bytes, parse_samples
from ..options import Options
from ..rows import DataError, Prediction, Row, parse_reference, parse_rows, read_lines
from ..scoring import ScoredRun, score_rows
from ..shapes import Growth, GrowthFailed, filler_state, grow, shared_body


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


class Context:
    def __init__(self, options: Options, service: Service):
        self.options = options
        self.service = service
        self.health: Reply = service.health()
        self._rows: list[Row] | None = None
        self._baseline: ScoredRun | None = None
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

    def baseline(self) -> ScoredRun:
        """The rows scored once as given; checks 1, 2 and 3 all start from this run."""
        if self._baseline is None:
            self._baseline = score_rows(self.service, self.rows())
        return self._baseline

    # metrics

    def memory(self) -> dict[str, float]:
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

    def grown_state(self, decisions: list[dict], target: int, tolerance: int, before_probe=None) -> tuple[str, Growth]:
        """A filler state that brings a /decide/shared call of these decisions to about target input tokens.

        Cached per (questions, target), so later checks reuse what an earlier one grew.
        """
        key = (json.dumps(decisions, sort_keys=True), target, tolerance)
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
                growth = grow(measure, target, tolerance)
            except GrowthFailed as exc:
                raise CheckFailed(f"{exc}: {refused[-1] if refused else ''}") from None
            self._grown[key] = (filler_state(growth.units), growth)
        return self._grown[key]
