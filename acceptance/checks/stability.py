"""Check 3, A-vs-A: the pooled rows twice in one process, then again after each restart, each restart proven to
have brought a new model process (its boot id in /health)."""
from __future__ import annotations

from ..compare import compare_predictions, facts_differences
from ..pass_rules import POOLED, POOLED_RULE
from ..restart import boot_id, prompt_restart, run_restart_command, wait_healthy, wait_new_process
from ..rows import Row, in_suite
from ..scoring import ScoredRun, score_rows
from .common import CheckFailed, Context, Verdict

FACT_KEYS = ("model", "vram_cap_gib", "max_tokens", "max_decisions", "max_questions_per_call", "chunking")
PROCESS_KEYS = ("boot_id", "started_at")  # name the process, so they change with it


def model_facts(health: dict) -> dict:
    facts = {key: health.get(key) for key in FACT_KEYS}
    if isinstance(facts["model"], dict):
        facts["model"] = {key: value for key, value in facts["model"].items() if key not in PROCESS_KEYS}
    return facts


def _flips(comparison: dict) -> dict:
    return {"rows": comparison["compared"], "label_flips": comparison["tops_differ"],
            "flipped_ids": comparison["differing_ids"], "max_probability_diff": comparison["max_probability_gap"],
            "max_diff_at": comparison["max_gap_at"]}


def _restart(ctx: Context) -> dict | None:
    if ctx.options.restart_command:
        return run_restart_command(ctx.options.restart_command, ctx.options.restart_timeout)
    if ctx.options.restart_prompt:
        return prompt_restart()
    return None


def one_restart(ctx: Context, rows: list[Row], first: ScoredRun, known: set[str], facts_before: dict,
                verdict: Verdict) -> dict:
    """Restart, wait for /health from a new model process, score the rows there and compare with the first run."""
    restarted = _restart(ctx)
    phase: dict = {"restart": restarted}
    if not restarted["ok"]:
        verdict.fail(f"restart failed: {restarted['detail']}")
        return phase
    ctx.service.close()
    timeout = ctx.options.restart_timeout
    if known:
        health, waited, seen = wait_new_process(ctx.service, timeout, known)
    else:
        health, waited = wait_healthy(ctx.service, timeout)
        seen = boot_id(health.body) if health is not None else None
    phase["health_wait_seconds"] = round(waited, 3)
    phase["boot_id"] = seen
    if health is None:
        if seen is not None and seen in known:
            verdict.fail(f"the restart did not change the model process: /health still names boot_id {seen} "
                         f"after {timeout:.0f} s")
        else:
            verdict.fail(f"/health did not answer 200 within {timeout:.0f} s of the restart")
        return phase
    phase["facts_changed"] = facts_differences(facts_before, model_facts(health.body))
    if phase["facts_changed"]:
        verdict.fail(f"/health model facts changed across the restart: {', '.join(phase['facts_changed'])}")
    after = score_rows(ctx.service, rows)
    if after.failures:
        verdict.fail(f"after the restart: {after.failure_reason()}")
        return phase
    served_by = boot_id(ctx.service.health().body)
    phase["boot_id_after_scoring"] = served_by
    if seen is not None and served_by != seen:
        verdict.fail(f"the model process changed while the rows were scored ({seen} before, {served_by} after)")
    phase.update(_flips(compare_predictions(rows, first.predictions, after.predictions)))
    if phase["label_flips"]:
        verdict.fail(f"{phase['label_flips']} label flip(s) across a restart")
    if seen is not None:
        known.add(seen)
    return phase


def run(ctx: Context) -> tuple[str, str | None, dict]:
    rows = in_suite(ctx.rows(), POOLED)
    if not rows:
        raise CheckFailed(f"the rows hold no {POOLED} row")
    first = ctx.first_scoring(rows)
    if first.failures:
        raise CheckFailed(f"first run: {first.failure_reason()}")
    health = ctx.facts()
    facts_before = model_facts(health)
    second = score_rows(ctx.service, rows)
    if second.failures:
        raise CheckFailed(f"second run: {second.failure_reason()}")
    verdict = Verdict()
    numbers: dict = {"rows_file": str(ctx.options.rows), "rows": len(rows), "rows_required": POOLED_RULE.total,
                     "boot_id_before": boot_id(health),
                     "within_process": _flips(compare_predictions(rows, first.predictions, second.predictions))}
    if len(rows) != POOLED_RULE.total:
        verdict.unprove(f"{len(rows)} {POOLED} row(s), not the contract's {POOLED_RULE.total}")
    if numbers["within_process"]["label_flips"]:
        verdict.fail(f"{numbers['within_process']['label_flips']} label flip(s) within one process")

    restarts: list[dict] = []
    known = {numbers["boot_id_before"]} - {None}
    arranged = bool(ctx.options.restart_command or ctx.options.restart_prompt)
    if not arranged:
        verdict.unprove("no restart (--restart-command or --restart-prompt): stability across restarts not shown")
    else:
        if numbers["boot_id_before"] is None:
            verdict.unprove("/health names no model.boot_id: a new model process cannot be proven")
        for _ in range(ctx.options.restarts):
            restarts.append(one_restart(ctx, rows, first, known, facts_before, verdict))
            if verdict.failures:
                break
    numbers["restarts_asked"] = ctx.options.restarts if arranged else 0
    numbers["across_restarts"] = restarts
    compared = [phase for phase in restarts if "label_flips" in phase]
    numbers["across_restarts_total"] = {
        "restarts_scored": len(compared), "model_processes": len(known),
        "label_flips": sum(phase["label_flips"] for phase in compared),
        "max_probability_diff": max((phase["max_probability_diff"] for phase in compared), default=None)}
    return verdict.result(numbers)
