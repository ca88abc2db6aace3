"""Check 6, over the cap: 503 out_of_memory, reserved memory back to the model's post-warm-up baseline (its gauge
intern_decision_gpu_memory_bytes{kind="baseline"}) within the release slack, and the service still answers."""
from __future__ import annotations

import time

from ..memory import MIB, gib
from ..shapes import binary_criteria, path_for, plain_body, shared_body
from .common import LIMIT_MARGIN, CheckFailed, Context, NotRun, ProbeFailed, Verdict

SETTLE_SECONDS = 10.0


def reserved_now(ctx: Context) -> float:
    memory = ctx.memory()
    if "reserved" not in memory:
        raise CheckFailed("the metrics do not report reserved memory")
    return memory["reserved"]


def send_default(ctx: Context, numbers: dict):
    """16 questions over a state that fills max_tokens; a growth probe that already runs out of memory counts."""
    criteria16 = binary_criteria(16)
    try:
        state, growth = ctx.grown_state(criteria16, ctx.max_tokens() - LIMIT_MARGIN, tolerance=64)
    except ProbeFailed as exc:
        numbers["sent"] = "a request while growing the state toward max_tokens"
        return exc.reply
    numbers["sent"] = f"16 questions, state grown to {growth.tokens} input tokens"
    return ctx.service.post("/decide/shared", shared_body(state, criteria16))


def run(ctx: Context) -> tuple[str, str | None, dict]:
    facts = ctx.facts()
    cap = facts.get("vram_cap_gib")
    body_file = ctx.options.over_cap_body
    if cap is None and body_file is None:
        raise NotRun("no VRAM cap is set (/health.vram_cap_gib is null) and no --over-cap-body was given")
    slack = ctx.options.memory_tolerance_mib * MIB
    device = str((facts.get("model") or {}).get("device") or "")
    before = ctx.memory()
    baseline = before.get("baseline")
    numbers: dict = {"vram_cap_gib": cap, "device": device, "body": str(body_file) if body_file else "built",
                     "baseline_gib": gib(baseline), "reserved_before_gib": gib(before.get("reserved")),
                     "release_slack_mib": ctx.options.memory_tolerance_mib}
    if "reserved" not in before:
        raise CheckFailed("the metrics do not report reserved memory", numbers)
    if body_file is not None:
        body = ctx.body_from_file(body_file)
        numbers["sent"] = path_for(body)
        reply = ctx.service.post(path_for(body), body)
    else:
        reply = send_default(ctx, numbers)
    numbers["over_cap_reply"] = {"status": reply.status, "error_code": reply.error_code,
                                 "envelope": reply.is_envelope}
    verdict = Verdict()
    if reply.status == 200 and body_file is None:
        # A cap that holds every legal call is what production wants (check 5); it leaves nothing to provoke here.
        verdict.unprove(f"the largest legal call fits under the cap of {cap} GiB, so no request exceeds it: run "
                        "this check on an instance started with a lower cap, or give --over-cap-body")
        return verdict.result(numbers)
    if reply.status != 503 or reply.error_code != "out_of_memory" or not reply.is_envelope:
        verdict.fail(f"the over-cap request answered {reply.describe()}, not 503 out_of_memory")
        return verdict.result(numbers)

    if baseline is None:
        verdict.unprove("the model exports no post-warm-up baseline (intern_decision_gpu_memory_bytes"
                        "{kind=\"baseline\"}): the return to it cannot be shown")
        reserved = reserved_now(ctx)
    else:
        deadline = time.monotonic() + SETTLE_SECONDS
        while (reserved := reserved_now(ctx)) > baseline + slack and time.monotonic() < deadline:
            time.sleep(0.5)
        numbers["above_baseline_mib"] = round((reserved - baseline) / MIB, 1)
        if reserved > baseline + slack:
            verdict.fail(f"reserved memory stayed {numbers['above_baseline_mib']} MiB above the post-warm-up "
                         f"baseline (release slack {ctx.options.memory_tolerance_mib:g} MiB)")
        if device.startswith("cpu") or not any(before.values()):
            verdict.unprove(f"the model's memory gauges read 0 (device {device or 'unknown'!r}): a return to the "
                            "baseline cannot be shown")
    numbers["reserved_after_gib"] = gib(reserved)
    normal = ctx.service.post("/decide", plain_body("after-over-cap"))
    numbers["normal_request_status"] = normal.status
    numbers["reserved_after_normal_gib"] = gib(reserved_now(ctx))
    if normal.status != 200:
        verdict.fail(f"a normal request afterwards answered {normal.describe()}")
    return verdict.result(numbers)
