"""The two VRAM caps the check serves with, from what predict() used in-process (gpucheck.inprocess measures every
shape from an emptied allocator, so each peak is that shape's own). All in reserved bytes: torch's per-process
fraction (INTERN_DECISION_VRAM_CAP_GIB, applied before the weights load) limits what the allocator reserves.

* **The production cap** must hold the largest legal call; acceptance check 5 runs under it. It is the acceptance
  kit's own rule (acceptance.memory.suggest_cap_gib) applied to the largest peak measured: the probe (~7,900
  tokens, 16 questions) in-process, where the vision tower is still loaded, so an upper bound of the server's.
* **The test cap** is for check 6 alone, on an instance started with it: it must let that instance start and answer
  the normal shapes, and be exceeded by the largest call. In the server the vision tower is loaded at startup and
  removed after the first warm-up, so

    normal  = max(the anchor's peak (startup: the whole model and a small warm-up),
                  every timed shape's peak less the tower)
    largest = the probe's peak less the tower

  and a cap separates them when largest - normal is at least two margins (one each side, for what the server's
  allocator does differently from the in-process one). The test cap is then the midpoint. When nothing separates
  them (activations too small beside the tower, as a large card with short prompts may show), there is no test cap
  and check 6 is inconclusive with these numbers, never a failure.
"""
from __future__ import annotations

import math

from acceptance.memory import GIB, MIB, suggest_cap_gib

MARGIN = 256 * MIB
STARTUP_SHAPE = "anchor"


def plan_caps(inprocess: dict) -> dict:
    """inprocess: gpucheck.inprocess's result (with its probe). Returns {production_gib, test_gib (None when nothing
    separates), separable, normal_gib, largest_gib, margin_mib, why}. KeyError when a peak is missing."""
    vision = inprocess["memory"]["vision_bytes"]
    shapes = inprocess["shapes"]
    probe = _reserved(inprocess["probe"])
    startup = _reserved(shapes[STARTUP_SHAPE])
    served = {name: _reserved(entry) - vision for name, entry in shapes.items()}
    normal = max(startup, *served.values())
    largest = probe - vision
    separable = largest - normal >= 2 * MARGIN
    production = suggest_cap_gib(max(probe, startup))
    why = (f"startup (whole model, small warm-up) {startup / GIB:.2f} GiB; without the tower: "
           + ", ".join(f"{name} {nbytes / GIB:.2f}" for name, nbytes in served.items())
           + f", largest call {largest / GIB:.2f} GiB; production = the kit's rule on {max(probe, startup) / GIB:.2f}"
           f" GiB")
    return {
        "production_gib": production,
        "test_gib": _up((normal + largest) / 2) if separable else None,
        "separable": separable,
        "normal_gib": _up(normal),
        "largest_gib": round(largest / GIB, 2),
        "margin_mib": MARGIN // MIB,
        "why": why,
    }


def unmeasured() -> dict:
    """No in-process memory: production runs uncapped (its default), and there is no test cap for check 6."""
    return {"production_gib": None, "test_gib": None, "separable": None, "normal_gib": None, "largest_gib": None,
            "margin_mib": MARGIN // MIB, "why": "in-process memory not measured: served uncapped, no test cap"}


def _reserved(entry: dict) -> int:
    peak = entry["peak"]
    if not peak or not peak.get("reserved"):
        raise KeyError("peak reserved memory")
    return peak["reserved"]


def _up(nbytes: float) -> float:
    return math.ceil(nbytes / GIB * 100) / 100
