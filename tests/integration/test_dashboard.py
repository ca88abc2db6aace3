"""The dashboard against the real thing: after a short load that draws every kind of answer (200, 413, 422, 429,
503), every query of every panel returns series from a real Prometheus scraping the session's Triton and shim, and
every label a legend names is on each of them."""
from __future__ import annotations

import re
import time

import httpx
import pytest

from tests.unit.deploy_files import load_script

from .helpers import AUTH, SHIM_MAX_BODY_BYTES, decide, held_queue
from .prometheus import SCRAPE_SECONDS, SCRAPED

pytestmark = pytest.mark.triton
LEGEND_LABEL = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# What Grafana puts for $__rate_interval at a 1 s scrape interval and a short range: the test's stand-in.
RATE_INTERVAL = "30s"


def send_every_kind_of_answer(shim) -> list[int]:
    statuses = []
    with httpx.Client(base_url=shim.url, timeout=60) as http:
        statuses.append(http.post("/decide", json=decide(), headers=AUTH).status_code)
        statuses.append(http.post("/decide", content=b"x" * (SHIM_MAX_BODY_BYTES + 1),
                                  headers={**AUTH, "Content-Type": "application/json"}).status_code)
        statuses.append(http.post("/decide", json=decide(options=[]), headers=AUTH).status_code)
        statuses.append(http.post("/decide", json=decide(state={"__fixture_fault__": "oom"}),
                                  headers=AUTH).status_code)
        with held_queue(shim, 1.0):
            statuses.append(http.post("/decide", json=decide(), headers=AUTH).status_code)
        statuses.append(http.get("/health").status_code)
    return statuses


def targets(board: dict) -> list[tuple[str, dict]]:
    return [(panel["title"], target) for panel in board["panels"] if panel["type"] != "row"
            for target in panel["targets"]]


def test_every_panel_returns_series_with_its_legends_labels(prometheus, shim):
    board = load_script("deploy/grafana/dashboard.py").build()
    assert send_every_kind_of_answer(shim) == [200, 413, 422, 503, 429, 200]
    scrapes_after(prometheus, time.time(), ("triton", "shim"), 2)  # a rate needs two samples of a new series
    problems = []
    for title, target in targets(board):
        series = prometheus.query(target["expr"].replace("$__rate_interval", RATE_INTERVAL))
        if not series:
            problems.append(f"{title} [{target['refId']}]: no series for {target['expr']}")
        for labels in LEGEND_LABEL.findall(target.get("legendFormat", "")):
            missing = [one["metric"] for one in series if labels not in one["metric"]]
            if missing:
                problems.append(f"{title} [{target['refId']}]: legend label {labels!r} missing from {missing[:2]}")
    assert problems == [], "\n".join(problems)
    # the load's answers are in the series the panels read
    statuses = prometheus.values('intern_decision_shim_requests_total{route="/decide"}', ("status",))
    assert {("200",), ("413",), ("422",), ("429",), ("503",)} <= set(statuses)


def scrapes_after(prometheus, moment: float, jobs: tuple[str, ...], count: int, timeout: float = 20) -> None:
    """Until each job has `count` successful scrapes that started after moment (each seen: polled well within an
    interval)."""
    seen: dict[str, set[float]] = {job: set() for job in jobs}
    deadline = time.monotonic() + timeout
    while min(len(stamps) for stamps in seen.values()) < count:
        assert time.monotonic() < deadline, f"too few scrapes of {jobs} after {moment}: {seen}"
        for (job,), stamp in prometheus.values(SCRAPED, ("job",)).items():
            if job in seen and stamp > moment:
                seen[job].add(stamp)
        time.sleep(SCRAPE_SECONDS / 5)
