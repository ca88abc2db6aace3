"""The acceptance kit, run as operators run it, against the real CPU stack (fixture checkpoint, no VRAM)."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from devstack.process import free_port
from devstack.shim import ShimServer

from .conftest import SHIM_MAX_BODY_BYTES, SHIM_MAX_QUEUE, SHIM_TOKEN

pytestmark = pytest.mark.triton
REPO_ROOT = Path(__file__).resolve().parents[2]
ROWS = REPO_ROOT / "acceptance" / "data" / "smoke_rows.jsonl"
N = 3
FLOOD = 6
SHIM_ENV = {"INTERN_DECISION_API_TOKEN": SHIM_TOKEN, "INTERN_DECISION_MAX_QUEUE": str(SHIM_MAX_QUEUE),
            "INTERN_DECISION_MAX_BODY_BYTES": str(SHIM_MAX_BODY_BYTES)}
OPTIONS = [{"id": "a", "description": "The first way."}, {"id": "b", "description": "The second way."}]


class RestartableShim:
    """A shim on a fixed port that this test restarts when the kit's restart command asks for it.

    The command drops a request file and waits for an answer file; a watcher thread here stops the shim, starts
    a new one on the same port and answers once it is started (not yet ready: the kit waits for /health itself).
    """

    def __init__(self, triton, folder: Path):
        self._triton = triton
        self._folder = folder
        self._port = free_port()
        self.requested = folder / "restart-requested"
        self.done = folder / "restart-done"
        self.restarts = 0
        self.server = self._start()
        self.server.wait_ready(timeout=60)
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _start(self) -> ShimServer:
        log = self._folder / f"shim-{self.restarts}.log"
        return ShimServer(self._triton, SHIM_ENV, log, port=self._port).start()

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            if self.requested.exists():
                self.requested.unlink()
                self.server.stop()
                self.restarts += 1
                self.server = self._start()
                self.done.touch()

    @property
    def url(self) -> str:
        return self.server.url

    def command(self) -> str:
        requested, done = shlex.quote(str(self.requested)), shlex.quote(str(self.done))
        return f"touch {requested} && while [ ! -e {done} ]; do sleep 0.05; done && rm -f {done}"

    def close(self) -> None:
        self._stop.set()
        self._watcher.join()
        self.server.stop()


@pytest.fixture(scope="module")
def restartable_shim(triton, tmp_path_factory):
    shim = RestartableShim(triton, tmp_path_factory.mktemp("acceptance-shim"))
    try:
        yield shim
    finally:
        shim.close()


def write_json(path: Path, body: dict) -> Path:
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def kit_run(restartable_shim, triton, tmp_path_factory):
    folder = tmp_path_factory.mktemp("acceptance")
    token_file = folder / "token"
    token_file.write_text(SHIM_TOKEN + "\n", encoding="utf-8")
    # The fixture's fault triggers stand in for what the real model does under load: an OOM, a slow call.
    over_cap = write_json(folder / "over-cap.json", {"id": "over-cap", "state": {"__fixture_fault__": "oom"},
                                                     "question": "Which way?", "options": OPTIONS})
    slow = write_json(folder / "slow.json", {"id": "slow", "state": {"__fixture_fault__": {"sleep_seconds": 1.0}},
                                             "question": "Which way?", "options": OPTIONS})
    out = folder / "report"
    command = [sys.executable, "-m", "acceptance", "--url", restartable_shim.url, "--token-file", str(token_file),
               "--metrics-url", triton.metrics_url, "--rows", str(ROWS), "--n", str(N),
               "--restart-command", restartable_shim.command(), "--restart-timeout", "60",
               "--over-cap-body", str(over_cap), "--flood", str(FLOOD), "--flood-body", str(slow),
               "--out", str(out)]
    started = time.monotonic()
    completed = subprocess.run(command, cwd=REPO_ROOT, env=dict(os.environ), capture_output=True, text=True,
                               timeout=180)
    seconds = time.monotonic() - started
    assert (out / "report.json").is_file(), completed.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return completed, report, out, seconds


def check(report: dict, number: int) -> dict:
    return report["checks"][str(number)]


def test_every_check_has_a_status_and_the_exit_code_follows_failures(kit_run):
    completed, report, out, seconds = kit_run
    assert sorted(report["checks"]) == [str(n) for n in range(1, 9)]
    for number in range(1, 9):
        result = check(report, number)
        assert result["status"] in ("pass", "fail", "not_run"), result
        assert result["status"] == "pass" or result["reason"], result
    failed = any(result["status"] == "fail" for result in report["checks"].values())
    assert completed.returncode == (1 if failed else 0), completed.stderr
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert markdown.startswith("# Acceptance report") and "## 8." in markdown
    print(f"kit ran in {seconds:.1f} s")


def test_checks_the_cpu_stack_can_prove_pass(kit_run):
    _, report, _, _ = kit_run
    for number in (3, 4, 6, 7, 8):
        assert check(report, number)["status"] == "pass", check(report, number)


def test_vram_is_not_run_on_the_cpu(kit_run):
    _, report, _, _ = kit_run
    vram = check(report, 5)
    assert vram["status"] == "not_run" and "CPU" in vram["reason"]


def test_controls_count_every_row(kit_run):
    """The fixture's weights are random, so only the bookkeeping is asserted, not the accuracy."""
    _, report, _, _ = kit_run
    rows = sum(1 for line in ROWS.read_text(encoding="utf-8").splitlines() if line.strip())
    positive = check(report, 1)["numbers"]
    assert positive["rows"] == positive["scored"] == positive["overall"]["total"] == rows
    assert sum(counts["total"] for counts in positive["per_set"].values()) == rows
    assert sorted(positive["per_set"]) == ["everyday", "support"]
    assert 0 <= positive["overall"]["correct"] <= rows
    assert positive["overall"]["accuracy"] == positive["overall"]["correct"] / rows
    negative = check(report, 2)["numbers"]
    assert negative["rows"] == negative["scored"] == rows
    assert negative["follow"] + negative["stay"] + negative["other"] == rows


