"""python -m gpucheck.rehearse [--work DIR] [--tree REF] [--no-collect] [--cut warmup] [--cut libpython]

The GPU check rehearsed on a CPU machine shaped like the GPU machine, so that the check's first run there works:

1. **base**: a Python 3.12 virtual environment holding what the GPU machine's own interpreter holds and the check
   meets there: torch 2.11.0, torchvision 0.26.0 and transformers 5.17.0 installed in the base, numpy 2, a current
   scipy and scikit-learn, pandas, OpenCV, pillow and accelerate (BASE_REQUIREMENTS). Built once under --work and
   reused while the requirements are unchanged.
2. **carry**: `python -m gpucheck.collect` writes .carry/ (the only step that uses the network).
3. **copy**: the checkout laid out as the GPU machine receives it: tracked files, untracked files git does not
   ignore, and .carry/; nothing else (no .venv, no .cache).
4. **run**: gpucheck/on_device.sh in that copy, in a fresh network namespace (`unshare -n`: no network at all), with
   a bare environment whose `python3` is the base's, exactly the command the GPU machine runs but for
   `--device cpu --checkpoint synthetic-small`.
5. **verify**: what would come back from the GPU machine (at most 8 files, each at most 16 MiB, 64 MiB together, no
   deeper than two folders) and the report's result.

--cut plays a case the GPU machine may bring, on the same path (gpucheck itself is unchanged; the rehearsal shapes
the machine):

* **warmup**: a kernel warm-up still running at its allowance. Its process is held back before it starts (a
  sitecustomize on PYTHONPATH, acting on `gpucheck.warm_kernels` alone), as slow compiles would keep it; the check
  must stop it at the kernel_warmup step's allowance and record it as skipped.
* **libpython**: a machine whose Python has no libpython of its own (a statically linked build). The interpreter is
  a copy of the base's Python 3.12 with no libpython in its library folder and a build configuration that says so,
  seeing the base's packages through a .pth; the check must find none and serve with the carried fallback. (The
  copied executable still loads the original's libpython through its run path: what the check looks at, and what
  the stub links, is the copy's folder, which has none.)

What it proves and what it cannot: docs/gpu-check.md, "The rehearsal". Exit 0 iff the check passed, every case asked
for was played as meant, and the output would come back whole.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from gpucheck import carry
from gpucheck.carry import DEFAULT_DIR, REPO_ROOT

BASE_PYTHON = "3.12"
# The GPU machine's versions where transformers' imports reach them; what it has beside (pandas, OpenCV, pillow,
# torchvision, accelerate) as current releases built for numpy 2; and the service's dependencies it has, which are
# not carried (gpucheck.carry.ON_MACHINE).
BASE_REQUIREMENTS = ("torch==2.11.0", "torchvision==0.26.0", "transformers==5.17.0", "numpy>=2.5", "scipy",
                     "scikit-learn", "pandas", "opencv-python-headless", "pillow", "accelerate",
                     *carry.ON_MACHINE, *carry.MACHINE_ALSO)
DEVICE_ARGUMENTS = ("--device", "cpu", "--checkpoint", "synthetic-small")
# What the GPU machine sends back of $OUT.
RETURN_FILES, RETURN_FILE_BYTES, RETURN_TOTAL_BYTES, RETURN_DEPTH = 8, 16 * 1024 ** 2, 64 * 1024 ** 2, 2
# The cases --cut plays (the module's docstring says how).
CUTS = {"warmup": "a kernel warm-up still running at its allowance",
        "libpython": "a machine whose Python has no libpython of its own"}


def find_python(version: str) -> str:
    """An interpreter of that version that runs: python3.12 on PATH, or one that pyenv installed."""
    candidates = [shutil.which(f"python{version}")]
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True).stdout.strip()
        installed = sorted(Path(root, "versions").glob(f"{version}.*"), reverse=True)
        candidates += [str(folder / "bin" / f"python{version}") for folder in installed]
    except (OSError, subprocess.CalledProcessError):
        pass
    for candidate in filter(None, candidates):
        done = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.strip() == version:
            return candidate
    raise SystemExit(f"no Python {version}: put python{version} on PATH or install it with pyenv")


def build_base(work: Path) -> Path:
    base = work / "base"
    stamp = base / ".requirements"
    wanted = "\n".join(BASE_REQUIREMENTS)
    if stamp.is_file() and stamp.read_text() == wanted:
        return base
    if base.exists():
        shutil.rmtree(base)
    interpreter = find_python(BASE_PYTHON)
    subprocess.run([interpreter, "-m", "venv", str(base)], check=True)
    subprocess.run([str(base / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
                    *BASE_REQUIREMENTS], check=True)
    stamp.write_text(wanted)
    return base


def python_without_libpython(work: Path, base: Path) -> Path:
    """The --cut libpython interpreter (module docstring): made once under work, reused while the base is unchanged.
    Returns its bin folder, which holds python3."""
    target = work / "python-without-libpython"
    stamp = target / ".made-from"
    base_python = str(base / "bin" / "python")
    prefix, purelib = subprocess.run(
        [base_python, "-c", "import sys, sysconfig; print(sys.base_prefix); print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.split()
    made_from = f"{prefix}\n{(base / '.requirements').read_text()}"
    if stamp.is_file() and stamp.read_text() == made_from:
        return target / "bin"
    if target.exists():
        shutil.rmtree(target)
    stdlib = Path(prefix) / "lib" / f"python{BASE_PYTHON}"

    def left_out(folder: str, names: list[str]) -> set[str]:
        dropped = {name for name in names if name.startswith("libpython") and ".so" in name}  # libpython3.so too
        if Path(folder) == stdlib:
            dropped |= {"test", "site-packages"} & set(names)
        return dropped

    shutil.copytree(prefix, target, symlinks=True, ignore=left_out)
    libdir = target / "lib"
    for config in (libdir / f"python{BASE_PYTHON}").glob("_sysconfigdata_*.py"):
        edited = config.read_text().replace(f"'LIBDIR': '{prefix}/lib'", f"'LIBDIR': '{libdir}'").replace(
            "'Py_ENABLE_SHARED': 1", "'Py_ENABLE_SHARED': 0")
        if f"'LIBDIR': '{libdir}'" not in edited or "'Py_ENABLE_SHARED': 0" not in edited:
            raise SystemExit(f"{config}: LIBDIR or Py_ENABLE_SHARED not where expected; cannot shape the interpreter")
        config.write_text(edited)
    site = libdir / f"python{BASE_PYTHON}" / "site-packages"
    site.mkdir()
    (site / "rehearsal-base.pth").write_text(purelib + "\n")
    probe = ("import glob, os, sysconfig, importlib.util; libdir = sysconfig.get_config_var('LIBDIR'); "
             "print(sorted(glob.glob(os.path.join(libdir, 'libpython*.so*'))), "
             "importlib.util.find_spec('torch') is not None)")
    seen = subprocess.run([str(target / "bin" / "python3"), "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip()
    if seen != "[] True":
        raise SystemExit(f"the interpreter without libpython is not shaped as meant: {seen}")
    stamp.write_text(made_from)
    return target / "bin"


# Held back before it starts; the check stops it at the kernel_warmup step's allowance (at most its limit).
WARMUP_HOLD = """import sys
import time

