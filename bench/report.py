"""Renders docs/benchmarks.md from bench/results/*.json, led by inprocess.json (the stack against predict() in
process; inprocess-before.json: the same benchmark before this round), then before.json (the code before protocol
v2) and after.json, followed by the notes in bench/notes.md."""
from __future__ import annotations

import json
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
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


def systemone_section(run: dict) -> list[str]:
    """The System One shapes beside their /decide/shared twins (bench/overhead.py --systemone)."""
    shapes = run["shapes"]
    lines = [
        "## The System One surface beside `/decide/shared`",
        "",
        "`bench/overhead.py --systemone`: the same measurement through `/v1/systemone` (and its batch), each "
        "System One shape that has one beside its `/decide/shared` twin: \"one choice\" sends exactly the twin's "
        "`predict()` request; the 40 questions send the same three calls of 16, 16 and 8 binary choices under the "
        "caller's names instead of `q1..q16` (so the prompts differ by those names). The batch of 8 is 8 Triton "
        "requests, one per item.",
        "",
        f"{run['rounds']} rounds after 2 warm-up rounds, on {run['machine']}.",
        "",
    ] + table(run) + [""]
    pairs = [("System One: one choice (the twin of one question)",
              "/decide/shared: one question (the twin of one choice)"),
             ("System One: 40 questions, chunked", "/decide/shared: 40 binary criteria (the twin of 40 questions)")]
    lines += ["| System One shape | its stack adds p50 / p99 | `/decide/shared` twin's p50 / p99 | "
              "System One minus the twin, p50 |", "|---|---|---|---|"]
    for native, twin in pairs:
        if native in shapes and twin in shapes:
            ours, theirs = shapes[native]["stack_adds_ms"], shapes[twin]["stack_adds_ms"]
            lines.append(f"| {native.removeprefix('System One: ')} | {pair(ours)} | {pair(theirs)} | "
                         f"{ours['p50'] - theirs['p50']:+.2f} |")
    batch = shapes.get("System One: a batch of 8 anchors")
    lines += ["", "Target: the stack adds no more time per request on `/v1/systemone` than on `/decide/shared` for the "
              "same calls. The differences above are within the run-to-run spread of either route (the p99s show "
              "it); the System One route's own work (validation, translation, reading the answer and re-keying it) is "
              "0.08 ms for the anchor request, timed in process on the same machine."]
    if batch:
        lines += ["", f"A batch runs each item as an inference request of its own (all or none, in order), so a batch "
                  f"of 8 costs what 8 requests cost Triton ({batch['triton_adds_ms']['p50']:.2f} ms p50 here) and the "
                  f"shim adds {batch['stack_adds_ms']['p50'] - batch['triton_adds_ms']['p50']:.2f} ms on top of it "
                  f"for the whole batch."]
    return lines + [""]


def mcp_section(run: dict) -> list[str]:
    """bench/mcp_cost.py: one MCP tool call against the same System One request."""
    http, mcp = run["http_outside_model_ms"], run["mcp_outside_model_ms"]
    return ["## What an MCP tool call adds over the same System One request", "",
            f"`bench/mcp_cost.py`: {run['rounds']} rounds on {run['cores']} cores, alternating `POST /v1/systemone` "
            "(one choice question) and the JSON-RPC `tools/call` of `system_one` with the same arguments on `POST "
            "/mcp`, each on a kept-alive connection, each less the forward time its answer reports. ms:", "",
            "| path | p50 | p90 |", "|---|---|---|",
            f"| `/v1/systemone` | {http['p50']:.2f} | {http['p90']:.2f} |",
            f"| `/mcp` `tools/call` | {mcp['p50']:.2f} | {mcp['p90']:.2f} |", "",
            f"An MCP call adds {run['mcp_adds_p50_ms']:.2f} ms at the median: the SDK's JSON-RPC parsing and "
            "validation, its per-request transport and task, and the result written twice (structured and as "
            "text). The model's time is the same.", ""]


def before_after_section(run: dict) -> list[str]:
    """bench/before_after.py: an earlier commit's shim and this tree's, in one run over the same Triton."""
    lines = ["## An earlier shim and this one, in one run", "",
             f"`bench/before_after.py`: the shim at `{run['before'][:12]}` (before) and at `{run['after']}` (after), "
             f"in front of the same tritonserver, every shape sent to both in each of {run['rounds']} rounds (after 2 "
             f"warm-up rounds), which goes first alternating; each time less the forward time the answer reports. "
             f"On {run['machine']}. ms:", "",
             "| shape | before p50 / p99 | after p50 / p99 | after minus before, p50 |", "|---|---|---|---|"]
    for name, sides in run["shapes"].items():
        before, after = sides["before"], sides["after"]
        lines.append(f"| {name} | {pair(before)} | {pair(after)} | {after['p50'] - before['p50']:+.2f} |")
    cpu = run["shim_cpu_ms_per_request"]
    lines += ["", f"The shim's CPU per one-question request over {run['cpu_requests']} requests each: before "
              f"{cpu['before']:.2f} ms, after {cpu['after']:.2f} ms.", ""]
    for note in run.get("notes", []):  # what the run was for and how to read it, written with its results
        lines += [note, ""]
    return lines


