"""Choosing INTERN_DECISION_VRAM_CAP_GIB for the served model, from what predict() used in-process.

The cap (torch's per-process memory fraction, applied before the weights load) must let the service start and
serve the measured shapes, yet be exceeded by the largest call it accepts, so that acceptance check 6 can provoke
an out-of-memory 503 and see the service recover. In the server the vision tower is loaded at startup and removed
after the first warm-up, so:

* startup needs the whole model plus a small warm-up: the anchor's peak in-process (tower loaded);
* the long shape needs its in-process peak less the tower;
* the largest call (the "probe", ~7,900 tokens, just under MAX_TOKENS) needs its peak less the tower.

All in reserved bytes (what the fraction limits). The cap is the midpoint between the larger of the first two plus a
256 MiB allowance and the third. When no value separates them, the cap is the lower bound and the result says an
over-cap call may not exist.
"""
from __future__ import annotations

import math

GIB = 1024 ** 3
ALLOWANCE = 256 * 1024 ** 2


def choose_cap(inprocess: dict) -> dict:
    """inprocess: gpucheck.inprocess's result. Returns {cap_gib, separable, lower_gib, over_cap_call_gib, why}."""
    vision = inprocess["memory"]["vision_bytes"]
    anchor = inprocess["shapes"]["anchor"]["peak"]["reserved"]
    long16 = inprocess["shapes"]["long16"]["peak"]["reserved"]
    largest = inprocess["probe"]["peak"]["reserved"] - vision
    lower = max(anchor, long16 - vision) + ALLOWANCE
    separable = largest > lower + ALLOWANCE
    cap = (lower + largest) / 2 if separable else lower
    why = (f"startup (whole model + warm-up) {anchor / GIB:.2f} GiB, long shape without the tower "
           f"{(long16 - vision) / GIB:.2f} GiB, largest call without the tower {largest / GIB:.2f} GiB")
    return {
        "cap_gib": _up(cap),
        "separable": separable,
        "lower_gib": _up(lower),
        "over_cap_call_gib": round(largest / GIB, 2),
        "why": why,
    }


def fallback_cap(weight_bytes: int) -> dict:
    """No in-process measurement: the weights plus 1.5 GiB, unmeasured."""
    return {"cap_gib": _up(weight_bytes + 1.5 * GIB), "separable": None, "lower_gib": None,
            "over_cap_call_gib": None, "why": "in-process memory not measured: weights + 1.5 GiB"}


def _up(nbytes: float) -> float:
    return math.ceil(nbytes / GIB * 100) / 100
