"""Runs the selected checks in order and collects their results into a report."""
from __future__ import annotations

import datetime
import platform
import sys
import time
import traceback

from .checks import CHECKS
from .checks.common import CheckFailed, Context, NotRun, ProbeFailed
from .client import Service
from .options import Options
from .report import FAIL, NOT_RUN, CheckResult, Report


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def run_check(ctx: Context, number: int) -> CheckResult:
    name, title, function = CHECKS[number]
    started = time.monotonic()
    try:
        status, reason, numbers = function(ctx)
    except NotRun as exc:
        status, reason, numbers = NOT_RUN, exc.reason, exc.numbers
    except CheckFailed as exc:
        status, reason, numbers = FAIL, exc.reason, exc.numbers
    except ProbeFailed as exc:
        status, reason, numbers = FAIL, f"a request while growing a state answered {exc}", {}
    except Exception as exc:  # a check that breaks is a failed check, and the others still run
        status, reason = FAIL, f"the check itself failed: {type(exc).__name__}: {exc}"
        numbers = {"traceback": traceback.format_exc(limit=5)}
    numbers = {**numbers, "seconds": round(time.monotonic() - started, 3)}
    return CheckResult(number, name, title, status, reason or None, numbers)


def run(options: Options, progress=None) -> Report:
    service = Service(options.url, options.token, options.timeout)
    started = time.monotonic()
    meta = {"started": _now(), "url": options.url, "metrics_url": options.metrics_url,
            "checks_selected": ",".join(map(str, options.checks)), "n": options.n,
            "python": platform.python_version(), "host": options.client_host,
            "host_is": "named with --client-host" if options.client_host_given else "this machine's name"}
    ctx = Context(options, service)
    meta["health_status"] = ctx.health.status
    results = []
    for number in CHECKS:
        name, title, _ = CHECKS[number]
        if number not in options.checks:
            results.append(CheckResult(number, name, title, NOT_RUN, "not selected (--checks)"))
            continue
        if progress:
            progress(f"check {number}: {title} ...")
        result = run_check(ctx, number)
        if progress:
            progress(f"check {number}: {result.status}" + (f" ({result.reason})" if result.reason else ""))
        results.append(result)
    service.close()
    meta["finished"] = _now()
    meta["seconds"] = round(time.monotonic() - started, 3)
    if isinstance(ctx.health.body, dict):
        meta["health"] = ctx.health.body
    return Report(meta, results, options.checks)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
