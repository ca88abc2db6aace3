"""Triton's liveness, up, busy or down: a ping timed out behind a long request is told from a hung model by the
calls counter (docs/operations.md, "When the model process dies"); standard library only."""
from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass
from typing import Callable

from wire import ping as wire_ping

CALLS_METRIC = "intern_decision_calls_total"
UP, BUSY, DOWN = "up", "busy", "down"
METRICS_TIMEOUT_SECONDS = 4.0
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(?P<name>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Verdict:
    state: str
    detail: str | None = None
    hung: bool = False  # the ping timed out and no call ended meanwhile

    @property
    def alive(self) -> bool:
        return self.state != DOWN


def finished_calls(metrics_text: str, model: str) -> float | None:
    total = None
    for line in metrics_text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match["name"] != CALLS_METRIC:
            continue
        labels = {label["name"]: label["value"] for label in _LABEL.finditer(match["labels"] or "")}
        if labels.get("model") != model:
            continue
        try:
            total = (total or 0.0) + float(match["value"])
        except ValueError:
            continue
    return total


def judge(problem: str | None, timed_out: bool, calls_before: float | None, calls_after: float | None) -> Verdict:
    if problem is None:
        return Verdict(UP)
    if not timed_out:
        return Verdict(DOWN, problem)
    if calls_before is not None and calls_after is not None and calls_after > calls_before:
        return Verdict(BUSY, f"{problem}; {calls_after - calls_before:g} call(s) ended meanwhile")
    if calls_before is None or calls_after is None:
        return Verdict(DOWN, f"{problem}; the model's call count could not be read", hung=True)
    return Verdict(DOWN, f"{problem}; no call ended meanwhile", hung=True)


def check(attempt: Callable[[], tuple[str | None, bool]], read_calls: Callable[[], float | None]) -> Verdict:
    before = read_calls()
    problem, timed_out = attempt()
    return judge(problem, timed_out, before, read_calls() if timed_out else None)


def read_finished_calls(metrics_url: str, model: str, timeout: float = METRICS_TIMEOUT_SECONDS) -> float | None:
    try:
        with urllib.request.urlopen(metrics_url, timeout=timeout) as response:  # noqa: S310 - the operator's URL
            return finished_calls(response.read().decode("utf-8", "replace"), model)
    except (OSError, ValueError):
        return None


def liveness(address: str, metrics_url: str, model: str, api_key: str, timeout: float) -> Verdict:
    return check(lambda: wire_ping.attempt(address, model, api_key, timeout),
                 lambda: read_finished_calls(metrics_url, model))