if sys.orig_argv[1:3] == ["-m", "gpucheck.warm_kernels"]:
    time.sleep(3600)
"""


def held_warmup(work: Path) -> Path:
    """A folder for PYTHONPATH whose sitecustomize holds back gpucheck.warm_kernels (--cut warmup)."""
    folder = work / "hold-warmup"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(WARMUP_HOLD)
    return folder


def checkout_files(tree: str | None) -> list[str]:
    if tree:
        listed = subprocess.run(["git", "ls-tree", "-r", "-z", "--name-only", tree], cwd=REPO_ROOT,
                                capture_output=True, check=True).stdout
    else:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=REPO_ROOT, capture_output=True, check=True).stdout
    return [name for name in listed.decode().split("\0") if name]


def lay_out(copy: Path, tree: str | None, carry: Path) -> None:
    """The checkout as the GPU machine receives it (tree: a commit instead of the working tree)."""
    if copy.exists():
        shutil.rmtree(copy)
    copy.mkdir(parents=True)
    if tree:
        archive = subprocess.run(["git", "archive", "--format=tar", tree], cwd=REPO_ROOT, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(copy)], input=archive, check=True)
    else:
        for name in checkout_files(None):
            source = REPO_ROOT / name
            if source.is_file():
                (copy / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, copy / name)
    shutil.copytree(carry, copy / ".carry")


def device_command(copy: Path, out: Path) -> list[str]:
    if (copy / "gpucheck" / "on_device.sh").is_file():
        return ["bash", "gpucheck/on_device.sh", str(out), *DEVICE_ARGUMENTS]
    return ["python3", "-m", "gpucheck", "--out", str(out), *DEVICE_ARGUMENTS]  # a tree from before the script


def run_offline(python_bin: Path, copy: Path, out: Path, home: Path, log: Path, extra_env: dict | None = None) -> int:
    """The device command with no network and a bare environment whose python3 is python_bin's."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    home.mkdir(parents=True, exist_ok=True)
    env = {"PATH": f"{python_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": str(home), **(extra_env or {})}
    # A new network namespace has only a loopback interface, and it is down: up, it is what the GPU machine has.
    offline = ["sh", "-c", 'ip link set lo up && exec "$@"', "sh", *device_command(copy, out)]
    command = ["unshare", "--net", *offline]
    if os.geteuid() != 0:
        command = ["unshare", "--map-root-user", *command[1:]]
    with open(log, "wb") as sink:
        done = subprocess.run(command, cwd=copy, env=env, stdout=sink, stderr=subprocess.STDOUT)
    return done.returncode