def test_stability_repeats_within_the_process_and_across_a_restart(kit_run, restartable_shim):
    _, report, _, _ = kit_run
    numbers = check(report, 3)["numbers"]
    assert numbers["within_process"]["label_flips"] == 0
    restart = numbers["across_restart"]
    assert restart["status"] == "pass", restart
    assert restart["label_flips"] == 0 and restart["facts_changed"] == {}
    assert restartable_shim.restarts == 1


def test_latency_measures_every_shape_with_n_requests(kit_run):
    _, report, _, _ = kit_run
    shapes = check(report, 4)["numbers"]["shapes"]
    assert len(shapes) == 4
    for shape in shapes.values():
        assert shape["requests"] == N + 1 and shape["non_200"] == 0
        assert shape["client_ms"]["n"] == shape["server_total_ms"]["n"] == N
    long_shape = shapes["16 criteria, ~3,900-token state"]
    assert long_shape["growth"]["reached"] and 3850 <= long_shape["input_tokens"][0] <= 3900


def test_over_cap_chunking_and_limits(kit_run):
    _, report, _, _ = kit_run
    over_cap = check(report, 6)["numbers"]
    assert over_cap["over_cap_reply"] == {"status": 503, "error_code": "out_of_memory", "envelope": True}
    assert over_cap["normal_request_status"] == 200
    chunking = check(report, 7)["numbers"]
    assert chunking["calls"] == 2 and chunking["questions_per_call"] == [16, 5] and chunking["mismatches"] == {}
    limits = check(report, 8)["numbers"]
    assert all(entry["status"] == 401 for entry in limits["unauthorized"].values())
    assert set(limits["flood"]["statuses"]) == {"200", "429"}
    assert limits["flood"]["busy_envelopes"] == limits["flood"]["statuses"]["429"]
