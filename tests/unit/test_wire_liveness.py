"""Triton's liveness verdict (wire/liveness.py): a ping that times out while the model's calls keep ending is busy,
one that times out while none ends is a hung model, an error answer is down; the call count read from metrics text."""
from __future__ import annotations

import pytest

from wire.liveness import BUSY, DOWN, UP, Verdict, check, finished_calls, judge

METRICS = """\
# HELP intern_decision_calls_total Calls by outcome
# TYPE intern_decision_calls_total counter
intern_decision_calls_total{model="intern_decision",outcome="ok"} 40
intern_decision_calls_total{model="intern_decision",outcome="invalid"} 2
intern_decision_calls_total{outcome="failed",model="intern_decision"} 1
intern_decision_calls_total{model="other",outcome="ok"} 900
intern_decision_calls_total_created{model="intern_decision",outcome="ok"} 1700000000
nv_inference_count{model="intern_decision",version="1"} 12
"""


def test_the_count_sums_every_outcome_of_the_model_alone():
    assert finished_calls(METRICS, "intern_decision") == 43.0
    assert finished_calls(METRICS, "other") == 900.0
    assert finished_calls(METRICS, "absent") is None
    assert finished_calls("nv_inference_count 3\n", "intern_decision") is None
    assert finished_calls('intern_decision_calls_total{model="intern_decision",outcome="ok"} 0\n',
                          "intern_decision") == 0.0


@pytest.mark.parametrize("problem, timed_out, before, after, expected", [
    (None, False, 5, None, Verdict(UP)),
    ("Triton answered 500: Stub process is not healthy.", False, 5, 5,
     Verdict(DOWN, "Triton answered 500: Stub process is not healthy.")),
    ("Triton did not answer: ConnectionRefusedError", False, None, None,
     Verdict(DOWN, "Triton did not answer: ConnectionRefusedError")),
    ("timed out", True, 5, 7, Verdict(BUSY, "timed out; 2 call(s) ended meanwhile")),
    ("timed out", True, 5, 5, Verdict(DOWN, "timed out; no call ended meanwhile", hung=True)),
    ("timed out", True, None, 7, Verdict(DOWN, "timed out; the model's call count could not be read", hung=True)),
    ("timed out", True, 5, None, Verdict(DOWN, "timed out; the model's call count could not be read", hung=True)),
])
def test_the_verdict(problem, timed_out, before, after, expected):
    assert judge(problem, timed_out, before, after) == expected
    assert expected.alive is (expected.state != DOWN)


class Model:
    """A fake model: calls end while a ping waits (or not); the ping answers or waits out its timeout."""

    def __init__(self, answers: bool, calls_ending_per_ping: int, error: str | None = None):
        self.count = 10
        self.events: list[str] = []
        self._answers, self._ending, self._error = answers, calls_ending_per_ping, error

    def read_calls(self) -> float:
        self.events.append(f"read {self.count}")
        return float(self.count)

    def attempt(self) -> tuple[str | None, bool]:
        self.events.append("ping")
        self.count += self._ending  # calls of the inference in progress end while the ping waits behind it
        if self._error is not None:
            return self._error, False
        return (None, False) if self._answers else ("timed out", True)


def test_the_count_is_read_before_the_ping_and_after_it_timed_out():
    busy = Model(answers=False, calls_ending_per_ping=3)
    assert check(busy.attempt, busy.read_calls).state == BUSY
    assert busy.events == ["read 10", "ping", "read 13"]
    hung = Model(answers=False, calls_ending_per_ping=0)
    verdict = check(hung.attempt, hung.read_calls)
    assert (verdict.state, verdict.hung) == (DOWN, True)
    assert hung.events == ["read 10", "ping", "read 10"]


def test_an_answered_ping_or_an_error_needs_no_second_read():
    up = Model(answers=True, calls_ending_per_ping=2)
    assert check(up.attempt, up.read_calls) == Verdict(UP)
    assert up.events == ["read 10", "ping"]
    dead = Model(answers=False, calls_ending_per_ping=2, error="Triton answered 500: Stub process is not healthy.")
    assert check(dead.attempt, dead.read_calls).state == DOWN  # an error is down, whatever the count did
    assert dead.events == ["read 10", "ping"]
