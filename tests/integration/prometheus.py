"""A real Prometheus for the integration tests: Debian's binary scraping the given targets every SCRAPE_SECONDS and
evaluating docker/alerts.yml, its data in a temporary folder; queried over its HTTP API."""
from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

from devstack.process import ManagedProcess, free_port
from tests.tools import required_tool

SCRAPE_SECONDS = 1
ALERTS = Path(__file__).resolve().parents[2] / "docker" / "alerts.yml"
# When each target's last successful scrape started: timestamp() of a bare selector (of `up == 1` it would be the
# query's own time, not the sample's).
SCRAPED = "timestamp(up) and on (job, instance) (up == 1)"


class Prometheus(ManagedProcess):
    """Debian's prometheus binary scraping the given targets every SCRAPE_SECONDS, with the alert rules."""

    def __init__(self, folder: Path, targets: dict[str, str]):
        self.port = free_port()
        config = folder / "prometheus.yml"
        jobs = [{"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in targets.items()]
        config.write_text(json.dumps({"global": {"scrape_interval": f"{SCRAPE_SECONDS}s",
                                                 "scrape_timeout": f"{SCRAPE_SECONDS}s",
                                                 "evaluation_interval": f"{SCRAPE_SECONDS}s"},
                                      "rule_files": [str(ALERTS)], "scrape_configs": jobs}))
        command = [required_tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
                   f"--web.listen-address=127.0.0.1:{self.port}"]
        super().__init__("prometheus", command, {}, folder / "prometheus.log", f"http://127.0.0.1:{self.port}/-/ready")

    def query(self, expression: str, at: float | None = None) -> list[dict]:
        parameters = {"query": expression, **({"time": f"{at:.3f}"} if at is not None else {})}
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(parameters)
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def values(self, expression: str, labels: tuple[str, ...], at: float | None = None) -> dict[tuple, float]:
        return {tuple(series["metric"].get(label, "") for label in labels): float(series["value"][1])
                for series in self.query(expression, at)}

    def wait_for_scrapes_after(self, moment: float, jobs: tuple[str, ...], timeout: float = 20) -> None:
        """Until every job has a successful scrape that started after moment."""
        deadline = time.monotonic() + timeout
        while True:
            scraped = self.values(SCRAPED, ("job",))
            if all(scraped.get((job,), 0) > moment for job in jobs):
                return
            assert time.monotonic() < deadline, f"no scrape of {jobs} after {moment}: {scraped}\n{self.log_text()}"
            time.sleep(0.2)
