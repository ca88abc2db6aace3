"""The check's files as one archive beside report.md and report.json, so that everything comes back from a machine
that returns only a few files (the GPU machine: at most 8, 16 MiB each).

A log larger than MEMBER_LIMIT_BYTES keeps only its last MEMBER_LIMIT_BYTES in the archive (the end of a log is
where a failure is); the report lists every file so cut, with its full size, so that nothing is cut silently.
"""
from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

MEMBER_LIMIT_BYTES = 4 * 1024 ** 2
TOTAL_LIMIT_BYTES = 48 * 1024 ** 2  # before compression; logs compress about tenfold, JSON more


@dataclass(frozen=True)
class Member:
    name: str  # relative to the files folder
    size: int
    kept: int  # bytes that go into the archive (the tail when cut)


def plan(folder: Path) -> list[Member]:
    members, total = [], 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        size = path.stat().st_size
        kept = min(size, MEMBER_LIMIT_BYTES, max(0, TOTAL_LIMIT_BYTES - total))
        total += kept
        members.append(Member(str(path.relative_to(folder)), size, kept))
    return members


def describe(members: list[Member], name: str) -> dict:
    return {"name": name, "files": len(members),
            "cut": [f"{m.name}: last {m.kept:,} of {m.size:,} bytes" for m in members if m.kept < m.size]}


def write(members: list[Member], folder: Path, target: Path) -> None:
    tmp = target.with_name(target.name + ".tmp")
    with tarfile.open(tmp, "w:gz", compresslevel=6) as archive:
        for member in members:
            path = folder / member.name
            try:
                with open(path, "rb") as source:
                    source.seek(max(0, path.stat().st_size - member.kept))
                    data = source.read(member.kept)
            except OSError:
                continue
            info = tarfile.TarInfo(f"gpucheck-files/{member.name}")
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    tmp.replace(target)
