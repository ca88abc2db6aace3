"""The contract's bench figures and the pass rules derived from them (pure; every check states its rule from here).

The contract: positive control 240/259 on the pooled rows and 79/84 on Wyrd, "the pooled set resolves ±4 pts",
"0 labels moved across 4 restarts"; negative control 122/144 follow the moved description, 10/144 keep their top.

The ±4 points on the pooled set are about 2.47 binomial standard errors of 240/259 over 259 rows. Wyrd has no
resolution of its own in the contract: it gets the same number of standard errors of 79/84 over its 84 rows (about
±6.4 points). A set a third the size resolves about √3 times more coarsely; holding it to ±4 points would fail
the bench's own model on sampling noise. The negative control's 144 rows take the contract's floor as stated,
4 points (5.76 rows). Accuracy windows are two-sided: far better than the bench on the bench's rows is not the
bench's model either.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

POOLED, WYRD, NEGATIVE = "pooled", "wyrd", "negative"
SUITES = (POOLED, WYRD, NEGATIVE)
POOLED_RESOLUTION = 0.04  # the contract: the pooled set resolves ±4 points
MAX_TOPS_MOVED = 0


def standard_error(correct: int, total: int) -> float:
    p = correct / total
    return math.sqrt(p * (1 - p) / total)


@dataclass(frozen=True)
class AccuracyRule:
    """Accuracy within ±resolution of the bench's correct/total, on exactly `total` rows."""
    suite: str
    correct: int
    total: int
    resolution: float
    derivation: str

    @property
    def lowest(self) -> int:
        """The fewest correct rows inside the window (a count, so the window's edge rounds inward)."""
        return max(0, math.ceil((self.correct / self.total - self.resolution) * self.total - 1e-9))

    @property
    def highest(self) -> int:
        return min(self.total, math.floor((self.correct / self.total + self.resolution) * self.total + 1e-9))

    def holds(self, correct: int) -> bool:
        return self.lowest <= correct <= self.highest

    def describe(self) -> str:
        return (f"{self.suite}: {self.lowest}..{self.highest} of {self.total} correct "
                f"(bench {self.correct}/{self.total} ± {self.resolution * 100:.1f} points; {self.derivation})")

    def as_numbers(self) -> dict:
        return {"bench": f"{self.correct}/{self.total}", "rows_required": self.total,
                "resolution_points": round(self.resolution * 100, 2), "correct_window": [self.lowest, self.highest],
                "derivation": self.derivation}


POOLED_RULE = AccuracyRule(POOLED, 240, 259, POOLED_RESOLUTION, "the contract's resolution of the pooled set")
_STANDARD_ERRORS = POOLED_RESOLUTION / standard_error(240, 259)  # about 2.47
WYRD_RULE = AccuracyRule(
    WYRD, 79, 84, round(_STANDARD_ERRORS * standard_error(79, 84), 4),
    f"the pooled set's ±4 points are {_STANDARD_ERRORS:.2f} binomial standard errors; Wyrd gets as many of its own")


@dataclass(frozen=True)
class NegativeRule:
    """Tops that follow the moved description at least bench − floor; tops that stay at most bench + floor."""
    total: int = 144
    follow: int = 122
    stay: int = 10
    floor: float = POOLED_RESOLUTION

    @property
    def floor_rows(self) -> float:
        return round(self.floor * self.total, 2)

    @property
    def least_follow(self) -> int:
        return math.ceil(self.follow - self.floor * self.total - 1e-9)

    @property
    def most_stay(self) -> int:
        return math.floor(self.stay + self.floor * self.total + 1e-9)

    def describe(self) -> str:
        return (f"at least {self.least_follow}/{self.total} follow and at most {self.most_stay}/{self.total} stay "
                f"(bench {self.follow}/{self.total} and {self.stay}/{self.total}, floor {self.floor * 100:g} points "
                f"= {self.floor_rows} rows)")

    def as_numbers(self) -> dict:
        return {"rows_required": self.total, "bench_follow": f"{self.follow}/{self.total}",
                "bench_stay": f"{self.stay}/{self.total}", "floor_points": self.floor * 100,
                "floor_rows": self.floor_rows, "least_follow": self.least_follow, "most_stay": self.most_stay}


NEGATIVE_RULE = NegativeRule()
REQUIRED_ROWS = {POOLED: POOLED_RULE.total, WYRD: WYRD_RULE.total, NEGATIVE: NEGATIVE_RULE.total}