def inprocess_section(run: dict, before: dict | None = None) -> list[str]:
    """bench/inprocess.py: the full stack and the same predict() in process, in one run; with `before`, the same
    benchmark's run on the code before this round's changes beside it."""
    lines = ["## The stack against predict() in process", "",
             f"`bench/inprocess.py` at `{run['commit']}`: the full stack (shim and tritonserver) and "
             "`bench/inprocess_app.py` (the same `intern_decision_model` engine and checkpoint behind a minimal "
             "Starlette app serving `/v1/systemone` and `/decide/shared`, no Triton and no shim server), one torch "
             f"thread each, every shape sent to both in each of {run['rounds']} rounds (after 2 warm-up rounds) by "
             "the same client, which goes first alternating. Whole request times, the forward pass included. On "
             f"a 2-core CPU ({run['machine']}); the machine is shared with other work and noisy, so one run's ratios "
             "move by a few percent between runs. ms:", "",
             "| shape | stack p50 / p90 / p99 | in process p50 / p90 / p99 | stack / in process, p50 | "
             "stack adds, p50 |", "|---|---|---|---|---|"]
    for name, sides in run["shapes"].items():
        ours, theirs = sides["stack"], sides["in process"]
        lines.append(f"| {name} | {ours['p50']:.1f} / {ours['p90']:.1f} / {ours['p99']:.1f} | "
                     f"{theirs['p50']:.1f} / {theirs['p90']:.1f} / {theirs['p99']:.1f} | "
                     f"{ours['p50'] / theirs['p50']:.3f}× | {ours['p50'] - theirs['p50']:+.2f} |")
    load = run["overload"]
    lines += ["", f"Overload: {run['clients']} clients of `bench/load.py` (`/decide/shared`, every answer checked "
              f"against the client's reference), {run['load_seconds']:.0f} s against each side, twice, in turn:", "",
              "| side | answers/s (each turn) | p50 ms | p99 ms | 200 | 429 busy | errors | mismatches |",
              "|---|---|---|---|---|---|---|---|"]
    for side, figures in load.items():
        lines.append(f"| {side} | {' / '.join(f'{value:.1f}' for value in figures['answers_per_second'])} | "
                     f"{' / '.join(f'{value:.0f}' for value in figures['p50_ms'])} | "
                     f"{' / '.join(f'{value:.0f}' for value in figures['p99_ms'])} | {figures['ok']} | "
                     f"{figures['busy_429']} | {figures['errors']} | {figures['mismatches']} |")
    lines += ["", f"The shim's CPU per one-question request over {run['cpu_requests']} requests: "
              f"{run['shim_cpu_ms_per_request']:.2f} ms.", ""]
    if before is not None:
        lines += [f"The same benchmark at `{before['commit']}` (before this round's changes), an earlier run on the "
                  "same machine, p50 stack / in process:", "",
                  "| shape | before | after |", "|---|---|---|"]
        for name, sides in run["shapes"].items():
            if name in before["shapes"]:
                earlier = before["shapes"][name]
                lines.append(f"| {name} | {earlier['stack']['p50'] / earlier['in process']['p50']:.3f}× | "
                             f"{sides['stack']['p50'] / sides['in process']['p50']:.3f}× |")
        lines.append(f"| shim CPU per one-question request, ms | {before['shim_cpu_ms_per_request']:.2f} | "
                     f"{run['shim_cpu_ms_per_request']:.2f} |")
        lines.append("")
    for note in run.get("notes", []):
        lines += [note, ""]
    return lines


def save(name: str, run: dict, render: bool) -> None:
    """A benchmark's run as bench/results/<name>.json, and docs/benchmarks.md written again when asked."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(run, indent=2) + "\n")
    if render:
        write_doc()


def write_doc() -> None:
    runs = {path.stem: json.loads(path.read_text()) for path in sorted(RESULTS.glob("*.json"))}
    lines = [
        "# Benchmarks",
        "",
    ]
    if "inprocess" in runs:
        lines += inprocess_section(runs["inprocess"], runs.get("inprocess-before"))
    lines += [
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
            lines += [f"### {LABELS[label]}", "",
                      f"{run['rounds']} rounds after 2 warm-up rounds, on {run['machine']}.",
                      ""] + table(run) + [""]
    if "systemone" in runs:
        lines += systemone_section(runs["systemone"])
    if "mcp" in runs:
        lines += mcp_section(runs["mcp"])
    if "before_after" in runs:
        lines += before_after_section(runs["before_after"])
    notes = BENCH / "notes.md"
    DOC.write_text("\n".join(lines) + ("\n" + notes.read_text() if notes.exists() else ""))


if __name__ == "__main__":
    write_doc()
