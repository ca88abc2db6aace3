"""How long each step of the check may take, and which steps give way when time runs short.

Each step has two figures per mode, in seconds:

* **expected**: its time where the mode runs (on the GPU machine: estimated from the rehearsal and the card; see
  docs/gpu-check.md). Before a step starts, the expected time of every later step that is worth more is kept back
  for it.
* **rehearsed**: its time measured by the rehearsal on a 2-core machine of our kind with its cores shared, the
  slowest machine the check has been seen on.

A step's **limit**, which catches a hung step, is SAFETY times the larger of the two. A step may run up to its limit,
cut to what the deadline leaves once the later, more valuable steps' expected times are kept back: time an earlier
step did not use carries forward, a slow but healthy step is not cut at its expected time, and as the deadline nears
the least valuable steps give way first (an essential one `not_run`, an optional one `skipped`), never the served
stack for a comparison. tests/unit/test_gpucheck_budgets.py holds the arithmetic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

SAFETY = 2.5
MIN_LIMIT = 5


@dataclass(frozen=True)
class Timing:
    expected: float
    rehearsed: float

    @property
    def limit(self) -> int:
        return max(MIN_LIMIT, math.ceil(SAFETY * max(self.expected, self.rehearsed)))


TIMINGS = {
    "gpu": {
        # the first import of a CUDA torch and the first CUDA initialisation of a fresh machine
        "environment": Timing(expected=20, rehearsed=10),
        "install": Timing(expected=30, rehearsed=50),
        "stub": Timing(expected=2, rehearsed=1),
        # 9 shards of 1 GiB in parallel on 16 cores, then the revision hash over 9.1 GB
        "checkpoint": Timing(expected=45, rehearsed=12),
        "shapes": Timing(expected=10, rehearsed=13),
        # what is left of fla's compiles and autotuning after they ran beside the checkpoint's build
        "kernel_warmup": Timing(expected=40, rehearsed=5),
        "inprocess": Timing(expected=60, rehearsed=65),
        "server": Timing(expected=60, rehearsed=17),
        "service": Timing(expected=20, rehearsed=37),
        "acceptance": Timing(expected=60, rehearsed=130),
        # a second server, started under the test cap, and check 6
        "overcap": Timing(expected=75, rehearsed=2),
        "inprocess_torch": Timing(expected=45, rehearsed=2),
        "inprocess_mixed": Timing(expected=45, rehearsed=2),
        # imports, loading 9 GB, the warm-ups from a warm kernel cache, 3 modes' captures and rounds
        "graphs": Timing(expected=70, rehearsed=2),
        "inprocess_shared": Timing(expected=45, rehearsed=40),
    },
    # the tiny fixture on the development environment (CI's machines: 2 cores, shared with the test run)
    "cpu": {
        "environment": Timing(expected=6, rehearsed=8),
        "install": Timing(expected=0, rehearsed=0),
        "stub": Timing(expected=1, rehearsed=1),
        "checkpoint": Timing(expected=10, rehearsed=20),
        "shapes": Timing(expected=8, rehearsed=15),
        "kernel_warmup": Timing(expected=0, rehearsed=0),
        "inprocess": Timing(expected=14, rehearsed=20),
        "server": Timing(expected=12, rehearsed=16),
        "service": Timing(expected=10, rehearsed=12),
        "acceptance": Timing(expected=30, rehearsed=55),
        "overcap": Timing(expected=0, rehearsed=0),
        "inprocess_torch": Timing(expected=0, rehearsed=12),
        "inprocess_mixed": Timing(expected=0, rehearsed=0),
        "graphs": Timing(expected=0, rehearsed=0),
        "inprocess_shared": Timing(expected=0, rehearsed=0),
    },
}

# Most valuable first: what the service needs, then the served stack and its evidence, then the in-process baseline,
# then what only refines the figures.
VALUE = ("environment", "install", "stub", "checkpoint", "shapes", "server", "acceptance", "service", "inprocess",
         "kernel_warmup", "graphs", "inprocess_shared", "overcap", "inprocess_mixed", "inprocess_torch")


# A step that holds back a later step's whole limit, not only its expected time: the kernel warm-up may use its
# window to the end, and the in-process run after it must still get all it may need (a slow warm-up followed by a
# slow in-process run squeezes nothing essential).
HOLDS_WHOLE_LIMIT = {"kernel_warmup": ("inprocess",)}


def kept_back(mode: str, step: str, later: list[str]) -> float:
    """The seconds kept for the later steps worth more than this one: their expected times, or their whole limits
    where HOLDS_WHOLE_LIMIT says so."""
    rank = VALUE.index(step)
    whole = HOLDS_WHOLE_LIMIT.get(step, ())
    return sum(TIMINGS[mode][name].limit if name in whole else TIMINGS[mode][name].expected
               for name in later if VALUE.index(name) < rank)


def need_of(mode: str, step: str) -> float:
    """What a step has been seen to need: the larger of its expected and rehearsed times."""
    timing = TIMINGS[mode][step]
    return max(timing.expected, timing.rehearsed)


def allowance(mode: str, step: str, remaining: float, later: list[str]) -> float:
    """Seconds this step may use now: its limit, cut to the time left less what later, worthier steps expect."""
    return min(TIMINGS[mode][step].limit, remaining - kept_back(mode, step, later))
