"""A `python` on the shared libpython the stub links, so that predict() in process runs on the stub's runtime.

The in-process figures come from the interpreter's own binary, which Debian and Ubuntu link statically; the stub
embeds the shared libpython, measured 14 % slower on a host-bound forward. A three-line launcher compiled against
that library and placed beside the environment's interpreter (so that its pyvenv.cfg, packages and .pth files are
the same) times the same predict() on it.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

SOURCE = ("extern int Py_BytesMain(int argc, char **argv);\n"
          "int main(int argc, char **argv) { return Py_BytesMain(argc, argv); }\n")


class LauncherUnavailable(Exception):
    """Why no launcher could be made here (no compiler, no shared libpython): the step is skipped, saying so."""


def shared_library(libdirs: str, version: str) -> Path:
    """The libpython<version>.so.1.0 in the stub's library folders (pathsep-separated), first found."""
    for folder in filter(None, libdirs.split(os.pathsep)):
        found = sorted(glob.glob(os.path.join(folder, f"libpython{version}.so.1*")))
        if found:
            return Path(found[0])
    raise LauncherUnavailable(f"no libpython{version}.so.1.0 in {libdirs or '(no folder)'}")


def build(library: Path, dest: Path) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise LauncherUnavailable("no C compiler (cc, gcc) on this machine")
    dest.mkdir(parents=True, exist_ok=True)
    source, launcher = dest / "python-shared.c", dest / "python-shared"
    source.write_text(SOURCE)
    done = subprocess.run([compiler, "-O2", str(source), "-o", str(launcher), str(library),
                           f"-Wl,-rpath,{library.parent}"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise LauncherUnavailable(f"the launcher did not compile: {done.stderr.strip()[-300:]}")
    return launcher


def runs_shared(launcher: Path) -> dict:
    """What the launcher's interpreter says of itself: its version and whether it runs on the shared library."""
    probe = ("import json, sys; print(json.dumps({'version': sys.version.split()[0], 'prefix': sys.prefix, "
             "'shared': any('libpython' in line for line in open('/proc/self/maps'))}))")
    done = subprocess.run([str(launcher), "-c", probe], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise LauncherUnavailable(f"the launcher does not start: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)
