"""Latency summaries, and the project's one percentile: the acceptance kit, the benchmarks (bench/) and the GPU
check (gpucheck/) all take theirs from here (standard library only, so each can)."""
from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between the two nearest ranks (numpy's default method). No values is
    a ValueError: a summary of nothing says so itself (summarize_ms: None) rather than carry a number."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def summarize_ms(seconds: Sequence[float]) -> dict | None:
    """n, p50, p95 and max of durations given in seconds, reported in milliseconds."""
    if not seconds:
        return None
    return {
        "n": len(seconds),
        "p50": round(percentile(seconds, 50) * 1000, 3),
        "p95": round(percentile(seconds, 95) * 1000, 3),
        "max": round(max(seconds) * 1000, 3),
    }
