"""python -m gpucheck --out DIR [--cpu]

On a single large GPU with no network: installs the carried wheels (see gpucheck.collect), builds the synthetic
full-size checkpoint, serves it with the bundled tritonserver and the shim, runs the acceptance kit, measures
predict() in-process, and writes everything into DIR (report.md, report.json, the logs). --cpu rehearses the same
steps on the CPU with the tiny fixture and the development environment. Exit 0 when every essential step passed or was
skipped on purpose (an optional step's finding or inconclusive outcome is reported, and does not decide), 3 when none
failed but an essential one was inconclusive, else 1.
See docs/gpu-check.md.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpucheck import acceptance_kit
from gpucheck.carry import DEFAULT_DIR, REPO_ROOT
from gpucheck.check import DEADLINES, run
from gpucheck.context import Options


def parse(argv) -> Options:
    parser = argparse.ArgumentParser(prog="python -m gpucheck", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="the report folder (created; files are replaced)")
    parser.add_argument("--cpu", action="store_true", help="rehearse on the CPU with the tiny fixture")
    parser.add_argument("--scratch", type=Path, help="for the checkpoint and the environment "
                        "(default: .cache/gpucheck in the repository)")
    parser.add_argument("--carry", type=Path, default=DEFAULT_DIR, help="what gpucheck.collect gathered")
    parser.add_argument("--checkpoint", choices=("synthetic-full", "synthetic-small", "fixture"),
                        help="default: synthetic-full on the GPU, fixture with --cpu")
    parser.add_argument("--rounds", type=int, help="timed requests per shape (default 20; 2 with --cpu)")
    parser.add_argument("--warmup", type=int, help="untimed requests per shape first (default 2; 1 with --cpu)")
    parser.add_argument("--kit-checks", help=f"acceptance checks (default {acceptance_kit.GPU_CHECKS}; "
                        f"{acceptance_kit.CPU_CHECKS} when the model runs on the CPU)")
    parser.add_argument("--kit-n", type=int, help="the kit's --n (default 20; 3 with --cpu)")
    parser.add_argument("--deadline", type=float, help=f"overall seconds, teardown included (hard stop; default "
                        f"{DEADLINES['gpu']:.0f}, {DEADLINES['cpu']:.0f} with --cpu)")
    parser.add_argument("--server-root", type=Path, help="a tritonserver tree to use instead of the installed one")
    parser.add_argument("--device", choices=("cuda", "cpu"),
                        help="where the model runs (default cuda; cpu with --cpu, or to rehearse the GPU path "
                             "without a card)")
    parser.add_argument("--only", help="comma-separated steps to run, with the steps they need (to re-run one that "
                        "did not pass: report.md gives the command)")
    args = parser.parse_args(argv)
    cpu = args.cpu
    device = args.device or ("cpu" if cpu else "cuda")
    return Options(
        mode="cpu" if cpu else "gpu",
        device=device,
        out=args.out.resolve(),
        scratch=(args.scratch or REPO_ROOT / ".cache" / "gpucheck").resolve(),
        carry=args.carry.resolve(),
        checkpoint=args.checkpoint or ("fixture" if cpu else "synthetic-full"),
        rounds=args.rounds or (2 if cpu else 20),
        warmup=args.warmup if args.warmup is not None else (1 if cpu else 2),
        kit_checks=args.kit_checks or (acceptance_kit.GPU_CHECKS if device == "cuda" else acceptance_kit.CPU_CHECKS),
        kit_n=args.kit_n or (3 if cpu else 20),
        deadline=args.deadline or DEADLINES["cpu" if cpu else "gpu"],
        server_root=args.server_root.resolve() if args.server_root else None,
        only=tuple(name.strip() for name in (args.only or "").split(",") if name.strip()),
    )


def main(argv=None) -> int:
    options = parse(argv)
    os.chdir(REPO_ROOT)  # the shim and the check's scripts run as modules of this checkout
    report = run(options)
    print(f"{report.headline}: {options.out / 'report.md'} (files: {options.out / 'gpucheck-files.tar.gz'})")
    for step in report.steps.values():
        print(f"  {step.status:8} {step.name:16} {step.detail}")
    return {"pass": 0, "inconclusive": 3}.get(report.result, 1)


if __name__ == "__main__":
    sys.exit(main())
