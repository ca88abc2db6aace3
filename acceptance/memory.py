"""Sizing the VRAM cap from measured memory, and reading nvidia-smi's CSV."""
from __future__ import annotations

import math

GIB = 1024 ** 3
MIB = 1024 ** 2
# The cap rule: the peak reserved memory plus 10 % plus 1 GiB, rounded up to the next 0.5 GiB.
CAP_MARGIN = 0.10
CAP_HEADROOM_GIB = 1.0
CAP_STEP_GIB = 0.5


def suggest_cap_gib(peak_bytes: float) -> float:
    raw = peak_bytes / GIB * (1 + CAP_MARGIN) + CAP_HEADROOM_GIB
    # The small epsilon keeps a value that is already on a step from being rounded one step up by float noise.
    return math.ceil(raw / CAP_STEP_GIB - 1e-9) * CAP_STEP_GIB


def parse_nvidia_smi(text: str) -> list[dict]:
    """Lines of 'memory.used, memory.total' in MiB (noheader, nounits), one per GPU."""
    gpus = []
    for index, line in enumerate(text.strip().splitlines()):
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 2:
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        gpus.append({"index": index, "used_mib": float(fields[0]), "total_mib": float(fields[1])})
    return gpus


def gib(value: float | None) -> float | None:
    return None if value is None else round(value / GIB, 3)
