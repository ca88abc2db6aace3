"""python -m gpucheck.preflight [gpucheck options]: what the GPU check cannot do without, before it starts.

It prints where this Python's libpython is (or that the carried fallback will be used, gpucheck.libpython) and the
free disk space under the scratch folder, and stops the run by name, with report.md and report.json in --out saying
why, when the shared libpython the python backend stub links is missing with no fallback carried, or the disk cannot
hold the checkpoint (10 GiB for the synthetic full-size one). on_device.sh runs it first; a stop here costs seconds,
not the machine's whole lease.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

from gpucheck import libpython as carried

GIB = 1024 ** 3
DISK_NEEDED_GIB = {"synthetic-full": 10, "synthetic-small": 1, "fixture": 1}


def libpython() -> list[str]:
    name = "libpython%d.%d.so*" % sys.version_info[:2]
    folders = {sysconfig.get_config_var("LIBDIR") or "", os.path.join(sys.base_prefix, "lib")}
    return sorted({path for folder in folders if folder for path in glob.glob(os.path.join(folder, name))})


def free_bytes(folder: Path) -> int:
    existing = folder
    while not existing.exists():
        existing = existing.parent
    return shutil.disk_usage(existing).free


def carried_libpython(carry: Path) -> str | None:
    """The carried fallback for this Python (gpucheck.libpython), if there is one."""
    packed = carry / carried.FOLDER / ("libpython%d.%d.so.1.0.xz" % sys.version_info[:2])
    return str(packed) if packed.is_file() else None


def problems(scratch: Path, checkpoint: str, carry: Path) -> tuple[list[str], dict]:
    found = {"libpython": libpython(), "libpython_carried": carried_libpython(carry), "scratch": str(scratch),
             "free_gib": round(free_bytes(scratch) / GIB, 1), "needed_gib": DISK_NEEDED_GIB[checkpoint]}
    found["libpython_used"] = "machine" if found["libpython"] else ("carried" if found["libpython_carried"] else None)
    stops, limits = [], []
    if found["libpython_used"] == "carried":
        unmet = carried_unmet(carry)
        found["libpython_unmet_modules"] = unmet
        if unmet:
            limits.append(f"this machine's Python has no libpython of its own and builds {', '.join(unmet)} in; the "
                          f"carried libpython would load them from its lib-dynload, which has none: the python "
                          f"backend stub cannot run this Python here (the machine's limit: install its libpython, "
                          f"e.g. Debian's libpython{sys.version_info[0]}.{sys.version_info[1]})")
    if not found["libpython_used"]:
        stops.append("libpython %d.%d is missing (the python backend stub links it) and none is carried: no server "
                     "can start" % sys.version_info[:2])
    if found["free_gib"] < found["needed_gib"]:
        stops.append(f"{found['free_gib']} GiB free under {scratch}, below the {found['needed_gib']} GiB the "
                     f"{checkpoint} checkpoint needs")
    return stops + limits, dict(found, limits=limits)


def carried_unmet(carry: Path) -> list[str]:
    """carried.unmet_modules for this interpreter and the carried libpython ([] when the carry does not say what it
    builds in: an older carry)."""
    info_path = carry / carried.FOLDER / "libpython.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    if "builtins" not in info:
        return []
    dynload = Path(sysconfig.get_config_var("DESTSHARED") or "")
    names = [path.name for path in dynload.glob("*.so")] if dynload.is_dir() else []
    return carried.unmet_modules(sys.builtin_module_names, info["builtins"], names)


def main(argv=None) -> int:
    from gpucheck.__main__ import parse
    from gpucheck.report import FAIL, INCONCLUSIVE, Report, Step

    options = parse(argv)
    stops, found = problems(options.scratch, options.checkpoint, options.carry)
    if found["libpython_used"] == "carried":
        print(f"== libpython: none on this machine; the stub will use the carried fallback "
              f"{found['libpython_carried']}")
    else:
        print(f"== libpython: {', '.join(found['libpython']) or 'none'}")
    print(f"== disk: {found['free_gib']} GiB free under {found['scratch']} ({found['needed_gib']} GiB needed)")
    if not stops:
        return 0
    # the machine's limit alone (nothing of ours failed): inconclusive, named; anything else a failure
    status = INCONCLUSIVE if stops == found["limits"] else FAIL
    report = Report(options.out, options.mode, options.deadline,
                    [Step("preflight", "what the check cannot do without", status, 0.0, "stopped: " + "; ".join(stops),
                          found)])
    report.finished = report.started
    report.write()
    print("== STOP: " + "; ".join(stops))
    return 3 if status == INCONCLUSIVE else 1


if __name__ == "__main__":
    sys.exit(main())
