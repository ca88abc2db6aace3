"""The acceptance kit's checks that need no real weights, run against the served stack when the kit is present.

The kit is a standard-library package acceptance/ at the repository root with the command line

    python -m acceptance --url URL --token-file F --metrics-url URL --checks 4,5,6,7,8 --n 20 --out DIR

which writes DIR/report.json (per check: status pass/fail/inconclusive/not_run, and its numbers) and exits 0 when
every selected check passed, 1 when one failed, 3 when none failed but one was inconclusive or not run. This
check fails only on a failed check (or a kit that broke); an inconclusive one, e.g. check 4 with fewer than 20
requests on the CPU, shows as such in the statuses. The kit's report is copied into this check's report as it is.
"""
from __future__ import annotations

import json
from pathlib import Path

from gpucheck.carry import REPO_ROOT
from gpucheck.deadline import run_logged

KIT = REPO_ROOT / "acceptance"
GPU_CHECKS = "4,5,6,7,8"
# On the CPU: latency (4), chunking (7), auth and the queue (8); the VRAM checks (5, 6) need a card.
CPU_CHECKS = "4,7,8"


def present() -> bool:
    return (KIT / "__main__.py").is_file()


def command(python: str, url: str, token_file: Path, metrics_url: str, checks: str, n: int, out: Path) -> list:
    return [python, "-m", "acceptance", "--url", url, "--token-file", str(token_file), "--metrics-url", metrics_url,
            "--checks", checks, "--n", str(n), "--out", str(out)]


def run(python: str, url: str, token_file: Path, metrics_url: str, checks: str, n: int, out: Path, log: Path,
        timeout: float) -> dict:
    """Runs the kit; returns its report (raises RuntimeError when it failed or wrote none)."""
    out.mkdir(parents=True, exist_ok=True)
    failure = None
    try:
        run_logged(command(python, url, token_file, metrics_url, checks, n, out), log, timeout, cwd=REPO_ROOT)
    except RuntimeError as exc:
        failure = exc
    report_path = out / "report.json"
    if not report_path.is_file():
        raise RuntimeError(f"the acceptance kit wrote no report.json ({failure or 'exit 0'})")
    report = json.loads(report_path.read_text())
    if failure is not None and (not unproven_only(report) or "exited with 3" not in str(failure)):
        raise KitFailed(report, str(failure))
    return report


def unproven_only(report: dict) -> bool:
    """No check failed, and some check was inconclusive or not run: the kit's exit status 3."""
    statuses = set(check_statuses(report).values())
    return "fail" not in statuses and bool(statuses & {"inconclusive", "not_run"})


class KitFailed(RuntimeError):
    def __init__(self, report: dict, message: str):
        super().__init__(message)
        self.report = report


def check_statuses(report: dict) -> dict:
    """{check: status} from the kit's report, whatever its exact nesting (a list or a mapping of checks)."""
    checks = report.get("checks", report)
    if isinstance(checks, dict):
        return {str(key): (value or {}).get("status") if isinstance(value, dict) else value
                for key, value in checks.items() if isinstance(value, (dict, str))}
    if isinstance(checks, list):
        return {str(item.get("check", item.get("id", index))): item.get("status")
                for index, item in enumerate(checks) if isinstance(item, dict)}
    return {}
