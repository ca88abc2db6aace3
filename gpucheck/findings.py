"""What the check's steps find, and how a step hands it over: a step returns a Found (its one-line summary and what it
found, by the names of Findings' fields), and the runner (gpucheck.check) records it into the context's Findings
with dataclasses.replace. A step never writes into the context; it reads what earlier steps found in
ctx.findings."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType

from devstack.fixture import FixturePins
from gpucheck.cap import unmeasured


@dataclass(frozen=True)
class Findings:
    """Each field: the step that finds it. The defaults hold until that step passes."""
    python: str = sys.executable  # install: the service's interpreter (else this one)
    server_root: Path | None = None  # install: the unpacked server; stub: the tree it checked and serves from
    kernels: Path | None = None  # install: flash-linear-attention's packages, installed apart (None: not carried)
    # stub: the carried libpython's folder, first on the server's library path, when the interpreter has none
    libpython_dir: str | None = None
    pins: FixturePins | None = None  # checkpoint: the checkpoint built
    shapes_path: Path | None = None  # shapes: the fitted shapes' file
    fitted: dict = field(default_factory=dict)  # shapes: each shape's body and token counts
    inprocess: dict | None = None  # inprocess: gpucheck.inprocess's result
    inprocess_path: str | None = None  # inprocess: the linear-attention path its figures ran
    kernels_bound: bool = False  # inprocess: transformers bound fla's kernels
    caps: dict = field(default_factory=unmeasured)  # inprocess: gpucheck.cap's production cap and check 6's test cap
    # server, decided as it starts (so that the report says it even when serving fails): the check told the model
    # to serve on the slow path.
    slow_kernels_allowed: bool = False


FINDINGS = frozenset(entry.name for entry in fields(Findings))


@dataclass(frozen=True, init=False)
class Found:
    """A passing step's result: Found(summary, data, **facts): its one line, what it measured for the report (its
    entry's data), and what later steps read, named as Findings' fields (TypeError otherwise)."""
    summary: str
    data: MappingProxyType
    facts: MappingProxyType

    def __init__(self, summary: str, data: dict | None = None, **facts):
        unknown = sorted(set(facts) - FINDINGS)
        if unknown:
            raise TypeError(f"not a finding: {', '.join(unknown)}")
        object.__setattr__(self, "summary", summary)
        object.__setattr__(self, "data", MappingProxyType(dict(data or {})))
        object.__setattr__(self, "facts", MappingProxyType(facts))
