"""What `docker compose` would do with a replica over its life, read from the files it would run (docker/compose.yaml
and the N-GPU file docker/multi_gpu.py renders; no Docker daemon here):

- healing never strands the shim: Triton and the shim join a network namespace held by a pause container, as a
  pod's is, so that Triton restarted by its watchdog comes back in the namespace where the shim still is (a
  namespace of Triton's own is a new one after each restart, the shim left in the old with loopback only);
- `docker compose stop` never cuts a long request: Compose stops a service only after every service that depends on
  it, so the shim must be the first of the replica to stop (it drains for its whole grace period, the drain rule)
  while Triton still scores and HAProxy still forwards its answers; HAProxy stops softly after it."""
from __future__ import annotations

import re

import pytest
import yaml

from tests.unit.deploy_files import DOCKER, load_script

RENDERER = load_script("docker/multi_gpu.py")
GPUS = 2


def single_gpu() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]


def multi_gpu(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("multi-gpu")
    RENDERER.render(GPUS, out)
    return yaml.safe_load((out / "compose.yaml").read_text())["services"]


@pytest.fixture(scope="module", params=["compose.yaml", "multi-gpu"])
def stack(request, tmp_path_factory) -> tuple[dict, list[tuple[str, str, str]]]:
    """The services, and each replica's (pod, triton, shim) names."""
    if request.param == "compose.yaml":
        return single_gpu(), [("pod", "triton", "shim")]
    return multi_gpu(tmp_path_factory), [(f"pod-{gpu}", f"triton-{gpu}", f"shim-{gpu}") for gpu in range(GPUS)]


def dependencies(service: dict) -> set[str]:
    """What Compose starts before a service and stops after it: depends_on, and the service whose namespace it joins."""
    raw = service.get("depends_on") or []
    found = set(raw if isinstance(raw, list) else raw.keys())
    mode = service.get("network_mode", "")
    if mode.startswith("service:"):
        found.add(mode.removeprefix("service:"))
    return found


def stop_waves(services: dict) -> list[set[str]]:
    """Compose's stop order: a service stops once every service that depends on it has stopped."""
    dependents = {name: {other for other, service in services.items() if name in dependencies(service)}
                  for name in services}
    stopped: set[str] = set()
    waves = []
    while len(stopped) < len(services):
        wave = {name for name in services if name not in stopped and dependents[name] <= stopped}
        assert wave, f"a dependency cycle among {set(services) - stopped}"
        waves.append(wave)
        stopped |= wave
    return waves


def seconds(duration: str) -> int:
    value, unit = re.fullmatch(r"(\d+)(s|m)", duration).groups()
    return int(value) * (60 if unit == "m" else 1)


def test_the_replicas_namespace_belongs_to_a_pause_container_that_triton_and_the_shim_both_join(stack):
    services, replicas = stack
    for pod, triton, shim in replicas:
        assert services[triton]["network_mode"] == f"service:{pod}"
        assert services[shim]["network_mode"] == f"service:{pod}"
        holder = services[pod]
        # A holder that runs nothing: no model, no healthcheck, no watchdog, nothing that exits to heal.
        assert holder["image"] == RENDERER.POD_IMAGE and "pause" in holder["image"]
        assert "network_mode" not in holder and "command" not in holder and "healthcheck" not in holder
        assert "build" not in holder and "secrets" not in holder and "volumes" not in holder
        assert f"service:{triton}" not in {service.get("network_mode") for service in services.values()}


def test_haproxy_and_prometheus_reach_the_replica_by_the_holders_name_on_the_internal_network(stack):
    services, replicas = stack
    for pod, triton, _ in replicas:
        # The name HAProxy's server lines and Prometheus's targets use (triton, triton-N) is the holder's alias.
        assert services[pod]["networks"] == {"backend": {"aliases": [triton]}}
        assert "networks" not in services[triton]


def test_compose_stops_the_shim_first_and_what_its_answers_need_after_it(stack):
    services, replicas = stack
    waves = stop_waves(services)
    when = {name: index for index, wave in enumerate(waves) for name in wave}
    for pod, triton, shim in replicas:
        # The shim drains first: Triton scores the request holding the lock, HAProxy forwards every answer.
        assert when[shim] < when["haproxy"], waves
        assert when[shim] < when[triton] < when[pod], waves
        assert dependencies(services[shim]) >= {"haproxy", triton, pod}
    assert "depends_on" not in services["haproxy"]


def test_each_stop_is_given_its_time(stack):
    services, replicas = stack
    for _, triton, shim in replicas:
        assert seconds(services[shim]["stop_grace_period"]) == RENDERER.stop_grace_seconds()  # the drain rule
        assert seconds(services[triton]["stop_grace_period"]) > 15  # --exit-timeout-secs=10 and its watchdog
    # HAProxy's soft stop (no new connections, the open ones answered), beyond Docker's default of 10 s; by then
    # every shim has drained and exited, so what is left are the last answers on their way out.
    haproxy = services["haproxy"]
    assert haproxy["stop_signal"] == "SIGUSR1"
    assert seconds(haproxy["stop_grace_period"]) == seconds(RENDERER.HAPROXY_STOP_GRACE) > 10
