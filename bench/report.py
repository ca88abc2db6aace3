"""Renders docs/benchmarks.md from bench/results/*.json (before.json: the code before protocol v2; after.json: now),
followed by the notes in bench/notes.md."""
from __future__ import annotations

import json
from pathlib import Path

BENCH = Path(__file__).resolve().parent
DOC = BENCH.parent / "docs" / "benchmarks.md"
LABELS = {"before": "before (protocol v1: one Triton request per call)",
          "after": "after (protocol v2: one Triton request per HTTP request)"}


def pair(figures: dict) -> str:
    return f"{figures['p50']:.2f} / {figures['p99']:.2f}"


def table(run: dict) -> list[str]:
    lines = [
        "| shape | calls | input tokens | floor p50 / p99 | Triton adds p50 / p99 | stack adds p50 / p99 | "
        "stack adds per call p50 / p99 | shim CPU per request |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, shape in run["shapes"].items():
        lines.append(f"| {name} | {shape['calls']} | {shape['input_tokens']} | {pair(shape['floor_ms'])} | "
                     f"{pair(shape['triton_adds_ms'])} | {pair(shape['stack_adds_ms'])} | "
                     f"{pair(shape['stack_adds_per_call_ms'])} | {shape['shim_cpu_ms_per_request']:.2f} |")
    return lines


def write_doc() -> None:
    runs = {path.stem: json.loads(path.read_text()) for path in sorted((BENCH / "results").glob("*.json"))}
    lines = [
        "# Benchmarks",
        "",
        "## What the shim and Triton add to a request, against the architecture's floor",
        "",
        "`bench/overhead.py` (how it measures is in its docstring). All times in ms; client, shim, tritonserver, "
        "the python backend stubs and the in-process model share the machine's cores.",
        "",
        "- *floor*: the request's body through a bare Starlette route to an echo python-backend model in the same "
        "Triton, one inference request, no work: the least this architecture can cost;",
        "- *Triton adds*: the calls sent straight to Triton with tritonclient, minus the same calls' in-process time, "
        "each outside the forward pass the model reports;",
        "- *stack adds*: the same for the request through the shim's `/decide/shared`: everything between a caller "
        "and `predict()`;",
        "- *shim CPU*: the shim process's CPU time per request (for one question, over a burst of requests).",
        "",
    ]
    for label in ("before", "after"):
        if label in runs:
            run = runs[label]
            lines += [f"### {LABELS[label]}", "", f"{run['rounds']} rounds after 2 warm-up rounds, on {run['machine']}.",
                      ""] + table(run) + [""]
    notes = BENCH / "notes.md"
    DOC.write_text("\n".join(lines) + ("\n" + notes.read_text() if notes.exists() else ""))


if __name__ == "__main__":
    write_doc()
