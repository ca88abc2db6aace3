"""Check results and the two report files rendered from them.

A check is pass, fail, inconclusive (it ran, nothing failed, but on data or a setup that cannot decide it: fewer
rows than the contract's set, no restart, too few requests) or not_run. Only pass proves anything.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

PASS, FAIL, INCONCLUSIVE, NOT_RUN = "pass", "fail", "inconclusive", "not_run"
STATUSES = (PASS, FAIL, INCONCLUSIVE, NOT_RUN)
# The exit status: every selected check passed, one failed, or none failed but one did not pass.
EXIT_PASSED, EXIT_FAILED, EXIT_UNPROVEN = 0, 1, 3


@dataclass
class CheckResult:
    number: int
    name: str
    title: str
    status: str
    reason: str | None = None
    numbers: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")
        if self.status != PASS and not self.reason:
            raise ValueError(f"check {self.number} is {self.status} without a reason")

    def as_dict(self) -> dict:
        return {"number": self.number, "name": self.name, "title": self.title, "status": self.status,
                "reason": self.reason, "numbers": self.numbers}


@dataclass
class Report:
    meta: dict
    checks: list[CheckResult]
    selected: tuple[int, ...] | None = None  # None: every check in the report

    def chosen(self) -> list[CheckResult]:
        return [check for check in self.checks if self.selected is None or check.number in self.selected]

    def summary(self) -> dict:
        """Every status counted over the selected checks."""
        return {status: sum(1 for check in self.chosen() if check.status == status) for status in STATUSES}

    def verdict(self) -> str:
        summary = self.summary()
        if summary[FAIL]:
            return "not accepted: a check failed"
        if summary[INCONCLUSIVE] or summary[NOT_RUN]:
            return "not proven: a selected check did not pass"
        return "every selected check passed"

    def as_dict(self) -> dict:
        return {"meta": self.meta, "summary": self.summary(), "verdict": self.verdict(),
                "checks": {str(check.number): check.as_dict() for check in self.checks}}


def exit_code(report: Report) -> int:
    statuses = {check.status for check in report.chosen()}
    if FAIL in statuses:
        return EXIT_FAILED
    return EXIT_PASSED if statuses <= {PASS} else EXIT_UNPROVEN


def _finite(value):
    """JSON without NaN or Infinity: such numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(key): _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def render_json(report: Report) -> str:
    return json.dumps(_finite(report.as_dict()), indent=2, ensure_ascii=False) + "\n"


def _scalar(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)) and all(not isinstance(item, (dict, list)) for item in value):
        return "[" + ", ".join(_scalar(item) for item in value) + "]" if value else "[]"
    return str(value)


def _bullets(numbers: dict, depth: int = 0) -> list[str]:
    lines = []
    indent = "  " * depth
    for key, value in numbers.items():
        if isinstance(value, dict) and value:
            lines.append(f"{indent}- {key}:")
            lines.extend(_bullets(value, depth + 1))
        elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            lines.append(f"{indent}- {key}:")
            for index, item in enumerate(value):
                lines.append(f"{indent}  - [{index}]")
                lines.extend(_bullets(item, depth + 2))
        else:
            lines.append(f"{indent}- {key}: {_scalar(value)}")
    return lines


LATENCY_COLUMNS = (("client_ms", "client"), ("server_total_ms", "server total"),
                   ("server_inference_ms", "server inference"))


def _latency_table(shapes: dict) -> list[str]:
    header = "| shape | endpoint | input tokens | requests | non-200 |"
    rule = "|---|---|---|---|---|"
    for _, label in LATENCY_COLUMNS:
        header += f" {label} p50 / p95 / max ms |"
        rule += "---|"
    lines = [header, rule]
    for name, shape in shapes.items():
        cells = [name, shape.get("path", ""), _scalar(shape.get("input_tokens")), _scalar(shape.get("requests")),
                 _scalar(shape.get("non_200"))]
        for key, _ in LATENCY_COLUMNS:
            summary = shape.get(key)
            cells.append(f"{summary['p50']:.1f} / {summary['p95']:.1f} / {summary['max']:.1f}" if summary else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _escape_cell(text: str | None) -> str:
    return "" if text is None else text.replace("|", "\\|").replace("\n", " ")


def headline(summary: dict) -> str:
    return (f"{summary[PASS]} pass, {summary[FAIL]} fail, {summary[INCONCLUSIVE]} inconclusive, "
            f"{summary[NOT_RUN]} not run")


def render_markdown(report: Report) -> str:
    meta = report.meta
    summary = report.summary()
    lines = ["# Acceptance report", ""]
    lines.extend(f"- {key}: {_scalar(value)}" for key, value in meta.items() if not isinstance(value, dict))
    lines.append("")
    lines.append(f"**{headline(summary)}: {report.verdict()}.**")
    lines.extend(["", "| # | check | status | reason |", "|---|---|---|---|"])
    for check in report.checks:
        lines.append(f"| {check.number} | {check.title} | {check.status.upper()} | {_escape_cell(check.reason)} |")
    for key, value in meta.items():
        if isinstance(value, dict):
            lines.extend(["", f"## {key}", "", *_bullets(value)])
    for check in report.checks:
        lines.extend(["", f"## {check.number}. {check.title}: {check.status.upper()}", ""])
        if check.reason:
            lines.extend([f"Reason: {check.reason}", ""])
        numbers = dict(check.numbers)
        shapes = numbers.pop("shapes", None)
        if isinstance(shapes, dict) and shapes:
            lines.extend(_latency_table(shapes))
            lines.append("")
        if numbers:
            lines.extend([*_bullets(numbers), ""])
    return "\n".join(lines).rstrip() + "\n"
