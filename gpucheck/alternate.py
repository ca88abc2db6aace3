"""Two things timed round by round in the same conditions: the order flips every round (A B, B A, A B, ...), so that
a drift of the machine (clocks, caches, another process) falls on both sides alike instead of on whichever ran
second."""
from __future__ import annotations

import time
from typing import Callable


def alternate(first: Callable[[], float], second: Callable[[], float], rounds: int, seconds: float,
              clock: Callable[[], float] = time.monotonic) -> tuple[list[float], list[float]]:
    """(first's milliseconds, second's) over up to `rounds` rounds each; at least one round each, and no new round
    once `seconds` have passed. Each callable runs one round and returns its milliseconds."""
    stop = clock() + seconds
    timed: tuple[list[float], list[float]] = ([], [])
    sides = (first, second)
    while len(timed[0]) < rounds and (not timed[0] or clock() < stop):
        order = (0, 1) if len(timed[0]) % 2 == 0 else (1, 0)
        for side in order:
            timed[side].append(sides[side]())
    return timed
