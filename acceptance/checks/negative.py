"""Check 2, negative control: the rows again with each description moved to the next option id."""
from __future__ import annotations

from ..compare import negative_control
from ..report import FAIL, PASS
from ..rows import rotate_descriptions
from ..scoring import score_rows
from .common import CheckFailed, Context


def run(ctx: Context) -> tuple[str, str | None, dict]:
    rows = ctx.rows()
    original = ctx.baseline()
    if original.failures:
        raise CheckFailed(f"original rows: {original.failure_reason()}")
    rotated = score_rows(ctx.service, [rotate_descriptions(row) for row in rows])
    numbers = {"rows_file": str(ctx.options.rows), **negative_control(rows, original.predictions, rotated.predictions),
               "min_follow": ctx.options.min_follow, "max_stay": ctx.options.max_stay}
    if rotated.failures:
        raise CheckFailed(f"rotated rows: {rotated.failure_reason()}", numbers)
    reasons = []
    if numbers["follow_rate"] < ctx.options.min_follow:
        reasons.append(f"follow share {numbers['follow_rate']:.4f} is below {ctx.options.min_follow}")
    if numbers["stay_rate"] > ctx.options.max_stay:
        reasons.append(f"stay share {numbers['stay_rate']:.4f} is above {ctx.options.max_stay}")
    return (FAIL, "; ".join(reasons), numbers) if reasons else (PASS, None, numbers)
