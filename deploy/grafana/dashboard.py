"""The operators' dashboard, written with Grafana's Python SDK (grafana-foundation-sdk) and generated into
deploy/grafana/intern-decision.json, which Compose provisions and Kubernetes ships; never edit the JSON by hand.

    python deploy/grafana/dashboard.py           # writes the JSON
    python deploy/grafana/dashboard.py --check   # exit 1 when the committed JSON differs from what this builds

Rows, read top to bottom: is it up, is it keeping up, where the time goes, the card, the alerts. A panel that shows
why an alert of docker/alerts.yml fires names it in its description ("Alert: <name>"); tests/integration/
test_dashboard.py runs every query against a real Prometheus.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

JSON_PATH = Path(__file__).with_name("intern-decision.json")
UID = "intern-decision"
# The provisioned datasource's uid (deploy/grafana/datasource.yaml); Kubernetes' Grafana names its own the same or
# the operator replaces it.
DATASOURCE = DataSourceRef(type_val="prometheus", uid="prometheus")
RATE = "$__rate_interval"  # Grafana's: at least four scrape intervals
MODEL = 'model="intern_decision"'
API = 'route!="/health"'  # the API's requests; /health is the balancers' and the probes'


def query(expr: str, legend: str, ref: str) -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DATASOURCE)


def graph(title: str, description: str, unit: str, *queries: tuple[str, str], width: int = 12):
    panel = timeseries.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE) \
        .height(8).span(width)
    for index, (expr, legend) in enumerate(queries):
        panel = panel.with_target(query(expr, legend, chr(ord("A") + index)))
    return panel


def big_number(title: str, description: str, unit: str, *queries: tuple[str, str], width: int = 6):
    panel = stat.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE).height(8) \
        .span(width)
    for index, (expr, legend) in enumerate(queries):
        panel = panel.with_target(query(expr, legend, chr(ord("A") + index)))
    return panel


def quantiles(series: str, by: str, selector: str = "") -> list[tuple[str, str]]:
    return [(f"histogram_quantile({q}, sum by (le, {by}) (rate({series}_bucket{{{selector}}}[{RATE}])))",
             f"p{round(q * 100)} {{{{{by}}}}}") for q in (0.5, 0.95, 0.99)]


def is_it_up() -> list:
    return [
        graph("Scrape targets up", "1 when Prometheus scrapes the process. Alert: InternDecisionTritonDown "
              "(job triton, Triton's metrics port: down, restarting or still loading the model). Alert: "
              "InternDecisionShimDown (job shim: the shim down, so the API too).", "none",
              ('up{job=~"triton|shim"}', "{{job}} {{instance}}"), width=8),
        graph("Model usable through the shim", "1 when the shim's last health check found the model usable. "
              "Alert: InternDecisionModelDown (0 for a minute: Triton not ready, not answering, or its python "
              "stub dead).", "none", ("intern_decision_shim_model_up", "{{instance}}"),
              ("count(intern_decision_shim_model_up == 1) or vector(0)", "replicas ready"), width=8),
        graph("Restarts in the last hour", "Starts of each process within the hour: the shim's (its process "
              "start time changed) and the model's (a new boot_id of its info series; the watchdog's heal is one).",
              "none",
              ('changes(process_start_time_seconds{job="shim"}[1h])', "shim {{instance}}"),
              ("count by (instance) (count by (instance, boot_id) (count_over_time(intern_decision_model_info[1h])))"
               " - 1", "model {{instance}}"), width=8),
    ]


def is_it_keeping_up() -> list:
    return [
        graph("Requests/s by route and status", "Every answer of the shim, refusals included.", "reqps",
              (f"sum by (route, status) (rate(intern_decision_shim_requests_total[{RATE}]))",
               "{{route}} {{status}}")),
        graph("Latency by route (shim, whole request)", "From the request's first byte to its answer, refusals "
              "included, from the shim's histogram.", "s",
              *quantiles("intern_decision_shim_request_seconds", "route", API)),
        graph("Queue", "Requests queued for the model's lock (at most MAX_QUEUE with the ones scoring), being "
              "handled, and waiting in Triton's own queue.", "none",
              ("sum by (instance) (intern_decision_shim_requests_queued)", "queued for the lock {{instance}}"),
              ("sum by (instance) (intern_decision_shim_requests_in_flight)", "in flight {{instance}}"),
              (f"sum by (instance) (nv_inference_pending_request_count{{{MODEL}}})", "Triton pending {{instance}}"),
              width=8),
        graph("Share refused busy (429)", "429s over the API's requests. Alert: InternDecisionHigh429Rate "
              "(over 10% for 10 minutes: the load is past one model's throughput at MAX_QUEUE).", "percentunit",
              (f'sum by (instance) (rate(intern_decision_shim_requests_total{{status="429"}}[{RATE}])) / '
               f"sum by (instance) (rate(intern_decision_shim_requests_total{{{API}}}[{RATE}]))", "429 {{instance}}"),
              width=8),
        graph("Share of server errors (5xx)", "5xx over the API's requests (each code: docs/operations.md's "
              "runbook). Alert: InternDecisionHigh5xxRate (over 5% for 5 minutes).", "percentunit",
              (f'sum by (instance) (rate(intern_decision_shim_requests_total{{status=~"5..", {API}}}[{RATE}])) / '
               f"sum by (instance) (rate(intern_decision_shim_requests_total{{{API}}}[{RATE}]))", "5xx {{instance}}"),
              width=8),
        graph("Connections busy", "Connections with a request begun and not answered, against MAX_CONNECTIONS. "
              "Alert: InternDecisionConnectionsNearlyFull (over 80% for 2 minutes: many slow clients, or sources "
              "holding heads open; past it, new connections are refused 503).", "none",
              ("max by (instance) (intern_decision_shim_connections_busy)", "busy {{instance}}"),
              ("max by (instance) (intern_decision_shim_connections_max)", "max {{instance}}"),
              width=24),
        graph("Refusals by bound", "Each refusal's status, one line each (what each means and what to do: "
              "docs/operations.md's runbook).", "reqps",
              (f'sum by (status) (rate(intern_decision_shim_requests_total{{status=~"4..|5.."}}[{RATE}]))',
               "{{status}}"),
              (f"sum(rate(intern_decision_shim_busy_total[{RATE}]))", "busy (429) counted at admission"),
              width=24),
    ]


def where_the_time_goes() -> list:
    per = f"[{RATE}]"
    return [
        graph("Mean time per request: shim, Triton's queue and compute, predict()", "The shim's whole request "
              "(the API's), Triton's queue and compute per inference request, and predict()'s forward per call "
              "(a request of n calls is n forwards).", "s",
              (f"sum(rate(intern_decision_shim_request_seconds_sum{{{API}}}{per})) / "
               f"sum(rate(intern_decision_shim_request_seconds_count{{{API}}}{per}))", "shim, whole request"),
              (f"sum(rate(nv_inference_queue_duration_us{{{MODEL}}}{per})) / "
               f"sum(rate(nv_inference_count{{{MODEL}}}{per})) / 1e6", "Triton queue"),
              (f"sum(rate(nv_inference_compute_infer_duration_us{{{MODEL}}}{per})) / "
               f"sum(rate(nv_inference_count{{{MODEL}}}{per})) / 1e6", "Triton compute"),
              (f"sum(rate(intern_decision_inference_seconds_sum{per})) / "
               f"sum(rate(intern_decision_inference_seconds_count{per}))", "predict() per call")),
        graph("predict() per call", "The model's time on one call, from its histogram.", "s",
              *quantiles("intern_decision_inference_seconds", "model")),
        graph("Calls per request and tokens per call", "How much each request asks of the model: calls a planned "
              "request sends (16 questions a call at most), and input tokens per call (MAX_TOKENS bounds it).",
              "none", *[(f"histogram_quantile({q}, sum by (le) (rate({series}_bucket[{RATE}])))", f"{what} p{p}")
                        for series, what in (("intern_decision_input_tokens", "tokens per call"),
                                             ("intern_decision_shim_calls_per_request", "calls per request"))
                        for q, p in ((0.5, 50), (0.95, 95))]),
        graph("Calls by outcome", "The model's calls, one line per outcome.", "cps",
              (f"sum by (outcome) (rate(intern_decision_calls_total{per}))", "{{outcome}}")),
    ]


def the_card() -> list:
    return [
        graph("Utilization", "Triton's GPU utilization per card; on a CPU machine its CPU's.", "percentunit",
              ('nv_gpu_utilization or label_replace(nv_cpu_utilization, "gpu_uuid", "cpu", "", "")',
               "{{instance}} {{gpu_uuid}}"), width=8),
        graph("Memory: reserved, allocated, peak and the baseline", "torch's reserved and allocated memory after "
              "the last call, the peak since the last release, and the baseline after the warm-up. The cap is "
              "INTERN_DECISION_VRAM_CAP_GIB (the table beside).", "bytes",
              ("intern_decision_gpu_memory_bytes", "{{kind}} {{instance}}"), width=8),
        graph("Out-of-memory calls (15 minutes)", "Calls that ran out of GPU memory (each a 503 out_of_memory). "
              "Alert: InternDecisionRepeatedOutOfMemory (3 or more in 15 minutes).", "none",
              ('sum by (instance) (increase(intern_decision_calls_total{outcome="out_of_memory"}[15m]))',
               "{{instance}}"), width=8),
        table.Panel().title("Pins and limits in force").description(
            "The model's info series: device, dtype, the VRAM cap (GiB, or uncapped), MAX_TOKENS, the revision and "
            "whether it is the contract's pin.").datasource(DATASOURCE).height(6).span(24).with_target(
            query('label_replace(max by (instance, device, dtype, vram_cap_gib, max_tokens, revision, pinned) '
                  '(intern_decision_model_info), "vram_cap_gib", "uncapped", "vram_cap_gib", "")',
                  "{{device}} {{vram_cap_gib}}", "A").instant().format("table")),
    ]


def the_alerts() -> list:
    firing = 'ALERTS{alertname=~"InternDecision.*", alertstate="%s"}'
    return [
        big_number("Alerts firing and pending", "docker/alerts.yml's alerts by state; Prometheus's /alerts page "
                   "names them. Each has a panel above that shows why: its description says \"Alert: <name>\".",
                   "none", (f"count({firing % 'firing'}) or vector(0)", "firing"),
                   (f"count({firing % 'pending'}) or vector(0)", "pending"), width=8),
        graph("Triton's failed requests (5 minutes)", "Requests Triton counts as failed without an answer from "
              "model.py, typically a dead python stub. Alert: InternDecisionTritonRequestFailures (3 or more in 5 "
              "minutes).", "none",
              (f"sum by (instance) (increase(nv_inference_request_failure{{{MODEL}}}[5m]))", "{{instance}}"),
              width=16),
    ]


ROWS = [("Is it up?", is_it_up), ("Is it keeping up?", is_it_keeping_up), ("Where the time goes", where_the_time_goes),
        ("The card", the_card), ("Alerts", the_alerts)]


def build() -> dict:
    """The dashboard as Grafana's JSON model."""
    board = dashboard.Dashboard("intern-decision").uid(UID).tags(["intern-decision"]).refresh("30s") \
        .time("now-1h", "now").timezone("utc").editable()
    ids = iter(range(1, 1000))
    for title, panels in ROWS:
        board = board.with_row(dashboard.Row(title).id(next(ids)))
        for panel in panels():
            board = board.with_panel(panel.id(next(ids)))
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        if JSON_PATH.read_text(encoding="utf-8") != render():
            print(f"{JSON_PATH.name} differs from what dashboard.py builds: run python deploy/grafana/dashboard.py",
                  file=sys.stderr)
            return 1
        return 0
    JSON_PATH.write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
