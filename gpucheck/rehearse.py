"""python -m gpucheck.rehearse [--work DIR] [--tree REF] [--no-collect]

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

What it proves and what it cannot: docs/gpu-check.md, "The rehearsal". Exit 0 iff the check passed and its output
would come back whole.
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

from gpucheck.carry import DEFAULT_DIR, REPO_ROOT

BASE_PYTHON = "3.12"
# The GPU machine's versions where transformers' imports reach them; what it has beside (pandas, OpenCV, pillow,
# torchvision, accelerate) as current releases built for numpy 2.
BASE_REQUIREMENTS = ("torch==2.11.0", "torchvision==0.26.0", "transformers==5.17.0", "numpy>=2.5", "scipy",
                     "scikit-learn", "pandas", "opencv-python-headless", "pillow", "accelerate")
DEVICE_ARGUMENTS = ("--device", "cpu", "--checkpoint", "synthetic-small")
# What the GPU machine sends back of $OUT.
RETURN_FILES, RETURN_FILE_BYTES, RETURN_TOTAL_BYTES, RETURN_DEPTH = 8, 16 * 1024 ** 2, 64 * 1024 ** 2, 2


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


def run_offline(base: Path, copy: Path, out: Path, home: Path, log: Path) -> int:
    """The device command with no network and a bare environment whose python3 is the base's."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    home.mkdir(parents=True, exist_ok=True)
    env = {"PATH": f"{base / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": str(home)}
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


def summary(out: Path) -> dict:
    report = out / "report.json"
    data = json.loads(report.read_text()) if report.is_file() else {}
    archive = next(out.glob("*.tar.gz"), None)
    members = []
    if archive is not None:
        with tarfile.open(archive) as opened:
            members = opened.getnames()
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
    args = parser.parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    base = build_base(work)
    if not args.no_collect or not (DEFAULT_DIR / "manifest.json").is_file():
        subprocess.run([sys.executable, "-m", "gpucheck.collect"], cwd=REPO_ROOT, check=True)
    name = hashlib.sha1((args.tree or "working-tree").encode()).hexdigest()[:8]
    copy, out = work / f"machine-{name}" / "repo", work / f"machine-{name}" / "out"
    lay_out(copy, args.tree, DEFAULT_DIR)
    log = work / f"machine-{name}" / "device-command.log"
    status = run_offline(base, copy, out, work / f"machine-{name}" / "home", log)
    problems = what_comes_back(out)
    result = {"tree": args.tree or "working tree", "exit_status": status, "returns_whole": not problems,
              "return_problems": problems, "seconds": round(time.monotonic() - started, 1), **summary(out),
              "log": str(log)}
    print(json.dumps(result, indent=2))
    return 0 if status == 0 and not problems and result["result"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
