"""The two VRAM caps the check serves with, from what predict() used in-process (gpucheck.inprocess measures every
shape from an emptied allocator, so each peak is that shape's own, allocated and reserved).

What a cap acts on: INTERN_DECISION_VRAM_CAP_GIB becomes torch's per-process memory fraction, a bound on what the
caching allocator reserves. When a request needs a block the cap would not allow, the allocator first frees its
cached blocks and retries; only then is it out of memory. So a call fails under a cap only when what it holds at
once, its *allocated* peak, does not fit; its *reserved* peak is what it may reserve when nothing stops it, an upper
bound of what it needs. Hence:

* **The production cap** must hold the largest legal call; acceptance check 5 runs under it. It is the acceptance
  kit's own rule (acceptance.memory.suggest_cap_gib) on the largest reserved peak measured (the probe, ~7,900
  tokens, 16 questions, in-process with the vision tower still loaded, or the startup's): an upper bound of the
  server's.
* **The test cap** is for check 6 alone, on an instance started with it: it must let that instance start and answer
  the normal shapes, and the largest call must not fit under it. In the server the vision tower is loaded at startup
  and removed after the first warm-up, so

    normal  = max(the startup's reserved peak (the whole model, tower included, and a small warm-up: the anchor's),
                  every timed shape's reserved peak less the tower)       what they may reserve: they must fit
    largest = the probe's allocated peak less the tower                   what it must hold: it must not fit

  and a cap separates them when largest - normal is at least two margins (one each side, for what the server's
  allocator and kernels do differently from the in-process run's). The test cap is then the midpoint. Measuring
  the largest call on its reserved peak would count cached blocks the allocator gives back under the cap: a cap
  "between" would then let the call through (an inconclusive check 6), or decide on noise. When nothing separates
  them (a card whose largest call's activations are small beside the 0.6 GiB tower), there is no test cap and
  check 6 is inconclusive, "cannot separate on this card", with these numbers, never a failure.

The check serves with the allocator's default configuration, as production does: `expandable_segments:True` would
make reserved memory follow allocated memory and narrow the normal side, but check 6 would then test an allocator
the service does not deploy with, and the startup peak (the tower) stays the largest normal peak either way.
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
    probe_reserved = _peak(inprocess["probe"], "reserved")
    startup = _peak(shapes[STARTUP_SHAPE], "reserved")
    served = {name: _peak(entry, "reserved") - vision for name, entry in shapes.items()}
    normal = max(startup, *served.values())
    largest = _peak(inprocess["probe"], "allocated") - vision
    separable = largest - normal >= 2 * MARGIN
    production = suggest_cap_gib(max(probe_reserved, startup))
    verdict = ("separable" if separable else
               f"cannot separate on this card: {(largest - normal) / GIB:.2f} GiB between them, "
               f"{2 * MARGIN / GIB:.2f} needed")
    why = (f"startup (whole model, small warm-up) {startup / GIB:.2f} GiB reserved; without the tower, reserved: "
           + ", ".join(f"{name} {nbytes / GIB:.2f}" for name, nbytes in served.items())
           + f"; largest call {largest / GIB:.2f} GiB allocated ({(probe_reserved - vision) / GIB:.2f} reserved); "
           f"{verdict}; production = the kit's rule on {max(probe_reserved, startup) / GIB:.2f} GiB")
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


def _peak(entry: dict, kind: str) -> int:
    peak = entry["peak"]
    if not peak or not peak.get(kind):
        raise KeyError(f"peak {kind} memory")
    return peak[kind]


def _up(nbytes: float) -> float:
    return math.ceil(nbytes / GIB * 100) / 100
