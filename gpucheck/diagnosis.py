"""What a step that did not pass leaves for the one reading the report without a second full run: the tail of each
log it wrote, the environment it ran in, and the command that re-runs it alone (with the steps it needs:
`--only`)."""
from __future__ import annotations

import os
from pathlib import Path

TAIL_LINES = 25
TAILED_LOGS = 4  # the most recently written first
# What decides which libraries and interpreter a step's processes find.
ENVIRONMENT = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "TRITON_CACHE_DIR")


def snapshot(folder: Path) -> dict[str, float]:
    """{file relative to folder: its modification time}."""
    return {str(path.relative_to(folder)): path.stat().st_mtime for path in folder.rglob("*") if path.is_file()}


def written_since(folder: Path, before: dict[str, float]) -> list[str]:
    """The logs written (new or changed) since the snapshot, most recently written first."""
    now = snapshot(folder)
    changed = [name for name, mtime in now.items() if before.get(name) != mtime and name.endswith((".log", ".txt"))]
    return sorted(changed, key=lambda name: now[name], reverse=True)


def log_tails(folder: Path, names: list[str], lines: int = TAIL_LINES) -> dict[str, str]:
    tails = {}
    for name in names[:TAILED_LOGS]:
        try:
            text = (folder / name).read_text(errors="replace")
        except OSError:
            continue
        tails[name] = "\n".join(text.rstrip().splitlines()[-lines:])
    return tails


def rerun_command(step: str, checkpoint: str | None = None) -> str:
    """The step again, alone with what it needs, as the GPU machine runs the check."""
    extra = f" --checkpoint {checkpoint}" if checkpoint and checkpoint != "synthetic-full" else ""
    return f'bash gpucheck/on_device.sh "$OUT" --only {step}{extra}'


def environment() -> dict[str, str]:
    return {name: os.environ[name] for name in ENVIRONMENT if name in os.environ}
