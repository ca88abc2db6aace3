"""Check results and the two report files rendered from them."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

PASS, FAIL, NOT_RUN = "pass", "fail", "not_run"
STATUSES = (PASS, FAIL, NOT_RUN)


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

    def summary(self) -> dict:
        return {status: sum(1 for check in self.checks if check.status == status) for status in STATUSES}

    def as_dict(self) -> dict:
        return {"meta": self.meta, "summary": self.summary(),
                "checks": {str(check.number): check.as_dict() for check in self.checks}}


def exit_code(report: Report) -> int:
    return 1 if any(check.status == FAIL for check in report.checks) else 0


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


def render_markdown(report: Report) -> str:
    meta = report.meta
    summary = report.summary()
    lines = ["# Acceptance report", ""]
    lines.extend(f"- {key}: {_scalar(value)}" for key, value in meta.items() if not isinstance(value, dict))
    lines.append("")
    lines.append(f"**{summary[PASS]} pass, {summary[FAIL]} fail, {summary[NOT_RUN]} not run.**")
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