def what_comes_back(out: Path) -> list[str]:
    """Why the GPU machine would not return OUT whole; [] when it would."""
    files = [path for path in out.rglob("*") if path.is_file() or path.is_symlink()]
    problems = []
    if len(files) > RETURN_FILES:
        problems.append(f"{len(files)} files, at most {RETURN_FILES} come back")
    for path in files:
        relative = path.relative_to(out)
        if path.is_symlink():
            problems.append(f"{relative} is a link")
        elif path.stat().st_size > RETURN_FILE_BYTES:
            problems.append(f"{relative} is {path.stat().st_size / 1024 ** 2:.1f} MiB, at most 16 come back")
        if len(relative.parts) - 1 > RETURN_DEPTH:
            problems.append(f"{relative} is deeper than {RETURN_DEPTH} folders")
    total = sum(path.stat().st_size for path in files if path.is_file())
    if total > RETURN_TOTAL_BYTES:
        problems.append(f"{total / 1024 ** 2:.1f} MiB in all, at most 64 come back")
    return problems


def report_of(out: Path) -> dict:
    report = out / "report.json"
    return json.loads(report.read_text()) if report.is_file() else {}


def archive_members(out: Path) -> list[str]:
    archive = next(out.glob("*.tar.gz"), None)
    if archive is None:
        return []
    with tarfile.open(archive) as opened:
        return opened.getnames()


def cuts_played(cuts: list[str], report: dict, members: list[str]) -> dict:
    """For each case asked for: [played as meant, what the report says of it]."""
    steps = {step["name"]: step for step in report.get("steps", [])}
    found = {}
    if "warmup" in cuts:
        step = steps.get("kernel_warmup", {})
        cut = (step.get("data") or {}).get("cut") or ""
        found["warmup"] = [step.get("status") == "skipped" and cut.startswith("still running")
                           and "gpucheck-files/kernel-warmup.log" in members,
                           f"kernel_warmup {step.get('status')}: {step.get('detail', '')[:300]}"]
    if "libpython" in cuts:
        step = steps.get("stub", {})
        used = (step.get("data") or {}).get("libpython")
        served = steps.get("server", {}).get("status")
        found["libpython"] = [used == "carried" and served == "pass" and "gpucheck-files/ldd.txt" in members,
                              f"stub {step.get('status')}, libpython {used}; server {served}"]
    return found


def summary(out: Path) -> dict:
    data = report_of(out)
    members = archive_members(out)
    return {"result": data.get("result", "no report"), "wall_seconds": data.get("wall_seconds"),
            "steps": {step["name"]: [step["status"], step.get("seconds"), step.get("detail", "")[:300]]
                      for step in data.get("steps", [])},
            "facts": {key: data.get("facts", {}).get(key) for key in
                      ("served_config", "linear_attention_served", "linear_attention_inprocess",
                       "slow_kernels_allowed", "hidden_from_service")},
            "archive_members": len(members)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucheck.rehearse", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=REPO_ROOT / ".cache" / "rehearsal")
    parser.add_argument("--tree", help="rehearse a commit (e.g. an older main) instead of the working tree")
    parser.add_argument("--no-collect", action="store_true", help="reuse .carry/ as it is")
    parser.add_argument("--cut", action="append", choices=CUTS, default=[],
                        help="play a case: " + "; ".join(f"{name}: {what}" for name, what in CUTS.items()))
    args = parser.parse_args(argv)
    cuts = sorted(set(args.cut))
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    base = build_base(work)
    if not args.no_collect or not (DEFAULT_DIR / "manifest.json").is_file():
        subprocess.run([sys.executable, "-m", "gpucheck.collect"], cwd=REPO_ROOT, check=True)
    python_bin = python_without_libpython(work, base) if "libpython" in cuts else base / "bin"
    extra_env = {"PYTHONPATH": str(held_warmup(work))} if "warmup" in cuts else {}
    name = hashlib.sha1(" ".join([args.tree or "working-tree", *cuts]).encode()).hexdigest()[:8]
    copy, out = work / f"machine-{name}" / "repo", work / f"machine-{name}" / "out"
    lay_out(copy, args.tree, DEFAULT_DIR)
    log = work / f"machine-{name}" / "device-command.log"
    run_started = time.monotonic()
    status = run_offline(python_bin, copy, out, work / f"machine-{name}" / "home", log, extra_env)
    run_seconds = round(time.monotonic() - run_started, 1)
    problems = what_comes_back(out)
    played = cuts_played(cuts, report_of(out), archive_members(out))
    result = {"tree": args.tree or "working tree", "cuts": played, "exit_status": status,
              "returns_whole": not problems, "return_problems": problems,
              "seconds": round(time.monotonic() - started, 1), "device_command_seconds": run_seconds,
              **summary(out), "log": str(log)}
    print(json.dumps(result, indent=2))
    return 0 if (status == 0 and not problems and result["result"] == "pass"
                 and all(meant for meant, _ in played.values())) else 1


if __name__ == "__main__":
    sys.exit(main())
