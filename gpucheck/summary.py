"""report.md: the steps, the latency table and the reference, from the report's data."""
from __future__ import annotations


def latency_rows(steps: dict) -> list:
    """One row per timed shape: tokens, predict() in-process (with the kernels the server uses), the same request
    through the service, and what the stack adds (service minus in-process, at p50 and mean)."""
    inprocess = (steps.get("inprocess") or {}).get("data", {}).get("shapes", {})
    without = (steps.get("inprocess_torch") or {}).get("data", {}).get("shapes", {})
    service = (steps.get("service") or {}).get("data", {}).get("shapes", {})
    fitted = (steps.get("shapes") or {}).get("data", {}).get("shapes", {})
    rows = []
    for name, shape in fitted.items():
        if not shape.get("timed"):
            continue
        local = (inprocess.get(name) or {}).get("predict", {})
        torch_only = (without.get(name) or {}).get("predict", {})
        through = (service.get(name) or {}).get("client", {})
        row = {"shape": name, "title": shape.get("title"), "tokens": shape.get("tokens"),
               "calls": len(shape.get("tokens") or []),
               "inprocess_p50_ms": local.get("p50"), "inprocess_mean_ms": local.get("mean"),
               "inprocess_torch_p50_ms": torch_only.get("p50"),
               "service_p50_ms": through.get("p50"), "service_mean_ms": through.get("mean"),
               "service_p95_ms": through.get("p95")}
        for stat in ("p50", "mean"):
            a, b = row[f"service_{stat}_ms"], row[f"inprocess_{stat}_ms"]
            row[f"added_{stat}_ms"] = round(a - b, 2) if a is not None and b is not None else None
        rows.append(row)
    return rows


def _cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, list):
        return " + ".join(str(item) for item in value)
    return str(value)


def render_markdown(report: dict) -> str:
    steps = {step["name"]: step for step in report["steps"]}
    lines = [
        f"# GPU check ({report['mode']} mode): {report.get('headline') or report['result'].upper()}",
        "",
        f"Started {report['started']}, {report['wall_seconds']} s of a {report['deadline_seconds']:.0f} s deadline.",
        "",
        "| step | status | seconds | detail |",
        "|---|---|---|---|",
    ]
    for step in report["steps"]:
        detail = (step["detail"] or "").replace("|", "\\|").replace("\n", " ")
        seconds = "" if step["seconds"] is None else f"{step['seconds']:.1f}"
        lines.append(f"| {step['name']} | {step['status']} | {seconds} | {detail} |")
    rows = latency_rows(steps)
    if rows:
        lines += [
            "",
            "## Latency (ms)",
            "",
            "In-process: `predict()` for every call of the request, back to back, with the kernels the server uses. "
            "Service: the same request as `/decide/shared` through the shim and Triton, timed at the client. "
            "Added: service minus in-process.",
            "",
            "| shape | tokens per call | in-process p50 / mean | in-process, torch kernels p50 "
            "| service p50 / mean / p95 | added p50 / mean |",
            "|---|---|---|---|---|---|",
        ]
        for row in rows:
            lines.append(
                f"| {row['title']} | {_cell(row['tokens'])} | {_cell(row['inprocess_p50_ms'])} / "
                f"{_cell(row['inprocess_mean_ms'])} | {_cell(row['inprocess_torch_p50_ms'])} | "
                f"{_cell(row['service_p50_ms'])} / {_cell(row['service_mean_ms'])} / {_cell(row['service_p95_ms'])} | "
                f"{_cell(row['added_p50_ms'])} / {_cell(row['added_mean_ms'])} |")
    reference = report["reference"]
    lines += [
        "",
        f"Reference to beat ({reference['anchor']}): {reference['rtx4090_mean_ms']} ms mean "
        f"({reference['rtx4090_note']}); {reference['h200_cuda_graphs_ms']} ms ({reference['h200_note']}).",
    ]
    facts = report.get("facts") or {}
    lines += ["", kernels_line(facts), "", fla_line(facts)]
    if facts:
        lines += ["", "## Facts", ""]
        lines += [f"- {key}: {value}" for key, value in facts.items() if key != "latency"]
    lines += diagnosis_lines(report["steps"])
    lines += ["", "Files: report.json (everything above and each step's data); gpucheck-files.tar.gz: the logs of each "
              "step, tritonserver-<config>.log, shim.log, nvidia-smi.txt (GPU), acceptance/ (the kit's report).", ""]
    return "\n".join(lines)


def kernels_line(facts: dict) -> str:
    """Which linear-attention path served and which one the in-process figures used; in bold when the check had to
    allow the slow path for the model to start."""
    served, inprocess = facts.get("linear_attention_served"), facts.get("linear_attention_inprocess")
    line = f"Linear attention: served on the {served or '(not served)'} path; in-process figures on the " \
           f"{inprocess or '(not measured)'} path."
    if facts.get("slow_kernels_allowed"):
        return (f"**{line} The check set INTERN_DECISION_ALLOW_SLOW_KERNELS=1: without causal-conv1d the model "
                f"refuses to serve on CUDA, and these figures are not the production kernels'.**")
    return line


def fla_line(facts: dict) -> str:
    """In bold: whether flash-linear-attention served, its warm-up, and how long the first in-process call took."""
    served = facts.get("linear_attention_served") in ("fast", "mixed")
    return (f"**flash-linear-attention {'served' if served else 'did not serve'}; warm-up: "
            f"{facts.get('fla_warmup') or 'not run'}; first in-process call "
            f"{facts.get('fla_first_inprocess_call_seconds', '—')} s.**")


def diagnosis_lines(steps: list) -> list[str]:
    """For each step that did not pass: the command that re-runs it alone, and the tails of the logs it wrote."""
    lines = []
    for step in steps:
        found = (step.get("data") or {}).get("diagnosis")
        if not found:
            continue
        lines += ["", f"## {step['name']}: {step['status']}", "", f"Re-run it alone: `{found['rerun']}`", ""]
        if found.get("environment"):
            lines += [f"- {name}: `{value}`" for name, value in found["environment"].items()] + [""]
        for name, text in (found.get("log_tails") or {}).items():
            lines += [f"Last lines of `{name}`:", "", "```", text, "```", ""]
    return lines
