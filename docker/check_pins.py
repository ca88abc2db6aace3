"""Fail an image build when pip installed anything that a constraints file does not pin exactly.

    python check_pins.py CONSTRAINTS REPORT [REPORT ...]

Each REPORT is what `pip install --report REPORT ...` wrote. Every distribution pip installed must appear in
CONSTRAINTS as `name==version` with exactly the version installed (a local label such as +cu128 included), so an
image can only ever hold the versions written in the repository. Standard library only: it runs inside the images.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)")


def normalize(name: str) -> str:
    """PEP 503 name normalisation: case, and runs of '-', '_' and '.' are not significant."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(text: str) -> dict[str, str]:
    """name -> version for every `name==version` line; anything else that is not a comment is an error."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.fullmatch(line)
        if match is None:
            raise ValueError(f"line {number}: {raw.strip()!r} is not an exact pin (name==version)")
        name = normalize(match.group(1))
        if name in pins:
            raise ValueError(f"line {number}: {match.group(1)} is pinned twice")
        pins[name] = match.group(2)
    return pins


def unpinned(pins: dict[str, str], report: dict) -> list[str]:
    """One message for every distribution in a pip report that the pins do not hold exactly."""
    problems = []
    for item in report.get("install", []):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        pinned = pins.get(normalize(name))
        if pinned is None:
            problems.append(f"{name}=={version} was installed but is not pinned")
        elif pinned != version:
            problems.append(f"{name}=={version} was installed but the pin says {pinned}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    pins = read_pins(Path(argv[0]).read_text())
    problems = []
    installed = 0
    for path in argv[1:]:
        report = json.loads(Path(path).read_text())
        installed += len(report.get("install", []))
        problems += unpinned(pins, report)
    if problems:
        print(f"{argv[0]} does not pin what pip installed:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(f"check_pins: all {installed} distributions pip installed are pinned in {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
