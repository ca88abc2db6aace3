"""Check 5, resident and peak VRAM, and a cap suggested from them."""
from __future__ import annotations

from .. import nvsmi
from ..memory import CAP_HEADROOM_GIB, CAP_MARGIN, CAP_STEP_GIB, gib, suggest_cap_gib
from ..metrics import MEMORY_KINDS
from ..report import FAIL, PASS
from ..shapes import binary_criteria, shared_body
from .common import LIMIT_MARGIN, CheckFailed, Context, NotRun, ProbeFailed

CAP_RULE = (f"peak reserved x {1 + CAP_MARGIN:g} + {CAP_HEADROOM_GIB:g} GiB, "
            f"rounded up to the next {CAP_STEP_GIB:g} GiB")


def as_gib(memory: dict[str, float]) -> dict:
    return {kind: gib(memory[kind]) if kind in memory else "not reported" for kind in MEMORY_KINDS}


def run(ctx: Context) -> tuple[str, str | None, dict]:
    facts = ctx.facts()
    device = str((facts.get("model") or {}).get("device") or "")
    if not device or device.startswith("cpu"):
        raise NotRun(f"the model runs on the CPU (/health model.device = {device or 'unknown'!r})")
    resident = ctx.memory()
    numbers: dict = {"device": device, "vram_cap_gib": facts.get("vram_cap_gib"), "resident_gib": as_gib(resident),
                     "nvidia_smi": nvsmi.binary() is not None, "nvidia_smi_resident_mib": nvsmi.read()}
    if "reserved" not in resident:
        raise CheckFailed("the metrics do not report reserved memory", numbers)
    if not any(resident.values()):
        raise NotRun("the model's memory metrics read 0", numbers)

    # The largest legal call: 16 questions over a state that fills max_tokens. Its peak is what a cap must hold.
    criteria16 = binary_criteria(16)
    try:
        state, growth = ctx.grown_state(criteria16, ctx.max_tokens() - LIMIT_MARGIN, tolerance=64)
    except ProbeFailed as exc:
        raise CheckFailed(f"growing the largest call: {exc.reply.describe()}", numbers) from None
    with nvsmi.PeakSampler() as sampler:
        load = ctx.service.post("/decide/shared", shared_body(state, criteria16))
    after = ctx.memory()
    numbers["load_request"] = {"status": load.status, "error_code": load.error_code,
                               "input_tokens": (load.body or {}).get("timing", {}).get("input_tokens")
                               if load.status == 200 else None, "growth": growth.as_numbers()}
    numbers["after_load_gib"] = as_gib(after)
    numbers["nvidia_smi_peak_mib"] = list(sampler.peak.values()) if sampler.samples else None

    if "peak_reserved" in after:
        basis, basis_name = after["peak_reserved"], "peak_reserved"
    else:
        basis = max(resident.get("reserved", 0), after.get("reserved", 0))
        basis_name = "reserved (peak_reserved not reported: a lower bound of the peak)"
    numbers["cap_basis"] = {"kind": basis_name, "gib": gib(basis)}
    numbers["cap_rule"] = CAP_RULE
    numbers["suggested_cap_gib"] = suggest_cap_gib(basis)
    if load.status != 200:
        return FAIL, (f"the largest legal call (16 questions at max_tokens) answered {load.describe()} "
                      f"under the cap in force ({facts.get('vram_cap_gib')} GiB)"), numbers
    return PASS, None, numbers
