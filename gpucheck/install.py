"""The install step on the GPU machine, offline: a virtual environment for the service, the carried wheels, the
trimmed server, and the kernel packages kept apart.

The environment is created with --system-site-packages from the machine's interpreter, plus a .pth naming that
interpreter's own site folders, so that torch and transformers are seen even when that interpreter is itself a
virtual environment. pip resolves against what is there and takes only what is missing from the carried wheels
(numpy<2 shadows a numpy 2 of the machine, as the python backend stub needs). Nothing of the machine's own
environment is changed.

Two more .pth files make the environment work the way the production image does:
* the repository's root, so that the stub (which ignores PYTHONPATH and the current folder) imports the wire
  protocol and the model side's package, intern_decision_model, the way the image has them in site-packages;
* the machine's packages that cannot work beside the carried numpy 1.x (gpucheck.shadowed: scipy and scikit-learn
  on the GPU machine) hidden from every interpreter of the environment, so that transformers sees them as absent.

flash-linear-attention goes to a separate folder: the check measures with it first, and the served model sees it
(through a .pth added later) only when that measurement worked.
"""
from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

from gpucheck import carry
from gpucheck.deadline import run_logged
from gpucheck.shadowed import canonical

PTH_NAME = "gpucheck-base-interpreter.pth"
KERNELS_PTH_NAME = "gpucheck-kernels.pth"
REPOSITORY_PTH_NAME = "gpucheck-repository.pth"
HIDDEN_PTH_NAME = "gpucheck-hidden.pth"


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def site_packages(python: Path | str, log: Path, timeout: float) -> str:
    return run_logged([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                      log, timeout).strip()


def base_site_dirs(python: str, log: Path, timeout: float) -> list:
    code = ("import json, site, sysconfig; p = sysconfig.get_paths(); "
            "user = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []; "
            "print(json.dumps(list(dict.fromkeys(site.getsitepackages() + [p['purelib'], p['platlib']] + user))))")
    return json.loads(run_logged([python, "-c", code], log, timeout))


def create_venv(machine_python: str, venv: Path, log: Path, timeout: float) -> list:
    """Creates the environment; returns the pip command to install into it."""
    try:
        run_logged([machine_python, "-m", "venv", "--system-site-packages", venv], log, timeout)
        return [python_of(venv), "-m", "pip"]
    except RuntimeError:
        # No ensurepip on this interpreter (a distribution's python without its venv package): an environment
        # without pip, installed into by the machine's own pip.
        run_logged([machine_python, "-m", "venv", "--system-site-packages", "--without-pip", "--clear", venv],
                   log, timeout)
        return [machine_python, "-m", "pip", "--python", python_of(venv)]


def link_base_interpreter(machine_python: str, venv: Path, log: Path, timeout: float) -> None:
    target = Path(site_packages(python_of(venv), log, timeout))
    (target / PTH_NAME).write_text("\n".join(base_site_dirs(machine_python, log, timeout)) + "\n")


def hide_line(names: list) -> str:
    """A .pth line that makes these modules absent: import raises ImportError, importlib.util.find_spec says None."""
    return f"import sys; sys.modules.update(dict.fromkeys({sorted(set(names))!r}))\n"


def installed_here(site: Path) -> set:
    """The distributions an environment holds in its own site folder (canonical names)."""
    return {canonical(path.name[:-len(".dist-info")].rsplit("-", 1)[0]) for path in site.glob("*.dist-info")}


def hide_shadowed(machine_python: str, venv: Path, log: Path, timeout: float) -> list:
    """Hides what gpucheck.shadowed lists for the environment's numpy, except what the environment installed
    itself from the carry (its own copy, built for that numpy, is the one that imports); returns what it hid."""
    venv_python = python_of(venv)
    numpy_version = run_logged([venv_python, "-I", "-c", "import numpy; print(numpy.__version__)"], log,
                               timeout).strip()
    listed = json.loads(run_logged([machine_python, "-m", "gpucheck.shadowed", "--numpy", numpy_version], log,
                                   timeout, cwd=carry.REPO_ROOT))
    target = Path(site_packages(venv_python, log, timeout))
    own = installed_here(target)
    hidden = [entry for entry in listed if entry["distribution"] not in own]
    names = [name for entry in hidden for name in entry["imports"]]
    if names:
        (target / HIDDEN_PTH_NAME).write_text(hide_line(names))
    return hidden


def link_repository(venv: Path, log: Path, timeout: float) -> None:
    target = Path(site_packages(python_of(venv), log, timeout))
    (target / REPOSITORY_PTH_NAME).write_text(f"{carry.REPO_ROOT}\n")


def pip_install(pip: list, arguments: list, log: Path, timeout: float) -> None:
    run_logged([*pip, "install", "--disable-pip-version-check", "--no-input", "--no-index", "--only-binary=:all:",
                *arguments], log, timeout)


def unpack_server(tarball: Path, dest: Path) -> Path:
    """Unpacks the trimmed server; returns the server root (…/pytriton/tritonserver)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as archive:
        for member in archive.getmembers():
            if member.name.startswith("/") or ".." in Path(member.name).parts or not member.isfile():
                raise RuntimeError(f"refusing the tarball member {member.name!r}")
        if hasattr(tarfile, "data_filter"):
            archive.extractall(dest, filter="data")
        else:
            archive.extractall(dest)
    root = dest / carry.SERVER_PREFIX.rstrip("/")
    if not (root / "bin" / "tritonserver").is_file():
        raise RuntimeError(f"{tarball.name} holds no bin/tritonserver")
    return root


def install(machine_python: str, carry_dir: Path, scratch: Path, log: Path, budget) -> dict:
    """Everything above, each command within budget() (the seconds the step has left); returns {python,
    server_root, kernels, versions, hidden}."""
    wheels = carry_dir / carry.WHEELS
    tarball = carry_dir / carry.SERVER_TARBALL
    for needed in (wheels, tarball):
        if not needed.exists():
            raise RuntimeError(f"{needed} is missing: run python -m gpucheck.collect where the package index is "
                               f"reachable, and carry {carry_dir.name}/ along")
    venv = scratch / "venv"
    pip = create_venv(machine_python, venv, log, budget())
    link_base_interpreter(machine_python, venv, log, budget())
    pip_install(pip, ["--find-links", wheels, *carry.SERVICE_REQUIREMENTS], log, budget())
    link_repository(venv, log, budget())
    hidden = hide_shadowed(machine_python, venv, log, budget())
    server_root = unpack_server(tarball, scratch / "triton")
    kernels = None
    kernel_wheels = carry_dir / carry.KERNEL_WHEELS
    if kernel_wheels.is_dir() and any(kernel_wheels.glob("*.whl")):
        kernels = scratch / "kernels"
        pip_install(pip, ["--no-deps", "--target", kernels, *sorted(kernel_wheels.glob("*.whl"))], log, budget())
    versions = json.loads(run_logged([python_of(venv), "-I", "-c", carry.IMPORT_CHECK], log,
                                     budget()).strip().splitlines()[-1])
    return {"python": str(python_of(venv)), "server_root": str(server_root),
            "kernels": str(kernels) if kernels else None, "versions": versions, "hidden": hidden}


def expose_kernels(python: str, kernels: Path, log: Path, hidden: tuple[str, ...] = ()) -> None:
    """Make the kernel folder part of the service's environment (the stub ignores PYTHONPATH), less the packages in
    `hidden` (causal_conv1d, where only the mixed path worked in process)."""
    target = Path(site_packages(python, log, 60))
    (target / KERNELS_PTH_NAME).write_text(str(kernels) + "\n" + (hide_line(list(hidden)) if hidden else ""))


def version_of(python: str) -> str:
    done = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          check=True, capture_output=True, text=True, timeout=60)
    return done.stdout.strip()
