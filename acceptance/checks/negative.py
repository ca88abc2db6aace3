"""Check 2, negative control: the bench's 144 rows again with each description moved to the next option id."""
from __future__ import annotations

from ..compare import negative_control
from ..pass_rules import NEGATIVE, NEGATIVE_RULE
from ..rows import in_suite, rotate_descriptions
from ..scoring import score_rows
from .common import CheckFailed, Context, Verdict


def run(ctx: Context) -> tuple[str, str | None, dict]:
    rule = NEGATIVE_RULE
    rows = in_suite(ctx.rows(), NEGATIVE)
    if not rows:
        raise CheckFailed(f"the rows hold no {NEGATIVE} row")
    original = ctx.first_scoring(rows)
    if original.failures:
        raise CheckFailed(f"original rows: {original.failure_reason()}")
    rotated = score_rows(ctx.service, [rotate_descriptions(row) for row in rows])
    numbers = {"rows_file": str(ctx.options.rows), **negative_control(rows, original.predictions, rotated.predictions),
               "rule": rule.describe(), **rule.as_numbers()}
    if rotated.failures:
        raise CheckFailed(f"rotated rows: {rotated.failure_reason()}", numbers)
    verdict = Verdict()
    if len(rows) != rule.total:
        verdict.unprove(f"{len(rows)} {NEGATIVE} row(s), not the contract's {rule.total}: shares not judged")
    else:
        if numbers["follow"] < rule.least_follow:
            verdict.fail(f"{numbers['follow']}/{rule.total} follow the moved description, fewer than "
                         f"{rule.least_follow}")
        if numbers["stay"] > rule.most_stay:
            verdict.fail(f"{numbers['stay']}/{rule.total} keep their top, more than {rule.most_stay}")
    return verdict.result(numbers)
