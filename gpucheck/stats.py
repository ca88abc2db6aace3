"""Summary statistics of timings, in milliseconds."""
from __future__ import annotations

import statistics

from acceptance.stats import percentile


def summary(milliseconds: list) -> dict:
    """count, mean, p50, p95, min and max, rounded to 0.01 ms; an empty list gives count 0 only."""
    if not milliseconds:
        return {"count": 0}
    return {
        "count": len(milliseconds),
        "mean": round(statistics.fmean(milliseconds), 2),
        "p50": round(percentile(milliseconds, 50), 2),
        "p95": round(percentile(milliseconds, 95), 2),
        "min": round(min(milliseconds), 2),
        "max": round(max(milliseconds), 2),
    }
