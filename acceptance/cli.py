"""python -m acceptance: run the checks, write DIR/report.md and DIR/report.json.

Exit status: 0 when every selected check passed, 1 when one failed, 3 when none failed but one was inconclusive
or not run, 2 on a usage error.
"""
from __future__ import annotations

import sys

from .options import parse_options
from .report import exit_code, headline, render_json, render_markdown
from .runner import log, run


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    report = run(options, progress=log)
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "report.json").write_text(render_json(report), encoding="utf-8")
    (options.out / "report.md").write_text(render_markdown(report), encoding="utf-8")
    print(f"{headline(report.summary())}: {report.verdict()}; report in {options.out / 'report.md'}",
          file=sys.stderr)
    return exit_code(report)
