"""Which shared libraries a process has loaded, by file: the in-process run and the stub that serves the same model
must resolve CUDA's libraries (and libpython) the same way, and the report shows each file and any difference.

Read from /proc/<pid>/maps, so it names what the loader chose, not what a search path would suggest."""
from __future__ import annotations

import os
import re
from pathlib import Path

# The libraries whose choice decides whether the two sides run the same code: CUDA's runtime and its maths, NCCL,
# cuDNN, torch's own, and the interpreter.
WATCHED = re.compile(r"lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl|nvrtc|nvJitLink|cusparse|cufft|curand|"
                     r"cusolver|torch_cuda|torch_cpu|c10_cuda|python3\.\d+)\b")


def loaded(pid: int | str = "self", maps_root: Path = Path("/proc")) -> dict[str, str]:
    """{library name up to ".so": the file mapped} for the watched libraries a process has loaded; {} when its maps
    cannot be read."""
    try:
        text = (maps_root / str(pid) / "maps").read_text()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        path = line.split(maxsplit=5)[5] if len(line.split(maxsplit=5)) == 6 else ""
        name = os.path.basename(path).split(".so")[0]
        if path.startswith("/") and ".so" in path and WATCHED.fullmatch(name):
            found[name] = os.path.realpath(path) if os.path.exists(path) else path
    return dict(sorted(found.items()))


def children(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """Every descendant of pid (the python backend's stubs under tritonserver)."""
    parents: dict[int, list[int]] = {}
    for entry in proc.glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    found, pending = [], [pid]
    while pending:
        for child in parents.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return sorted(found)


def differences(one: dict[str, str], other: dict[str, str]) -> dict[str, list]:
    """{name: [one's file, other's file]} for the libraries both loaded from different files."""
    return {name: [one[name], other[name]] for name in sorted(one.keys() & other.keys()) if one[name] != other[name]}
