"""The one-host, N-GPU stack as docker/multi_gpu.py renders it: one Triton and one shim per GPU, each Triton its
own card, each shim in its Triton's network namespace; HAProxy's configuration valid (`haproxy -c`) with the
balancing the design needs; Prometheus scraping every replica (`promtool check config`); config.pbtxt one
instance. HAProxy comes from Debian's package (scripts/install-haproxy.sh); a missing tool is a failure."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from devstack.haproxy import haproxy_binary, renderer
from tests.unit.deploy_files import DOCKER, REPO
from tests.unit.test_deploy_tools import promtool, run  # noqa: F401 - the fixture

GPUS = 3


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("multi-gpu")
    renderer().render(GPUS, out)
    return out


@pytest.fixture(scope="module")
def services(rendered) -> dict:
    return yaml.safe_load((rendered / "compose.yaml").read_text())["services"]


def test_one_triton_and_one_shim_per_gpu_each_triton_its_own_card(services):
    tritons = {name: service for name, service in services.items() if name.startswith("triton-")}
    shims = {name: service for name, service in services.items() if name.startswith("shim-")}
    assert len(tritons) == len(shims) == GPUS
    cards = [service["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] for service in tritons.values()]
    assert sorted(cards) == [[str(gpu)] for gpu in range(GPUS)]
    for gpu in range(GPUS):
        shim = shims[f"shim-{gpu}"]
        assert shim["network_mode"] == f"service:triton-{gpu}"
        assert shim["depends_on"] == {f"triton-{gpu}": {"condition": "service_healthy"}}
        assert shim["environment"]["INTERN_DECISION_TRITON_URL"] == "127.0.0.1:8000"
        assert "ports" not in shim and "ports" not in tritons[f"triton-{gpu}"]  # only HAProxy is published
        assert tritons[f"triton-{gpu}"]["networks"] == ["backend"]


def test_the_api_token_reaches_the_shims_alone_and_only_haproxy_and_prometheus_publish(services):
    for name, service in services.items():
        holds_token = "api_token" in service.get("secrets", [])
        assert holds_token == name.startswith("shim-"), name
    published = {name for name, service in services.items() if service.get("ports")}
    assert published == {"haproxy", "prometheus"}
    assert services["haproxy"]["ports"] == ["${SHIM_BIND:-127.0.0.1}:${SHIM_PORT:-8080}:8080"]


def test_haproxy_balances_on_least_connections_checks_health_and_retries_connection_failures_only(rendered):
    config = (rendered / "haproxy.cfg").read_text()
    assert re.search(r"^\s+balance leastconn$", config, re.M)
    assert re.search(r"^\s+option httpchk GET /health$", config, re.M)
    assert re.findall(r"^\s+retry-on (.+)$", config, re.M) == ["conn-failure"]
    servers = re.findall(r"^\s+server (\S+) (\S+)$", config, re.M)
    assert servers == [(f"shim-{gpu}", f"triton-{gpu}:8080") for gpu in range(GPUS)]
    seconds = int(re.search(r"timeout server (\d+)s", config).group(1))
    assert seconds > renderer().longest_request_seconds()


def test_haproxy_accepts_the_rendered_configuration(rendered):
    result = run([haproxy_binary(), "-c", "-f", str(rendered / "haproxy.cfg")])
    assert result.returncode == 0 and "Configuration file is valid" in result.stdout + result.stderr, result.stderr


def test_haproxy_check_is_real(tmp_path):
    broken = tmp_path / "haproxy.cfg"
    broken.write_text("defaults\n    mode http\nbackend b\n    balance nosuchalgorithm\n")
    assert run([haproxy_binary(), "-c", "-f", str(broken)]).returncode != 0


def test_prometheus_scrapes_every_replica(rendered, promtool):  # noqa: F811
    shutil.copy(DOCKER / "alerts.yml", rendered / "alerts.yml")
    config = yaml.safe_load((rendered / "prometheus.yml").read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}
    assert targets == {"triton": [f"triton-{gpu}:8002" for gpu in range(GPUS)],
                       "shim": [f"triton-{gpu}:9464" for gpu in range(GPUS)]}
    result = run([promtool, "check", "config", str(rendered / "prometheus.yml")])
    assert result.returncode == 0, result.stdout + result.stderr


def test_during_a_rotation_every_shim_and_only_the_shims_also_get_the_next_token(services):
    assert all("api_token_next" not in service.get("secrets", []) for service in services.values())
    rotating = renderer().compose_file(2, next_token=True)
    for name, service in rotating["services"].items():
        assert ("api_token_next" in service.get("secrets", [])) == name.startswith("shim-"), name
        if name.startswith("shim-"):
            assert service["environment"]["INTERN_DECISION_API_TOKEN_NEXT_FILE"] == "/run/secrets/api_token_next"
    assert rotating["secrets"]["api_token_next"] == {"file": "../secrets/api_token_next"}


def test_gpus_come_from_the_env_file(tmp_path):
    env = tmp_path / ".env"
    assert renderer().gpus_from_env_file(env) == 1
    env.write_text("HF_CACHE=/srv/hf\nGPUS=4\n")
    assert renderer().gpus_from_env_file(env) == 4
    with pytest.raises(ValueError):
        renderer().compose_file(0)


def test_config_pbtxt_keeps_exactly_one_instance_on_gpu_0():
    config = (REPO / "model_repository" / "intern_decision" / "config.pbtxt").read_text()
    assert config.count("instance_group") == 1
    groups = re.findall(r"^instance_group\s*\[(.*?)^\]", config, re.S | re.M)
    assert len(groups) == 1, config
    assert re.findall(r"count\s*:\s*(\d+)", groups[0]) == ["1"]
    assert re.search(r"gpus\s*:\s*\[\s*0\s*\]", groups[0]) and "KIND_GPU" in groups[0]
