"""Where the stack's time goes outside the forward pass: py-spy samples the shim and the model's python backend stub
while one client sends one-question /decide/shared requests back to back (CPU, fixture checkpoint, one torch thread),
and the samples are summed per function: the share of each process's busy samples that a function is on the stack
of (inclusive) and on top of (self). Idle samples (a thread waiting) are left out.

    PYTHONPATH=. .venv/bin/python bench/profile_stack.py --py-spy PATH [--seconds 30] [--label before]

py-spy comes from PyPI (`pip install py-spy`); it is not a dependency of the project. The table goes to
bench/results/profile-<label>.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from collections import Counter
from http.client import HTTPConnection
from pathlib import Path

from overhead import RESULTS, STATE, TOKEN, criteria, machine, post

from devstack.fixture import build_fixture
from devstack.shim import ShimServer
from devstack.triton import REPO_ROOT, TritonServer

TOP = 25


def stub_pid(triton_pid: int) -> int:
    """The python backend stub that runs the model (a child of tritonserver)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if parent == triton_pid and command[0].endswith(b"triton_python_backend_stub") and any(
                part.startswith(b"intern_decision_0") for part in command):
            return int(proc.name)
    raise RuntimeError("no python backend stub of the model under tritonserver")


def functions(collapsed: Path) -> tuple[int, Counter, Counter]:
    """(busy samples, inclusive samples per function, self samples per function) from py-spy's raw output."""
    busy, inclusive, own = 0, Counter(), Counter()
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [frame.split(" (", 1)[0] + " (" + frame.split(" (", 1)[1].rsplit(":", 1)[0] + ")"
                  if " (" in frame else frame for frame in stack.split(";")[1:]]  # the first is the thread
        if not frames:
            continue
        samples = int(count)
        busy += samples
        for frame in set(frames):
            inclusive[frame] += samples
        own[frames[-1]] += samples
    return busy, inclusive, own


def table(name: str, collapsed: Path) -> list[str]:
    busy, inclusive, own = functions(collapsed)
    lines = [f"### {name}: {busy} busy samples", "", "| function (file) | inclusive % | self % |", "|---|---|---|"]
    for frame, samples in inclusive.most_common(TOP):
        lines.append(f"| `{frame}` | {100 * samples / busy:.1f} | {100 * own[frame] / busy:.1f} |")
    lines += ["", "Top by self time:", "", "| function (file) | self % |", "|---|---|"]
    for frame, samples in own.most_common(TOP // 2):
        lines.append(f"| `{frame}` | {100 * samples / busy:.1f} |")
    return lines + [""]


def profile(py_spy: str, seconds: float) -> dict[str, Path]:
    env = {**build_fixture().env(), "INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32",
           "OMP_NUM_THREADS": "1"}
    logs = REPO_ROOT / ".cache" / "bench"
    scratch = Path(tempfile.mkdtemp(prefix="profile-"))
    triton = TritonServer(env, logs / "tritonserver.log").start().wait_ready(300)
    shim = ShimServer(triton, {"INTERN_DECISION_API_TOKEN": TOKEN}, logs / "shim.log").start()
    outputs = {"shim": scratch / "shim.txt", "model stub": scratch / "stub.txt"}
    try:
        shim.wait_ready(120)
        http = HTTPConnection("127.0.0.1", shim.port, timeout=60)
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        payload = json.dumps({"state": STATE, "decisions": criteria(1)}).encode()
        for _ in range(20):
            post(http, "/decide/shared", payload, headers)
        pids = {"shim": shim.pid, "model stub": stub_pid(triton.pid)}
        spies = [subprocess.Popen([py_spy, "record", "--pid", str(pids[name]), "--duration", str(int(seconds)),
                                   "--rate", "250", "--format", "raw", "--nonblocking", "--threads",
                                   "--output", str(outputs[name])], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for name in pids]
        deadline = time.monotonic() + seconds
        requests = 0
        while time.monotonic() < deadline:
            post(http, "/decide/shared", payload, headers)
            requests += 1
        for spy in spies:
            spy.wait(60)
    finally:
        shim.stop()
        triton.stop()
    print(f"{requests} requests profiled")
    return outputs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--py-spy", required=True, help="the py-spy executable")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--label", default="before")
    args = parser.parse_args()
    outputs = profile(args.py_spy, args.seconds)
    lines = [f"# Profile of the stack under one-question requests ({args.label})", "",
             f"`bench/profile_stack.py`: py-spy at 250 Hz, {args.seconds:.0f} s, one client sending one-question "
             f"`/decide/shared` requests back to back, on {machine()} (shared with other work). Shares of each "
             "process's busy samples (a waiting thread's samples left out).", ""]
    for name, collapsed in outputs.items():
        lines += table(name, collapsed)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"profile-{args.label}.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
