"""Check 1, positive control: the labelled rows through /decide, single ordering."""
from __future__ import annotations

from ..compare import accuracy, compare_predictions
from ..report import FAIL, PASS
from .common import CheckFailed, Context


def run(ctx: Context) -> tuple[str, str | None, dict]:
    rows = ctx.rows()
    reference = ctx.reference()
    scored = ctx.baseline()
    counts = accuracy(rows, scored.predictions)
    numbers: dict = {"rows_file": str(ctx.options.rows), "rows": len(rows), "scored": len(scored.predictions),
                     "min_accuracy": ctx.options.min_accuracy, **counts}
    if scored.failures:
        raise CheckFailed(scored.failure_reason(), numbers)
    reasons = []
    overall = counts["overall"]["accuracy"]
    if overall < ctx.options.min_accuracy:
        reasons.append(f"accuracy {overall:.4f} is below {ctx.options.min_accuracy}")
    if reference is not None:
        numbers["reference_file"] = str(ctx.options.reference)
        numbers["max_top_diffs"] = ctx.options.max_top_diffs
        numbers["reference"] = compare_predictions(rows, reference, scored.predictions)
        differing = numbers["reference"]["tops_differ"]
        if differing > ctx.options.max_top_diffs:
            reasons.append(f"{differing} top(s) differ from the reference (allowed {ctx.options.max_top_diffs})")
    else:
        numbers["reference"] = None
    return (FAIL, "; ".join(reasons), numbers) if reasons else (PASS, None, numbers)
