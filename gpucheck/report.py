"""The check's own report: one entry per step, rewritten after every step so that a crash leaves what was done."""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

PASS, FAIL, SKIPPED, NOT_RUN, INCONCLUSIVE = "pass", "fail", "skipped", "not_run", "inconclusive"
# An optional step that saw the service do wrong on its first look at a card: reported with everything it saw, and
# the run's result is not decided by it (gpucheck.check.outcome_of_error).
FINDING = "finding"
STATUSES = (PASS, FAIL, SKIPPED, NOT_RUN, INCONCLUSIVE, FINDING)

# The reference to beat: Intern-Decision-4B's own latency table, and a peer's H200 figure.
REFERENCE = {
    "anchor": "289-token state, 3 questions",
    "rtx4090_mean_ms": 44.16,
    "rtx4090_note": "mean on an RTX 4090, BF16, SDPA, native HF, with flash-linear-attention (p50 44.03, p95 44.60)",
    "h200_cuda_graphs_ms": 26.0,
    "h200_note": "a peer 4B decision model on an H200 with CUDA graphs (90.3 ms without them)",
}


@dataclass
class Step:
    name: str
    title: str
    status: str = NOT_RUN
    seconds: float | None = None
    detail: str = ""
    data: dict = field(default_factory=dict)
    essential: bool = True  # False: its inconclusive outcome does not decide the run (gpucheck.check.StepSpec)


class Report:
    def __init__(self, out: Path, mode: str, deadline_seconds: float, steps: list):
        self.out = out
        self.mode = mode
        self.deadline_seconds = deadline_seconds
        self.started = time.time()
        self.finished: float | None = None
        self.steps = {step.name: step for step in steps}
        self.facts: dict = {}

    def step(self, name: str) -> Step:
        return self.steps[name]

    def passed(self, name: str) -> bool:
        return self.steps[name].status == PASS

    @property
    def result(self) -> str:
        """fail when a step failed or an essential one did not run; else inconclusive when an essential step
        measured what cannot decide it; else pass. An optional step's inconclusive outcome (check 6 on a card where
        no cap separates) stays in its entry and does not decide the run: it says what the card allows, not whether
        the service works."""
        statuses = {step.status for step in self.steps.values()}
        if statuses & {FAIL, NOT_RUN}:
            return FAIL
        undecided = any(step.status == INCONCLUSIVE and step.essential for step in self.steps.values())
        return INCONCLUSIVE if undecided else PASS

    @property
    def findings(self) -> list[str]:
        """The optional steps that ended with a finding: the run's result stands, and its headline names them."""
        return [step.name for step in self.steps.values() if step.status == FINDING]

    @property
    def headline(self) -> str:
        """The result as the summary line and report.md's title say it: "PASS, with findings: overcap"."""
        return self.result.upper() + (f", with findings: {', '.join(self.findings)}" if self.findings else "")

    def as_dict(self) -> dict:
        return {
            "mode": self.mode,
            "result": self.result,
            "headline": self.headline,
            "findings": self.findings,
            "started": _iso(self.started),
            "finished": _iso(self.finished) if self.finished else None,
            "wall_seconds": round((self.finished or time.time()) - self.started, 1),
            "deadline_seconds": self.deadline_seconds,
            "facts": self.facts,
            "reference": REFERENCE,
            "steps": [asdict(step) for step in self.steps.values()],
        }

    def write(self) -> None:
        from gpucheck.summary import render_markdown

        data = self.as_dict()
        self.out.mkdir(parents=True, exist_ok=True)
        _write(self.out / "report.json", json.dumps(data, indent=2, default=str) + "\n")
        _write(self.out / "report.md", render_markdown(data))


def _iso(stamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
