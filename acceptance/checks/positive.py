"""Check 1, positive control: the bench's pooled and Wyrd rows through /decide, single ordering, against the bench's
numbers (acceptance/pass_rules.py) and, row by row, against the bench's own predictions."""
from __future__ import annotations

from ..compare import accuracy, compare_predictions
from ..pass_rules import MAX_TOPS_MOVED, POOLED, POOLED_RULE, WYRD, WYRD_RULE, AccuracyRule
from ..rows import Row, in_suite
from .common import CheckFailed, Context, Verdict


def judge_accuracy(verdict: Verdict, rule: AccuracyRule, rows: list[Row], counts: dict) -> dict:
    overall = counts["overall"]
    numbers = {"rows": len(rows), **counts, "rule": rule.describe(), **rule.as_numbers()}
    if len(rows) != rule.total:
        verdict.unprove(f"{len(rows)} {rule.suite} row(s), not the contract's {rule.total}: accuracy not judged")
    elif not rule.holds(overall["correct"]):
        verdict.fail(f"{rule.suite} {overall['correct']}/{rule.total} correct, outside "
                     f"{rule.lowest}..{rule.highest} (bench {rule.correct}/{rule.total})")
    return numbers


def run(ctx: Context) -> tuple[str, str | None, dict]:
    rows = ctx.rows()
    suites = {POOLED: in_suite(rows, POOLED), WYRD: in_suite(rows, WYRD)}
    asked = [row for row in rows if row.suites & set(suites)]
    scored = ctx.first_scoring(asked)
    numbers: dict = {"rows_file": str(ctx.options.rows), "scored": len(scored.predictions)}
    if scored.failures:
        raise CheckFailed(scored.failure_reason(), numbers)
    verdict = Verdict()
    for suite, rule in ((POOLED, POOLED_RULE), (WYRD, WYRD_RULE)):
        numbers[suite] = judge_accuracy(verdict, rule, suites[suite], accuracy(suites[suite], scored.predictions))

    reference = ctx.reference()
    if reference is None:
        numbers["row_by_row"] = None
        verdict.unprove("no --reference: the row-by-row comparison with the bench's own predictions did not run")
    else:
        comparison = compare_predictions(asked, reference, scored.predictions)
        numbers["row_by_row"] = {"reference_file": str(ctx.options.reference), **comparison,
                                 "max_tops_that_differ": MAX_TOPS_MOVED,
                                 "rule": "no top differs from the bench's (the bench moved 0 labels across 4 "
                                         "restarts); the largest probability gap is reported"}
        if comparison["missing_ids"]:
            verdict.unprove(f"{len(comparison['missing_ids'])} row(s) have no reference prediction")
        if comparison["tops_differ"] > MAX_TOPS_MOVED:
            verdict.fail(f"{comparison['tops_differ']} top(s) differ from the bench's predictions")
    return verdict.result(numbers)
