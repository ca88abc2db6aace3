"""The one-host, N-GPU stack as docker/multi_gpu.py renders it: one Triton and one shim per GPU, each Triton its
own card, each shim and its Triton in the namespace of the replica's pause container; HAProxy's configuration
valid (`haproxy -c`) with the balancing the design needs and its bounds on clients; which container sees which
secret; every service hardened, Triton's kernel cache writable; the shims' grace period the drain rule; Prometheus
scraping every replica (`promtool check config`); config.pbtxt one instance. HAProxy comes from Debian's package
(scripts/install-haproxy.sh); a missing tool is a failure."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from devstack.haproxy import haproxy_binary, renderer
from tests.tools import run
from tests.unit.deploy_files import DOCKER, REPO

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
        # Both in the namespace of the replica's pause container (tests/unit/test_compose_lifecycle.py).
        assert shim["network_mode"] == tritons[f"triton-{gpu}"]["network_mode"] == f"service:pod-{gpu}"
        assert shim["depends_on"][f"triton-{gpu}"] == {"condition": "service_healthy"}
        assert shim["environment"]["INTERN_DECISION_TRITON_URL"] == "127.0.0.1:8000"
        assert "ports" not in shim and "ports" not in tritons[f"triton-{gpu}"]  # only HAProxy is published
        assert services[f"pod-{gpu}"]["networks"] == {"backend": {"aliases": [f"triton-{gpu}"]}}


def test_which_container_sees_which_secret(services):
    for gpu in range(GPUS):
        assert services[f"triton-{gpu}"]["secrets"] == ["triton_api_key"]  # the checkpoint's code runs there
        assert services[f"shim-{gpu}"]["secrets"] == ["api_token", "triton_api_key"]
    assert "secrets" not in services["haproxy"] and "secrets" not in services["prometheus"]
    assert "secrets" not in services["grafana"]


def test_every_service_is_hardened_as_its_kubernetes_pod(services):
    for name, service in services.items():
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"] and service["security_opt"] == ["no-new-privileges:true"], name
        assert re.fullmatch(r"[0-9]+[mg]", service["mem_limit"]), name
        assert any(mount.split(":")[0] == "/tmp" for mount in service["tmpfs"]), name


def test_tritons_home_and_kernel_cache_are_writable_under_its_read_only_root(services):
    for gpu in range(GPUS):
        triton = services[f"triton-{gpu}"]
        env = triton["environment"]
        tmpfs = {mount.split(":")[0]: mount for mount in triton["tmpfs"]}
        assert env["HOME"] in tmpfs and "uid=10001" in tmpfs[env["HOME"]]  # the image's user writes there
        assert env["TRITON_CACHE_DIR"].startswith(env["HOME"] + "/")


def test_the_shims_grace_period_is_the_drain_rule_of_their_settings(tmp_path):
    module = renderer()
    assert module.stop_grace_seconds() == 5 + 64 * 120 + module.GRACE_MARGIN_SECONDS
    (tmp_path / "shim.env").write_text("INTERN_DECISION_DRAIN_SECONDS=8\nINTERN_DECISION_CALL_TIMEOUT_SECONDS=30\n"
                                       "INTERN_DECISION_MAX_DECISIONS=16\nINTERN_DECISION_MAX_QUEUE=4\n")
    timing = module.timing_from_env_file(tmp_path / "shim.env")
    assert timing == {"drain_seconds": 8.0, "call_timeout": 30.0, "max_calls": 16}
    out = tmp_path / "out"
    module.render(2, out, timing=timing)
    services = yaml.safe_load((out / "compose.yaml").read_text())["services"]
    grace = 8 + 16 * 30 + module.GRACE_MARGIN_SECONDS
    assert [services[f"shim-{gpu}"]["stop_grace_period"] for gpu in range(2)] == [f"{grace}s"] * 2
    assert re.search(r"timeout server (\d+)s", (out / "haproxy.cfg").read_text()).group(1) == str(16 * 30 + 60)
    assert module.timing_from_env_file(tmp_path / "missing.env") == {}


def test_the_api_token_reaches_the_shims_alone_and_only_haproxy_prometheus_and_grafana_publish(services):
    for name, service in services.items():
        holds_token = "api_token" in service.get("secrets", [])
        assert holds_token == name.startswith("shim-"), name
    published = {name for name, service in services.items() if service.get("ports")}
    assert published == {"haproxy", "prometheus", "grafana"}
    # Behind HAProxy every connection comes from its address: no per-peer share in the shims, HAProxy's per source.
    shims = [service["environment"] for name, service in services.items() if name.startswith("shim-")]
    assert all(env["INTERN_DECISION_MAX_CONNECTIONS_PER_PEER"] == "0" for env in shims)
    assert not any("INTERN_DECISION_MAX_QUEUE_PER_PEER" in env for env in shims)  # the contract's queue
    assert services["haproxy"]["ports"] == ["${SHIM_BIND:-127.0.0.1}:${SHIM_PORT:-8080}:8080"]
    # The shims read X-Forwarded-For from HAProxy's fixed address alone (the model's turns per caller).
    balancer = services["haproxy"]["networks"]["backend"]["ipv4_address"]
    assert all(service["environment"]["INTERN_DECISION_BALANCER_ADDRESSES"] == balancer
               for name, service in services.items() if name.startswith("shim-"))


def test_haproxy_balances_on_least_connections_checks_health_and_retries_connection_failures_only(rendered):
    config = (rendered / "haproxy.cfg").read_text()
    assert re.search(r"^\s+balance leastconn$", config, re.M)
    assert re.search(r"^\s+option httpchk GET /health$", config, re.M)
    assert re.findall(r"^\s+retry-on (.+)$", config, re.M) == ["conn-failure"]
    servers = re.findall(r"^\s+server (\S+) (\S+)$", config, re.M)
    assert servers == [(f"shim-{gpu}", f"triton-{gpu}:8080") for gpu in range(GPUS)]
    seconds = int(re.search(r"timeout server (\d+)s", config).group(1))
    assert seconds > renderer().longest_request_seconds()


def seconds_of(duration: str) -> float:
    value, unit = re.fullmatch(r"([0-9]+)(ms|s)", duration).groups()
    return int(value) / (1000 if unit == "ms" else 1)


def test_haproxy_bounds_clients_in_seconds_and_only_the_server_timeout_is_long(rendered):
    config = (rendered / "haproxy.cfg").read_text()
    timeouts = dict(re.findall(r"^\s+timeout (\S+) (\S+)$", config, re.M))
    # A client that owes the request line, headers or body is cut within seconds, never after the longest request.
    assert seconds_of(timeouts["client"]) <= 10 and seconds_of(timeouts["http-request"]) <= 10
    wait = re.findall(r"^\s+http-request wait-for-body time (\S+)$", config, re.M)
    assert len(wait) == 1 and seconds_of(wait[0]) <= 2
    assert seconds_of(timeouts["server"]) > renderer().longest_request_seconds()
    assert re.search(r'^\s+http-error status 408 content-type application/json string ".*request_timeout', config,
                     re.M)


def test_haproxy_judges_replicas_by_health_alone_and_skips_gone_clients(rendered):
    config = (rendered / "haproxy.cfg").read_text()
    (default_server,) = re.findall(r"^\s+default-server (.+)$", config, re.M)
    assert "mark-down" not in default_server and "sudden-death" not in default_server
    on_error = re.findall(r"on-error (\S+)", default_server)
    assert on_error in ([], ["fastinter"])  # an answer at most brings the next check forward
    assert re.search(r"fastinter \d+ms", default_server)
    assert re.search(r"^\s+option abortonclose$", config, re.M)


def test_haproxys_checks_tolerate_one_slow_answer(rendered):
    config = (rendered / "haproxy.cfg").read_text()
    (default_server,) = re.findall(r"^\s+default-server (.+)$", config, re.M)
    # A check unanswered within `timeout check` fails; one failure (a slow /health) never takes a replica out.
    assert int(re.search(r"\bfall (\d+)", default_server).group(1)) >= 3
    timeouts = dict(re.findall(r"^\s+timeout (\S+) (\S+)$", config, re.M))
    assert 2 <= seconds_of(timeouts["check"]) <= 5


def test_haproxy_bounds_each_source_and_each_shim(rendered):
    config = (rendered / "haproxy.cfg").read_text()
    module = renderer()
    (table, posts_table) = re.findall(r"^\s+stick-table (.+)$", config, re.M)
    assert "conn_cur" in table and f"http_req_rate({module.RATE_PERIOD})" in table
    assert table.startswith("type ipv6 ") and posts_table.startswith("type ipv6 ")
    # A source is an IPv4 address or an IPv6 /64 (one holder has a /64 whole, a million addresses), and its
    # connections past its share are refused as they connect, before they can hold a slot of maxconn silent.
    assert re.search(r"^\s+tcp-request connection track-sc0 src,ipmask\(32,64\)$", config, re.M)
    fleet = module.fleet_bounds(GPUS)
    assert fleet["per_source_connections"] == module.PER_SOURCE_CONNECTIONS + 32 * (GPUS - 1)
    assert re.search(rf"^\s+maxconn {fleet['maxconn']}$", config, re.M) and fleet["maxconn"] >= 4096
    assert fleet["maxconn"] > module.TOLERATED_SOURCES * fleet["per_source_connections"]
    assert re.search(rf"^\s+tcp-request connection reject if {{ sc0_conn_cur gt {fleet['per_source_connections']} }}$",
                     config, re.M)
    assert re.search(rf"^\s+acl over_rate sc0_http_req_rate gt {module.PER_SOURCE_REQUESTS}$", config, re.M)
    # A source presenting a token: more requests per period than the replicas can answer, scaled with them.
    token_rate = module.TOKEN_REQUESTS_PER_REPLICA * GPUS
    assert re.search(rf"^\s+acl over_token_rate sc0_http_req_rate gt {token_rate}$", config, re.M)
    assert re.search(r"if over_rate !has_authorization or over_token_rate$", config, re.M)
    # POSTs in flight per source, counted before their body is waited for: every replica's queue (a lone caller
    # may fill them all, as the contract lets it fill one).
    assert re.search(r"^\s+http-request track-sc1 src,ipmask\(32,64\) table posts_in_flight if post$", config, re.M)
    assert re.search(rf"if post {{ sc1_trackers gt {32 * GPUS} }}$", config, re.M)
    assert config.index("track-sc1") < config.index("http-request wait-for-body")
    # Every refusal of the frontend: the envelope, the shim's code for its status, the connection closed.
    returns = re.findall(r"^\s+http-request return status (\d+) (.+)$", config, re.M)
    codes = {status: re.search(r'\\"code\\":\\"(\w+)\\"', rest).group(1) for status, rest in returns}
    assert codes == {"429": "busy", "401": "unauthorized", "413": "request_too_large"}
    assert all("hdr Connection close" in rest for _, rest in returns)
    assert all("hdr Retry-After 1" in rest for status, rest in returns if status == "429")
    # Refused before the body is waited for.
    assert config.index("http-request return") < config.index("http-request wait-for-body")
    (default_server,) = re.findall(r"^\s+default-server (.+)$", config, re.M)
    assert f"maxconn {module.SERVER_MAXCONN}" in default_server
    timeouts = dict(re.findall(r"^\s+timeout (\S+) (\S+)$", config, re.M))
    assert seconds_of(timeouts["queue"]) <= 10


def test_haproxys_log_names_the_path_never_the_query_string(rendered):
    config = (rendered / "haproxy.cfg").read_text()
    assert "option httplog" not in config  # its format logs the whole request line (%r)
    (log_format,) = re.findall(r'^\s+log-format "(.+)"$', config, re.M)
    fetches = re.findall(r"%(?:\{[^}]*\})?(\w+)", log_format)
    assert "HP" in fetches and not {"r", "HU", "HQ"} & set(fetches)  # the path; never the line, URI or query


def test_the_body_limit_at_the_balancer_is_the_shims(tmp_path):
    module = renderer()
    env = tmp_path / "shim.env"
    env.write_text("INTERN_DECISION_MAX_BODY_BYTES=2048\n")
    assert module.timing_from_env_file(env) == {}
    assert module.max_body_bytes_from_env_file(env) == 2048
    assert module.max_body_bytes_from_env_file(tmp_path / "missing.env") == module.MAX_BODY_BYTES
    module.render(1, tmp_path / "out", max_body_bytes=2048)
    assert re.search(r"req.hdr_val\(content-length\) gt 2048$", (tmp_path / "out" / "haproxy.cfg").read_text(), re.M)


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
