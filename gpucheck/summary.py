"""report.md: the steps, the latency table and the reference, from the report's data."""
from __future__ import annotations


def latency_rows(steps: dict) -> list:
    """One row per timed shape: tokens; predict() in process (with the kernels the server uses), its forward, with
    torch kernels and from CUDA graphs; the same request through the service at the client, at the shim and
    predict()'s forward inside Triton's stub; and what the stack adds (service minus in-process, at p50 and mean).
    The split says by itself whether time is lost inside predict()'s forward or around it; served_graphs, how the
    service's forwards ran while the row was timed (replayed or eager, from /health)."""
    data = {name: (steps.get(name) or {}).get("data", {}) for name in ("inprocess", "inprocess_torch", "service")}
    inprocess, without, service = (data[name].get("shapes", {}) for name in ("inprocess", "inprocess_torch", "service"))
    graphed = ((steps.get("graphs") or {}).get("data", {}).get("graphs") or {}).get("shapes", {})
    fitted = (steps.get("shapes") or {}).get("data", {}).get("shapes", {})
    rows = []
    for name, shape in fitted.items():
        if not shape.get("timed"):
            continue
        local, through = inprocess.get(name) or {}, service.get(name) or {}
        graphs = graphed.get(name) or {}
        row = {"shape": name, "title": shape.get("title"), "tokens": shape.get("tokens"),
               "calls": len(shape.get("tokens") or []),
               "inprocess_p50_ms": _stat(local, "predict", "p50"), "inprocess_mean_ms": _stat(local, "predict", "mean"),
               "inprocess_forward_p50_ms": _stat(local, "forward", "p50"),
               "inprocess_torch_p50_ms": _stat(without.get(name) or {}, "predict", "p50"),
               "graphs_exact_p50_ms": _stat(graphs.get("exact") or {}, "predict", "p50"),
               "graphs_bucketed_p50_ms": _stat(graphs.get("bucketed") or {}, "predict", "p50"),
               "service_p50_ms": _stat(through, "client", "p50"), "service_mean_ms": _stat(through, "client", "mean"),
               "service_p95_ms": _stat(through, "client", "p95"),
               "shim_p50_ms": _stat(through, "server", "p50"), "stub_forward_p50_ms": _stat(through, "forward", "p50"),
               "served_graphs": through.get("graphs")}
        for stat in ("p50", "mean"):
            a, b = row[f"service_{stat}_ms"], row[f"inprocess_{stat}_ms"]
            row[f"added_{stat}_ms"] = round(a - b, 2) if a is not None and b is not None else None
        rows.append(row)
    return rows


def _stat(entry: dict, series: str, stat: str):
    return (entry.get(series) or {}).get(stat)


def served_cell(graphs: dict | None) -> str:
    if not graphs:
        return "—"
    return f"{graphs['replayed']} / {graphs['eager']} ({graphs['mode']}){'' if graphs['caught_up'] else ' ?'}"


def _graphs_fact(facts: dict, step: str) -> str:
    return facts.get(f"cuda_graphs_after_{step}") or "not read"


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
    facts = report.get("facts") or {}
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
            "In-process: `predict()` for every call of the request, back to back, with the kernels the server uses; "
            "forward: the part of it in the model's forward; torch kernels: the same without flash-linear-attention "
            "and causal-conv1d; graphs: replayed from CUDA graphs (exact / bucketed). Service: the same request as "
            "`/decide/shared`, at the client, at the shim (`timing.total_seconds`) and the forward inside Triton's "
            "stub (`timing.inference_seconds`). Added: service minus in-process. Served from graphs: the service's "
            "forwards while the row was timed, replayed / eager, and the graphs' mode, from `/health` (? where "
            "`/health` had not counted them all within a refresh).",
            "",
            "| shape | tokens per call | in-process p50 / mean | forward p50 | torch kernels p50 | graphs p50 "
            "| service p50 / mean / p95 | shim p50 | forward in the stub p50 | added p50 / mean "
            "| served from graphs |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in rows:
            lines.append(
                f"| {row['title']} | {_cell(row['tokens'])} | {_cell(row['inprocess_p50_ms'])} / "
                f"{_cell(row['inprocess_mean_ms'])} | {_cell(row['inprocess_forward_p50_ms'])} | "
                f"{_cell(row['inprocess_torch_p50_ms'])} | {_cell(row['graphs_exact_p50_ms'])} / "
                f"{_cell(row['graphs_bucketed_p50_ms'])} | "
                f"{_cell(row['service_p50_ms'])} / {_cell(row['service_mean_ms'])} / {_cell(row['service_p95_ms'])} | "
                f"{_cell(row['shim_p50_ms'])} | {_cell(row['stub_forward_p50_ms'])} | "
                f"{_cell(row['added_p50_ms'])} / {_cell(row['added_mean_ms'])} | "
                f"{served_cell(row['served_graphs'])} |")
        lines += ["", f"Graphs, live from `/health`: after the service, {_graphs_fact(facts, 'service')}; after the "
                      f"acceptance, {_graphs_fact(facts, 'acceptance')}."]
    reference = report["reference"]
    lines += [
        "",
        f"Reference to beat ({reference['anchor']}): {reference['rtx4090_mean_ms']} ms mean "
        f"({reference['rtx4090_note']}); {reference['h200_cuda_graphs_ms']} ms ({reference['h200_note']}).",
    ]
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
