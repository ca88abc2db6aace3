"""One caller through HAProxy at its production bounds over two replicas (the real shim server over a model of fixed
time each): MAX_QUEUE × replicas requests in flight from one address are never refused by the balancer nor the shims
(bench/fleet.py measures the same for answers per second)."""
from __future__ import annotations

from bench.fleet import fleet, one_caller
from shim.settings import ShimSettings


def test_a_lone_caller_filling_every_replicas_queue_is_never_refused(tmp_path):
    replicas = 2
    with fleet(replicas, call_seconds=0.02, folder=tmp_path) as url:
        report = one_caller(url, ShimSettings.max_queue * replicas, seconds=1.5)
    assert report["errors"] == [] and report["refused"] == 0, report
    assert report["answered"] >= replicas * ShimSettings.max_queue, report
