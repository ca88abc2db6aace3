"""Check that a built extension wheel carries GPU code every target card can run.

    python check_cuda_archs.py WHEEL "8.0;8.6;8.9;9.0"

Lists the cubins of every shared object in WHEEL with `cuobjdump --list-elf` (from the CUDA toolkit) and requires,
for each target compute capability X.Y, machine code for X.Z with Z <= Y: NVIDIA's binary compatibility runs
sm_80 code on 8.6 and 8.9 cards, but never code of another major version. causal-conv1d 1.7.0 chooses its own
-gencode list (sm_75, 80, 87, 90, and 100/120 with CUDA >= 12.8), which makes torch ignore TORCH_CUDA_ARCH_LIST for
it; this check is what ties the build to the cards we deploy on. Standard library only.
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

_SM = re.compile(r"\.sm_(\d+)([a-z]?)\.cubin")


def parse_targets(text: str) -> list[tuple[int, int]]:
    """ "8.0;8.6 9.0" -> [(8, 0), (8, 6), (9, 0)]; a +PTX suffix is ignored."""
    targets = []
    for item in re.split(r"[;\s]+", text.strip()):
        if item:
            major, minor = item.removesuffix("+PTX").split(".")
            targets.append((int(major), int(minor)))
    return targets


def cubin_arches(listing: str) -> set[tuple[int, int]]:
    """The (major, minor) of each cubin cuobjdump --list-elf names, e.g. 'causal_conv1d.1.sm_80.cubin' -> (8, 0)."""
    found = set()
    for digits, _suffix in _SM.findall(listing):
        found.add((int(digits[:-1]), int(digits[-1])))
    return found


def uncovered(targets: list[tuple[int, int]], arches: set[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(major, minor) for major, minor in targets
            if not any(a_major == major and a_minor <= minor for a_major, a_minor in arches)]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print('usage: check_cuda_archs.py WHEEL "8.0;8.6;8.9;9.0"', file=sys.stderr)
        return 2
    wheel, targets = Path(argv[0]), parse_targets(argv[1])
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
        objects = [name for name in archive.namelist() if name.endswith(".so")]
        if not objects:
            print(f"{wheel.name} holds no compiled extension", file=sys.stderr)
            return 1
        for name in objects:
            path = Path(archive.extract(name, tmp))
            listing = subprocess.run(["cuobjdump", "--list-elf", str(path)], check=True,
                                     capture_output=True, text=True).stdout
            arches = cubin_arches(listing)
            shown = " ".join(f"sm_{a}{b}" for a, b in sorted(arches))
            print(f"{name}: {shown or 'no cubins'}")
            missing = uncovered(targets, arches)
            if missing:
                print(f"{name} has no code for compute capability "
                      f"{', '.join(f'{a}.{b}' for a, b in missing)}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
