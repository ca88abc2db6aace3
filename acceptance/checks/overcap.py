"""Check 6, over the cap: 503 out_of_memory, memory back to its baseline, and the service still answers."""
from __future__ import annotations

import time

from ..memory import MIB, gib
from ..report import FAIL, PASS
from ..shapes import binary_criteria, path_for, plain_body, shared_body
from .common import LIMIT_MARGIN, CheckFailed, Context, NotRun, ProbeFailed

SETTLE_SECONDS = 10.0


def reserved_now(ctx: Context) -> float:
    memory = ctx.memory()
    if "reserved" not in memory:
        raise CheckFailed("the metrics do not report reserved memory")
    return memory["reserved"]


def send_default(ctx: Context, numbers: dict):
    """16 questions over a state that fills max_tokens; a growth probe that already runs out of memory counts."""
    baseline: list[float] = []

    def before_probe() -> None:
        baseline.append(reserved_now(ctx))

    criteria16 = binary_criteria(16)
    try:
        state, growth = ctx.grown_state(criteria16, ctx.max_tokens() - LIMIT_MARGIN, tolerance=64,
                                        before_probe=before_probe)
    except ProbeFailed as exc:
        numbers["sent"] = "a request while growing the state toward max_tokens"
        return exc.reply, baseline[-1]
    numbers["sent"] = f"16 questions, state grown to {growth.tokens} input tokens"
    before = reserved_now(ctx)
    return ctx.service.post("/decide/shared", shared_body(state, criteria16)), before


def run(ctx: Context) -> tuple[str, str | None, dict]:
    facts = ctx.facts()
    cap = facts.get("vram_cap_gib")
    body_file = ctx.options.over_cap_body
    if cap is None and body_file is None:
        raise NotRun("no VRAM cap is set (/health.vram_cap_gib is null) and no --over-cap-body was given")
    tolerance = ctx.options.memory_tolerance_mib * MIB
    numbers: dict = {"vram_cap_gib": cap, "body": str(body_file) if body_file else "built",
                     "tolerance_mib": ctx.options.memory_tolerance_mib}
    if body_file is not None:
        body = ctx.body_from_file(body_file)
        numbers["sent"] = path_for(body)
        baseline = reserved_now(ctx)
        reply = ctx.service.post(path_for(body), body)
    else:
        reply, baseline = send_default(ctx, numbers)
    numbers["baseline_reserved_gib"] = gib(baseline)
    numbers["over_cap_reply"] = {"status": reply.status, "error_code": reply.error_code,
                                 "envelope": reply.is_envelope}
    if reply.status != 503 or reply.error_code != "out_of_memory" or not reply.is_envelope:
        reason = f"the over-cap request answered {reply.describe()}, not 503 out_of_memory"
        if reply.status == 200 and body_file is None:
            reason += (f"; the largest legal call fits under the cap of {cap} GiB: lower the cap for this check "
                       "or give --over-cap-body")
        return FAIL, reason, numbers

    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        reserved = reserved_now(ctx)
        if reserved <= baseline + tolerance or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    numbers["reserved_after_gib"] = gib(reserved)
    numbers["above_baseline_mib"] = round((reserved - baseline) / MIB, 1)
    normal = ctx.service.post("/decide", plain_body("after-over-cap"))
    numbers["normal_request_status"] = normal.status
    numbers["reserved_after_normal_gib"] = gib(reserved_now(ctx))
    reasons = []
    if reserved > baseline + tolerance:
        reasons.append(f"reserved memory stayed {numbers['above_baseline_mib']} MiB above its baseline "
                       f"(tolerance {ctx.options.memory_tolerance_mib:g} MiB)")
    if normal.status != 200:
        reasons.append(f"a normal request afterwards answered {normal.describe()}")
    return (FAIL, "; ".join(reasons), numbers) if reasons else (PASS, None, numbers)
