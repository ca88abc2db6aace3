"""The python backend stub for the service's Python, put where the server looks, and the server's linkage checked
before it runs: a missing library (libpython3.X.so of a statically linked interpreter, a too old glibc or
libstdc++) is named here instead of surfacing as a model that never loads."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from devstack.triton import install_stub


def place(root: Path, version: str) -> Path:
    try:
        return install_stub(root, version)
    except RuntimeError as exc:
        available = sorted(p.name for p in (root / "python_backend_stubs").iterdir()) \
            if (root / "python_backend_stubs").is_dir() else []
        raise RuntimeError(f"{exc} (stubs carried: {', '.join(available) or 'none'})") from None


def binaries(root: Path) -> list:
    return [root / "bin" / "tritonserver", root / "backends" / "python" / "libtriton_python.so",
            root / "backends" / "python" / "triton_python_backend_stub"]


def linkage_problems(root: Path, libdir: str, log: Path) -> list:
    """Lines of ldd that say a library or a symbol version is missing; [] when ldd is not there."""
    if shutil.which("ldd") is None:
        return []
    problems = []
    env = {"LD_LIBRARY_PATH": libdir, "PATH": "/usr/bin:/bin"}
    with open(log, "a") as out:
        for binary in binaries(root):
            done = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, env=env, timeout=60)
            out.write(f"$ ldd {binary}\n{done.stdout}{done.stderr}\n")
            for line in (done.stdout + done.stderr).splitlines():
                if "not found" in line:
                    problems.append(f"{binary.name}: {line.strip()}")
    return problems
