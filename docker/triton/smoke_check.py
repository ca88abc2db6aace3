"""Build-time smoke check of the Triton image's Python: run as `/opt/venv/bin/python -I smoke_check.py CONSTRAINTS`.

-I runs the interpreter the way Triton's python backend stub does (isolated: no PYTHONPATH, no user site, no
current directory), so what imports here imports in the stub. No GPU is needed; the check refuses the image when:

* the venv holds anything but exactly the pins of CONSTRAINTS (pip itself aside), or the contract's production
  pins differ (torch 2.10.0+cu128, transformers 5.17.0, flash-linear-attention 0.5.2, causal-conv1d 1.7.0);
* torch was not built for CUDA 12.8 or lacks sm_80 / sm_90 code;
* transformers' Qwen3.5 kernels would not resolve to flash-linear-attention and causal-conv1d (transformers then
  falls back, silently apart from one warning, to reference PyTorch code more than ten times slower), as the model
  side's own probe reads it (intern_decision_model.kernels: the same value the service reports as
  linear_attention);
* the compiled causal_conv1d_cuda extension does not load against this torch;
* OpenAI Triton, which flash-linear-attention's kernels run on, could not compile its launcher at run time
  (it needs a C compiler and Python.h; without them fla degrades to its CPU path);
* the shared wire package or the model side's package is not importable from site-packages.

It prints the versions it found.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import shutil
import sys
import sysconfig
from pathlib import Path

PRODUCTION = {
    "torch": "2.10.0+cu128",
    "transformers": "5.17.0",
    "flash-linear-attention": "0.5.2",
    "causal-conv1d": "1.7.0",
}
# Present in every venv, put there by `python -m venv` rather than by the pins.
VENV_TOOLS = {"pip"}
CUDA = "12.8"
ARCHES = ("sm_80", "sm_90")
def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, str]:
    pins = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[normalize(name.strip())] = version.strip()
    return pins


def installed() -> dict[str, str]:
    return {normalize(dist.metadata["Name"]): dist.version for dist in importlib.metadata.distributions()}


def check_versions(pins: dict[str, str], found: dict[str, str]) -> list[str]:
    problems = []
    for name, version in PRODUCTION.items():
        if pins.get(name) != version:
            problems.append(f"the constraints pin {name}=={pins.get(name)}, the contract says {version}")
    for name, version in sorted(pins.items()):
        if found.get(name) != version:
            problems.append(f"{name}: pinned {version}, installed {found.get(name)}")
    for name in sorted(set(found) - set(pins) - VENV_TOOLS):
        problems.append(f"{name}=={found[name]} is installed but not pinned")
    return problems


def check_torch() -> list[str]:
    import torch

    problems = []
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), arch list {' '.join(torch.cuda.get_arch_list())}")
    if torch.version.cuda != CUDA:
        problems.append(f"torch was built for CUDA {torch.version.cuda}, not {CUDA}")
    missing = [arch for arch in ARCHES if arch not in torch.cuda.get_arch_list()]
    if missing:
        problems.append(f"torch has no code for {', '.join(missing)}")
    return problems


def check_kernels() -> list[str]:
    """The linear-attention path transformers bound, by the model side's probe, and the compiled extension."""
    try:
        from intern_decision_model import kernels
    except Exception as exc:  # noqa: BLE001
        return [f"import intern_decision_model failed: {type(exc).__name__}: {exc}"]
    return kernel_problems(kernels.report(), causal_conv1d_extension_error())


def causal_conv1d_extension_error() -> str | None:
    try:
        import causal_conv1d_cuda  # noqa: F401 - the compiled extension, linked against this torch
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    return None


def kernel_problems(probe: dict, extension_error: str | None) -> list[str]:
    """probe: intern_decision_model.kernels.report()."""
    packages = ", ".join(f"{name} {version or 'does not import'}" for name, version in probe["packages"].items())
    print(f"linear attention: {probe['linear_attention']} ({packages})")
    problems = [f"{name} resolves to the {entry['path']} path ({entry['bound'] or 'unknown module'})"
                for name, entry in probe["functions"].items() if entry["path"] != "fast"]
    if probe["linear_attention"] != "fast":
        problems.append(f"the linear-attention path is {probe['linear_attention']}, not fast")
    if extension_error:
        problems.append(f"the causal_conv1d_cuda extension does not load: {extension_error}")
    return problems


def check_triton_compiler() -> list[str]:
    problems = []
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not header.is_file():
        problems.append(f"{header} is missing: OpenAI Triton cannot build its launcher (install python3-dev)")
    compiler = os.environ.get("CC") or next((cc for cc in ("cc", "gcc", "clang") if shutil.which(cc)), None)
    if compiler is None or shutil.which(compiler) is None:
        problems.append("no C compiler on PATH: OpenAI Triton cannot build its launcher (install gcc)")
    return problems


def check_in_site_packages(name: str) -> list[str]:
    try:
        package = importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        return [f"import {name} failed: {type(exc).__name__}: {exc}"]
    where = Path(package.__file__).resolve()
    print(f"{name} from {where.parent}")
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    if site not in where.parents:
        return [f"{name} was imported from {where.parent}, not from {site}"]
    return []


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -I smoke_check.py CONSTRAINTS", file=sys.stderr)
        return 2
    if not sys.flags.isolated:
        print("run me with python -I, the way the python backend stub runs Python", file=sys.stderr)
        return 2
    print(f"Python {sys.version.split()[0]} at {sys.executable}")
    problems = check_versions(read_pins(Path(argv[0])), installed())
    problems += check_torch()
    problems += check_kernels()
    problems += check_triton_compiler()
    problems += check_in_site_packages("wire") + check_in_site_packages("intern_decision_model")
    if problems:
        print("smoke check FAILED:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print("smoke check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
