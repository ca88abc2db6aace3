"""The command line."""
from __future__ import annotations

import argparse
import platform
from dataclasses import dataclass
from pathlib import Path

ALL_CHECKS = (1, 2, 3, 4, 5, 6, 7, 8)
DEFAULT_ROWS = Path(__file__).resolve().parent / "data" / "smoke_rows.jsonl"
# Our choice, not the contract's: a latency shape is measured on at least this many timed requests.
MIN_LATENCY_N = 20


@dataclass
class Options:
    url: str
    token: str
    metrics_url: str | None
    out: Path
    rows: Path
    reference: Path | None
    checks: tuple[int, ...]
    n: int
    restart_command: str | None
    restart_prompt: bool
    restarts: int
    restart_timeout: float
    over_cap_body: Path | None
    flood: int
    flood_body: Path | None
    max_p50_ms: float | None
    memory_tolerance_mib: float
    timeout: float
    client_host: str
    client_host_given: bool


def parse_checks(text: str) -> tuple[int, ...]:
    try:
        numbers = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"--checks takes numbers 1..8 separated by commas, not {text!r}") from None
    if not numbers or not numbers <= set(ALL_CHECKS):
        raise argparse.ArgumentTypeError(f"--checks takes numbers 1..8 separated by commas, not {text!r}")
    return tuple(sorted(numbers))


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m acceptance",
        description="Run the acceptance checks against a live deployment and write report.md and report.json.")
    service = parser.add_argument_group("service")
    service.add_argument("--url", required=True, help="the service's base URL, e.g. http://127.0.0.1:8080")
    token = service.add_mutually_exclusive_group(required=True)
    token.add_argument("--token", help="the API bearer token")
    token.add_argument("--token-file", type=Path, help="a file holding the API bearer token")
    service.add_argument("--metrics-url",
                         help="the model's metrics, e.g. http://127.0.0.1:8002/metrics (checks 5 and 6 need it)")
    service.add_argument("--client-host",
                         help="the name of the host this kit runs on, for the report (this machine's name), "
                              "e.g. the caller's host when check 4 runs from there")
    service.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for one answer (300)")

    run = parser.add_argument_group("what to run")
    run.add_argument("--checks", type=parse_checks, default=ALL_CHECKS, help="which checks, e.g. 4,5,6 (all)")
    run.add_argument("--out", type=Path, required=True, help="folder for report.md and report.json")
    run.add_argument("--rows", type=Path, default=DEFAULT_ROWS,
                     help="the bench's labelled rows (JSONL, docs/acceptance.md) for checks 1-3 "
                          "(the bundled smoke rows, which decide nothing)")
    run.add_argument("--reference", type=Path, help="the bench's own predictions per row (JSONL), for check 1")
    run.add_argument("--n", type=_positive_int, default=MIN_LATENCY_N,
                     help=f"timed requests per latency shape ({MIN_LATENCY_N}; fewer is inconclusive)")
    restart = run.add_mutually_exclusive_group()
    restart.add_argument("--restart-command", help="shell command that restarts the service (check 3)")
    restart.add_argument("--restart-prompt", action="store_true",
                         help="wait for Enter while someone restarts the service (check 3)")
    run.add_argument("--restarts", type=_positive_int, default=1,
                     help="restarts in check 3, each followed by the rows again (1; the bench did 4)")
    run.add_argument("--restart-timeout", type=float, default=600.0,
                     help="seconds for the restart command, and for /health to answer 200 from a new model process "
                          "afterwards (600)")
    run.add_argument("--over-cap-body", type=Path, help="a JSON request body that exceeds the VRAM cap (check 6)")
    run.add_argument("--flood", type=_positive_int, default=64, help="concurrent requests for the 429 check (64)")
    run.add_argument("--flood-body", type=Path, help="the JSON request body each flood request sends (check 8)")

    judge = parser.add_argument_group("pass rules (checks 1-3 take the contract's figures, acceptance/pass_rules.py)")
    judge.add_argument("--max-p50-ms", type=float, help="check 4: most client-side p50 per shape (not judged)")
    judge.add_argument("--memory-tolerance-mib", type=float, default=512.0,
                       help="check 6: how far reserved memory may stay above the model's post-warm-up baseline: "
                            "its RELEASE_SLACK_MIB (512)")
    return parser


def parse_options(argv: list[str] | None = None) -> Options:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.token_file is not None:
        try:
            token = args.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            parser.error(f"--token-file {args.token_file}: {exc.strerror or exc}")
    else:
        token = args.token.strip()
    if not token:
        parser.error("the token is empty")
    return Options(
        url=args.url, token=token, metrics_url=args.metrics_url, out=args.out, rows=args.rows,
        reference=args.reference, checks=args.checks, n=args.n, restart_command=args.restart_command,
        restart_prompt=args.restart_prompt, restarts=args.restarts, restart_timeout=args.restart_timeout,
        over_cap_body=args.over_cap_body, flood=args.flood, flood_body=args.flood_body, max_p50_ms=args.max_p50_ms,
        memory_tolerance_mib=args.memory_tolerance_mib, timeout=args.timeout,
        client_host=args.client_host or platform.node(), client_host_given=args.client_host is not None)
