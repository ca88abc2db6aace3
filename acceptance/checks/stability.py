"""Check 3, A-vs-A: the rows scored twice in one process, then again after a restart when one is arranged."""
from __future__ import annotations

from ..compare import compare_predictions, facts_differences
from ..report import FAIL, NOT_RUN, PASS
from ..restart import prompt_restart, run_restart_command, wait_healthy
from ..scoring import score_rows
from .common import CheckFailed, Context

FACT_KEYS = ("model", "vram_cap_gib", "max_tokens", "max_decisions", "max_questions_per_call", "chunking")


def model_facts(health: dict) -> dict:
    return {key: health.get(key) for key in FACT_KEYS}


def _flips(comparison: dict) -> dict:
    return {"rows": comparison["compared"], "label_flips": comparison["tops_differ"],
            "flipped_ids": comparison["differing_ids"], "max_probability_diff": comparison["max_probability_gap"],
            "max_diff_at": comparison["max_gap_at"]}


def restart_phase(ctx: Context, facts_before: dict) -> dict:
    options = ctx.options
    if options.restart_command:
        restarted = run_restart_command(options.restart_command, options.restart_timeout)
    elif options.restart_prompt:
        restarted = prompt_restart()
    else:
        return {"status": NOT_RUN, "reason": "no --restart-command or --restart-prompt given"}
    phase: dict = {"restart": restarted}
    if not restarted["ok"]:
        return {"status": FAIL, "reason": f"restart failed: {restarted['detail']}", **phase}
    ctx.service.close()
    health, waited = wait_healthy(ctx.service, options.restart_timeout)
    phase["health_wait_seconds"] = round(waited, 3)
    if health is None:
        return {"status": FAIL, "reason": f"/health did not answer 200 within {options.restart_timeout:.0f} s", **phase}
    changed = facts_differences(facts_before, model_facts(health.body))
    phase["facts_changed"] = changed
    after = score_rows(ctx.service, ctx.rows())
    if after.failures:
        return {"status": FAIL, "reason": f"after the restart: {after.failure_reason()}", **phase}
    phase.update(_flips(compare_predictions(ctx.rows(), ctx.baseline().predictions, after.predictions)))
    reasons = []
    if changed:
        reasons.append(f"/health model facts changed: {', '.join(changed)}")
    if phase["label_flips"]:
        reasons.append(f"{phase['label_flips']} label flip(s) across the restart")
    return {"status": FAIL if reasons else PASS, "reason": "; ".join(reasons) or None, **phase}


def run(ctx: Context) -> tuple[str, str | None, dict]:
    rows = ctx.rows()
    first = ctx.baseline()
    if first.failures:
        raise CheckFailed(f"first run: {first.failure_reason()}")
    facts_before = model_facts(ctx.facts())
    second = score_rows(ctx.service, rows)
    if second.failures:
        raise CheckFailed(f"second run: {second.failure_reason()}")
    numbers: dict = {"rows_file": str(ctx.options.rows), "within_process": _flips(
        compare_predictions(rows, first.predictions, second.predictions))}
    numbers["across_restart"] = restart_phase(ctx, facts_before)
    reasons = []
    if numbers["within_process"]["label_flips"]:
        reasons.append(f"{numbers['within_process']['label_flips']} label flip(s) within one process")
    if numbers["across_restart"]["status"] == FAIL:
        reasons.append(f"across the restart: {numbers['across_restart']['reason']}")
    return (FAIL, "; ".join(reasons), numbers) if reasons else (PASS, None, numbers)
