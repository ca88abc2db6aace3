"""The GPU host's deployment files hold their invariants: docker/compose.yaml, both Dockerfiles, .dockerignore,
the env file templates and the image constraints. Read as files; no Docker daemon needed."""
from __future__ import annotations

import ipaddress
import re
import subprocess
import tomllib

import pytest
import yaml

from tests.unit.deploy_files import (
    DOCKER,
    DOCKERFILES,
    REPO,
    copies,
    dockerignore_excludes,
    dockerignore_patterns,
    env_file_names,
    env_files,
    environment,
    interpolate,
    load_script,
    normalize,
    option_values,
    parse_dockerfile,
    pip_commands,
    ports,
    read_pins,
    requirement_names,
    secret_names,
    variables,
)

TOKEN = "INTERN_DECISION_API_TOKEN"
TRITON_KEY_SECRET = "triton_api_key"
API_TOKEN_SECRET = "api_token"
CONTRACT_PINS = {"torch": "2.10.0+cu128", "transformers": "5.17.0", "flash-linear-attention": "0.5.2",
                 "causal-conv1d": "1.7.0"}
TARGET_CARDS = ("8.0", "8.6", "8.9", "9.0")
SECRET_NAME = re.compile(r"(API_TOKEN|_KEY|SECRET|PASSWORD)(_FILE)?$")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def mentions(service: dict, text: str) -> bool:
    """Whether text appears anywhere in a service's definition (keys and values)."""
    return text in yaml.safe_dump(service)


# --- secrets and env files -----------------------------------------------------------------------------------

def test_the_six_services_exist(services):
    # pod: the pause container that holds the replica's network namespace (tests/unit/test_compose_lifecycle.py)
    assert set(services) == {"pod", "triton", "shim", "haproxy", "prometheus", "grafana"}


def test_no_env_file_is_shared_between_services(services):
    seen: dict[str, str] = {}
    for name, service in services.items():
        for path in env_files(service):
            assert path not in seen, f"{path} is the env file of both {seen[path]} and {name}"
            seen[path] = name
    assert env_files(services["triton"]) == ["triton.env"]
    assert env_files(services["shim"]) == ["shim.env"]
    assert env_files(services["prometheus"]) == [] and env_files(services["haproxy"]) == []
    assert env_files(services["grafana"]) == []
    assert env_files(services["pod"]) == []


def test_every_env_file_has_a_template_and_is_ignored_by_git(services):
    for service in services.values():
        for path in env_files(service):
            assert (DOCKER / (path + ".example")).is_file(), f"docker/{path}.example is missing"
            assert git_ignores(f"docker/{path}"), f"git must ignore docker/{path}"
    assert git_ignores("docker/.env")


def test_the_api_token_reaches_the_shim_alone(services):
    shim, triton = services["shim"], services["triton"]
    assert secret_names(shim).count(API_TOKEN_SECRET) == 1
    assert environment(shim)[TOKEN + "_FILE"] == f"/run/secrets/{API_TOKEN_SECRET}"
    for name, service in services.items():
        if name != "shim":
            assert API_TOKEN_SECRET not in secret_names(service), f"{name} mounts the API token"
            assert not mentions(service, TOKEN), f"{name} mentions {TOKEN}"
    assert not any(name.startswith(TOKEN) for name in env_file_names(DOCKER / "triton.env.example"))
    assert TOKEN not in " ".join(map(str, triton.get("command") or []))
    # Triton's start script refuses to run when the token reaches its environment anyway.
    start = load_script("docker/triton/start_triton.py")
    with pytest.raises(start.Refused, match=TOKEN):
        start.check_environment({TOKEN + "_FILE": "/run/secrets/api_token"})


def test_no_template_holds_a_secret(services):
    """Secrets are files under docker/secrets/, never values in an env file (so there is no placeholder to keep)."""
    for template in DOCKER.glob("*.example"):
        for name, value in env_file_names(template).items():
            assert not SECRET_NAME.search(name), f"{template.name} holds {name}"
    for service in services.values():
        for name, value in environment(service).items():
            if SECRET_NAME.search(name):
                assert name.endswith("_FILE") and value.startswith("/run/secrets/"), f"{name}={value}"


def test_secrets_are_files_kept_out_of_git_and_the_images(compose):
    secrets = compose["secrets"]
    assert set(secrets) == {API_TOKEN_SECRET, TRITON_KEY_SECRET}
    patterns = dockerignore_patterns()
    for secret in secrets.values():
        assert secret["file"].startswith("./secrets/")
        relative = "docker/" + secret["file"].removeprefix("./")
        assert git_ignores(relative), f"git must ignore {relative}"
        assert dockerignore_excludes(relative, patterns), f".dockerignore must leave out {relative}"
    tracked = subprocess.run(["git", "ls-files", "docker/secrets"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked in ([], ["docker/secrets/README.md"])


def test_tritons_api_key_is_one_secret_for_tritonserver_and_the_shim(services):
    assert secret_names(services["triton"]) == [TRITON_KEY_SECRET]
    assert TRITON_KEY_SECRET in secret_names(services["shim"])
    path = f"/run/secrets/{TRITON_KEY_SECRET}"
    assert environment(services["shim"])["INTERN_DECISION_TRITON_API_KEY_FILE"] == path
    assert environment(services["triton"]).get("INTERN_DECISION_TRITON_API_KEY_FILE", path) == path
    start = load_script("docker/triton/start_triton.py")
    assert start.DEFAULT_KEY_FILE == path
    argv = start.command("k" * 32, [])
    restricted = [arg for arg in argv if "restricted" in arg]
    assert restricted == [f"--http-restricted-api={','.join(start.RESTRICTED)}:triton-api-key={'k' * 32}"]
    assert {"inference", "model-repository", "logging", "shared-memory"} <= set(start.RESTRICTED)
    assert not {"health", "metadata"} & set(start.RESTRICTED)


# --- ports and networks --------------------------------------------------------------------------------------

def test_one_gpu_gets_the_balancer_in_front_published_on_localhost_only_by_default(services):
    # The shim is never published itself: HAProxy, with its per-source bounds, is in front of it as for N GPUs.
    assert "ports" not in services["shim"]
    published = {name for name, service in services.items() if service.get("ports")}
    assert published == {"haproxy", "prometheus", "grafana"}
    for local in ("prometheus", "grafana"):  # where the metrics are: this host alone
        assert [port.host_ip for port in ports(services[local], {"SHIM_BIND": "0.0.0.0"})] == ["127.0.0.1"]
    (port,) = ports(services["haproxy"], {})
    assert (port.host_ip, port.published, port.target) == ("127.0.0.1", "8080", "8080")
    # SHIM_BIND (documented in docker/.env.example) is the one way to publish it wider.
    (wider,) = ports(services["haproxy"], {"SHIM_BIND": "0.0.0.0"})
    assert wider.host_ip == "0.0.0.0"
    assert "SHIM_BIND" in env_file_names(DOCKER / ".env.example")
    renderer = load_script("docker/multi_gpu.py")
    assert services["haproxy"]["image"] == renderer.compose_file(1)["services"]["haproxy"]["image"]
    (mount,) = services["haproxy"]["volumes"]
    assert mount["source"] == "./haproxy/haproxy.cfg" and mount["bind"] == {"create_host_path": False}
    assert (DOCKER / mount["source"]).resolve() == renderer.SINGLE_GPU_BALANCER
    assert subprocess.run(["git", "check-ignore", "-q", "docker/haproxy/haproxy.cfg"], cwd=REPO).returncode == 0


def test_the_single_gpu_balancer_is_the_production_template_for_one_shim(tmp_path):
    renderer = load_script("docker/multi_gpu.py")
    env = tmp_path / "shim.env"
    env.write_text("INTERN_DECISION_CALL_TIMEOUT_SECONDS=30\nINTERN_DECISION_MAX_BODY_BYTES=4096\n")
    config = renderer.balancer_config(renderer.timing_from_env_file(env), renderer.max_body_bytes_from_env_file(env))
    assert re.findall(r"^\s+server (\S+) (\S+)$", config, re.M) == [("shim", "triton:8080")]
    assert re.search(r"^\s+timeout server (\d+)s$", config, re.M).group(1) == str(64 * 30 + 60)
    assert re.search(r"req.hdr_val\(content-length\) gt 4096$", config, re.M)
    assert "stick-table" in config and "resolvers docker" in config
    path = tmp_path / "haproxy.cfg"
    path.write_text(config)
    from devstack.haproxy import haproxy_binary
    result = subprocess.run([haproxy_binary(), "-c", "-f", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_published_port_is_bound_to_an_address(services):
    for name, service in services.items():
        for port in ports(service, {}):
            assert port.host_ip == "127.0.0.1", f"{name} publishes {port} beyond this host by default"


def test_tritons_ports_are_not_published_and_live_on_an_internal_network(compose, services):
    triton = services["triton"]
    assert "ports" not in triton and "ports" not in services["pod"]
    for service in services.values():
        for port in ports(service, {}):
            assert port.target not in ("8000", "8001", "8002")
    networks = compose["networks"]
    # The replica's namespace is the pod container's, on the internal network only, named triton there.
    assert services["pod"]["networks"] == {"backend": {"aliases": ["triton"]}}
    assert networks["backend"]["internal"] is True
    # The shim in Triton's namespace, as in a pod: Triton's API on 127.0.0.1 reaches it and nothing else.
    assert triton["network_mode"] == services["shim"]["network_mode"] == "service:pod"
    assert "networks" not in triton and "networks" not in services["shim"]
    # Behind HAProxy every connection comes from its address: no per-peer shares in the shim, HAProxy's per source.
    assert environment(services["shim"])["INTERN_DECISION_MAX_CONNECTIONS_PER_PEER"] == "0"
    assert "INTERN_DECISION_MAX_QUEUE_PER_PEER" not in environment(services["shim"])  # the contract's queue
    assert environment(services["shim"])["INTERN_DECISION_TRITON_URL"] == "127.0.0.1:8000"
    assert set(services["haproxy"]["networks"]) == {"backend", "edge"}
    # HAProxy's fixed address on the internal network's fixed subnet: the one whose X-Forwarded-For the shim reads.
    balancer = services["haproxy"]["networks"]["backend"]["ipv4_address"]
    assert environment(services["shim"])["INTERN_DECISION_BALANCER_ADDRESSES"] == balancer
    subnet = compose["networks"]["backend"]["ipam"]["config"][0]["subnet"]
    assert ipaddress.ip_address(balancer) in ipaddress.ip_network(subnet)
    assert set(services["prometheus"]["networks"]) >= {"backend"}


def test_the_shims_metrics_port_is_not_published_and_prometheus_scrapes_both(services):
    metrics_port = environment(services["shim"])["INTERN_DECISION_METRICS_PORT"]
    assert metrics_port == "9464"
    assert all(port.target != metrics_port for port in ports(services["shim"], {}))
    config = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    targets = {job["job_name"]: [t for static in job["static_configs"] for t in static["targets"]]
               for job in config["scrape_configs"]}
    assert targets["triton"] == ["triton:8002"]
    assert targets["shim"] == [f"triton:{metrics_port}"]  # the shim shares Triton's address
    assert environment(services["shim"])["INTERN_DECISION_TRITON_METRICS_URL"] == "http://127.0.0.1:8002/metrics"


def test_prometheus_loads_the_alert_rules_from_beside_its_config(services):
    config = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml"]
    mounts = services["prometheus"]["volumes"]
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts
    assert "./alerts.yml:/etc/prometheus/alerts.yml:ro" in mounts


def test_grafana_shows_the_generated_dashboard_from_the_compose_prometheus_view_only(services):
    grafana = services["grafana"]
    env = environment(grafana)
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer" and env["GF_AUTH_DISABLE_LOGIN_FORM"] == "true"
    mounts = {target: (source, mode) for source, target, mode in
              (mount.split(":") for mount in grafana["volumes"] if mount.count(":") == 2)}
    source, mode = mounts["/etc/grafana/dashboards/intern-decision.json"]
    assert (DOCKER / source).resolve() == REPO / "deploy" / "grafana" / "intern-decision.json" and mode == "ro"
    source, mode = mounts["/etc/grafana/provisioning"]
    assert (DOCKER / source).resolve() == REPO / "deploy" / "grafana" / "provisioning" and mode == "ro"
    assert set(grafana["networks"]) == {"backend", "edge"}  # Prometheus on the internal network, published on edge
    renderer = load_script("docker/multi_gpu.py")
    rendered = renderer.grafana_service("../deploy/grafana")
    assert (grafana["image"], env) == (rendered["image"], rendered["environment"])


def test_which_container_sees_which_secret(services):
    seen = {name: sorted(secret_names(service)) for name, service in services.items()}
    # Triton runs the checkpoint's own code: its key only, never the API token.
    assert seen == {"triton": [TRITON_KEY_SECRET], "shim": [API_TOKEN_SECRET, TRITON_KEY_SECRET], "haproxy": [],
                    "prometheus": [], "grafana": [], "pod": []}


# --- hardening, caches, the grace period ---------------------------------------------------------------------

def test_every_service_is_hardened_as_its_kubernetes_pod(services):
    for name, service in services.items():
        assert service.get("read_only") is True, f"{name}: a read-only root filesystem"
        assert service.get("cap_drop") == ["ALL"], f"{name}: no capabilities"
        assert service.get("security_opt") == ["no-new-privileges:true"], f"{name}: no privilege gained by exec"
        assert re.fullmatch(r"[0-9]+[mg]", str(service.get("mem_limit"))), f"{name}: a memory limit"
        assert any(str(mount).split(":")[0] == "/tmp" for mount in service.get("tmpfs", [])), f"{name}: /tmp"


def dockerfile_env(stages) -> dict[str, str]:
    """The last stage's ENV values (NAME=value pairs; values without spaces)."""
    env: dict[str, str] = {}
    for instruction in stages[-1].instructions:
        if instruction.keyword == "ENV":
            env.update(pair.split("=", 1) for pair in instruction.args.split() if "=" in pair)
    return env


def test_tritons_home_and_kernel_cache_are_writable_under_its_read_only_root(services):
    triton = services["triton"]
    image = dockerfile_env(parse_dockerfile(DOCKERFILES["triton"]))
    env = {**image, **environment(triton)}
    assert image["HOME"] == env["HOME"] and image["TRITON_CACHE_DIR"] == env["TRITON_CACHE_DIR"]
    tmpfs = {str(mount).split(":")[0]: str(mount) for mount in triton["tmpfs"]}
    assert env["HOME"] in tmpfs and "uid=10001" in tmpfs[env["HOME"]]  # the image's user (USER 10001) writes there
    assert env["TRITON_CACHE_DIR"].startswith(env["HOME"] + "/")  # OpenAI Triton's kernels, compiled at warm-up


def test_the_shims_stop_grace_period_is_the_drain_rule(services):
    rule = load_script("docker/multi_gpu.py")
    settings = rule.timing_from_env_file(DOCKER / "shim.env.example")
    assert services["shim"]["stop_grace_period"] == f"{rule.stop_grace_seconds(**settings)}s"
    assert rule.stop_grace_seconds(**settings) > rule.DRAIN_SECONDS + rule.longest_request_seconds()
    # Triton, stopped after the shim, keeps its own: above its --exit-timeout-secs and its watchdog's 5 s more.
    assert int(services["triton"]["stop_grace_period"].removesuffix("s")) > 15


def test_tritons_liveness_ping_is_allowed_one_calls_time_and_the_check_more(services):
    rule = load_script("docker/multi_gpu.py")
    settings = rule.timing_from_env_file(DOCKER / "shim.env.example")
    ping = rule.ping_timeout_seconds(settings.get("call_timeout", rule.CALL_TIMEOUT_SECONDS))
    # One call and a margin, never the longest request: behind a long request the ping says "busy" (wire/liveness.py).
    assert ping == 120 + rule.PING_MARGIN_SECONDS < rule.longest_request_seconds()
    triton = services["triton"]
    assert environment(triton)["INTERN_DECISION_PING_TIMEOUT_SECONDS"] == str(ping)  # the watchdog's and the check's
    check = int(triton["healthcheck"]["timeout"].removesuffix("s"))
    assert check == rule.liveness_check_timeout_seconds() > ping


# --- health, restarts, mounts --------------------------------------------------------------------------------

def test_healthchecks(services):
    for name in ("triton", "shim", "prometheus", "grafana"):
        check = services[name]["healthcheck"]
        assert check["test"][0] == "CMD" and not check.get("disable")
    assert services["triton"]["healthcheck"]["test"][-2:] == ["/opt/intern-decision/healthcheck.py", "triton"]
    assert services["shim"]["healthcheck"]["test"][-2:] == ["/opt/intern-decision/healthcheck.py", "shim"]
    # Loading and warming the model takes minutes: the grace period must cover it.
    assert int(services["triton"]["healthcheck"]["start_period"].rstrip("s")) >= 300
    assert services["shim"]["depends_on"]["triton"] == {"condition": "service_healthy"}
    healthcheck = load_script("docker/healthcheck.py")
    assert callable(healthcheck.ping_model), "a real call through the model: readiness misses a dead stub"


def test_restart_policies_give_up_after_a_few_failures(services):
    for name, service in services.items():
        policy = service.get("restart")
        deploy = (service.get("deploy") or {}).get("restart_policy")
        if deploy:
            assert deploy.get("condition") == "on-failure" and 1 <= int(deploy["max_attempts"]) <= 5, name
        else:
            match = re.fullmatch(r"on-failure:(\d+)", str(policy))
            assert match and 1 <= int(match.group(1)) <= 5, f"{name}: restart {policy!r} is not bounded"


def test_the_hf_cache_is_mounted_read_only(services):
    (mount,) = [volume for volume in services["triton"]["volumes"]
                if isinstance(volume, dict) and volume["target"] == "/hf"]
    assert mount["type"] == "bind" and mount["read_only"] is True
    assert mount["bind"]["create_host_path"] is False
    assert variables(mount["source"]) == {"HF_CACHE"}
    for name, service in services.items():
        for volume in service.get("volumes") or []:
            text = volume if isinstance(volume, str) else yaml.safe_dump(volume)
            if name != "triton":
                assert "HF_CACHE" not in text


def test_triton_gets_the_gpu(services):
    (device,) = services["triton"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"] and device["driver"] == "nvidia"
    assert environment(services["triton"])["INTERN_DECISION_DEVICE"] == "cuda"


def test_interpolation_needs_nothing_but_defaults(compose):
    """With no docker/.env at all, every ${...} in the file has a default (or is a documented requirement)."""
    text = (DOCKER / "compose.yaml").read_text()
    interpolate(text, {})
    documented = env_file_names(DOCKER / ".env.example")
    assert variables(text) <= set(documented), f"undocumented: {variables(text) - set(documented)}"


# --- Dockerfiles ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_images_run_as_a_non_root_user(image):
    final = parse_dockerfile(DOCKERFILES[image])[-1]
    users = [instruction.args for instruction in final.instructions if instruction.keyword == "USER"]
    assert users, f"the {image} image's final stage sets no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"the {image} image runs as {users[-1]}"
    last_user = max(i for i, ins in enumerate(final.instructions) if ins.keyword == "USER")
    assert all(ins.keyword != "RUN" for ins in final.instructions[last_user + 1:] if "useradd" in ins.args)


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_every_pip_install_uses_a_constraints_file_of_the_repository(image):
    stages = parse_dockerfile(DOCKERFILES[image])
    commands = pip_commands(stages)
    assert commands, f"no pip install found in the {image} Dockerfile"
    copied = {source.rsplit("/", 1)[-1]: source for sources, _ in copies(stages) for source in sources}
    for words in commands:
        constraints = option_values(words, "-c", "--constraint")
        assert constraints, f"pip without a constraints file: {' '.join(words)}"
        for name in constraints:
            source = copied.get(name.rsplit("/", 1)[-1])
            assert source and source.startswith("constraints/") and (REPO / source).is_file(), \
                f"{name} is not a constraints file copied from constraints/"
        if words[1] == "install" and "--no-deps" not in words:
            assert option_values(words, "--report"), "check_pins needs the report of every resolving install"


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_images_ship_the_wire_package(image):
    destinations = [destination for sources, destination in copies(parse_dockerfile(DOCKERFILES[image]))
                    if sources == ["wire"]]
    assert destinations, f"the {image} image does not copy wire/"
    model_package = [destination for sources, destination in copies(parse_dockerfile(DOCKERFILES[image]))
                     if sources == ["intern_decision_model"]]
    if image == "triton":
        assert model_package == ["/opt/venv/lib/python3.12/site-packages/intern_decision_model"]
        # Beside torch in the venv the python backend stub uses (the stub ignores PYTHONPATH).
        assert destinations == ["/opt/venv/lib/python3.12/site-packages/wire"]
    else:
        assert destinations == ["./wire"]
        assert model_package == [], "the shim image has no use for the model side's package"


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_everything_the_images_copy_is_in_the_build_context(image):
    patterns = dockerignore_patterns()
    for sources, _ in copies(parse_dockerfile(DOCKERFILES[image])):
        for source in sources:
            assert not dockerignore_excludes(source.rstrip("/"), patterns), f".dockerignore leaves out {source}"
            if source not in ("wire",):  # the shared wire package arrives with its own change
                assert (REPO / source).exists(), f"{source} does not exist"


def test_the_build_context_leaves_out_local_state():
    patterns = dockerignore_patterns()
    for path in (".venv/bin/python", ".git/HEAD", ".cache/dev-token", "tests/unit/test_guard.py",
                 ".pytest_cache/v/cache", "docker/.env", "docker/shim.env", "docker/triton.env",
                 "docker/secrets/api_token", "docker/secrets/triton_api_key", "shim/__pycache__/app.cpython-311.pyc",
                 "model_repository/intern_decision/1/__pycache__/model.cpython-312.pyc", "fixture_checkpoint/build.py",
                 "bench/overhead.py", "intern_decision_serve.egg-info/PKG-INFO", "README.md"):
        assert dockerignore_excludes(path, patterns), f".dockerignore lets {path} into the build context"
    for path in ("shim/app.py", "wire/__init__.py", "model_repository/intern_decision/config.pbtxt",
                 "model_repository/intern_decision/1/model.py", "intern_decision_model/engine.py",
                 "constraints/triton-image.txt", "docker/triton/start_triton.py", "docker/check_pins.py"):
        assert not dockerignore_excludes(path, patterns), f".dockerignore leaves out {path}"


def test_causal_conv1d_is_compiled_against_the_installed_torch_for_the_target_cards():
    stages = parse_dockerfile(DOCKERFILES["triton"])
    (build,) = [stage for stage in stages if stage.name == "causal-conv1d"]
    assert build.base == "runtime", "the build stage must start from the venv that holds torch"
    text = " ".join(f"{i.keyword} {i.args}" for i in build.instructions)
    (wheel,) = [words for words in pip_commands([build]) if words[1] == "wheel"]
    assert "--no-build-isolation" in wheel and "causal-conv1d" in wheel
    assert "CAUSAL_CONV1D_FORCE_BUILD=TRUE" in text
    (arch_list,) = re.findall(r'ARG TORCH_CUDA_ARCH_LIST="([^"]+)"', text)
    assert arch_list.split(";") == list(TARGET_CARDS)
    assert "check_cuda_archs.py" in text
    final = stages[-1]
    assert final.name is None and final.base == "runtime"
    final_text = " ".join(f"{i.keyword} {i.args}" for i in final.instructions)
    assert "smoke_check.py" in final_text and "python -I" in final_text


def test_the_triton_image_keeps_nvidias_entrypoint_and_starts_through_the_start_script():
    final = parse_dockerfile(DOCKERFILES["triton"])[-1]
    assert not [i for i in final.instructions if i.keyword == "ENTRYPOINT"]
    (cmd,) = [i.args for i in final.instructions if i.keyword == "CMD"]
    assert "start_triton.py" in cmd


# --- constraints ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["triton-image.txt", "shim-image.txt"])
def test_constraints_are_exact_pins(name):
    pins = read_pins(REPO / "constraints" / name)
    assert len(pins) > 10


def test_the_triton_image_pins_the_contracts_production_stack():
    pins = read_pins(REPO / "constraints" / "triton-image.txt")
    for name, version in CONTRACT_PINS.items():
        assert pins[name] == version
    assert pins["torchvision"].endswith("+cu128")
    assert int(pins["numpy"].split(".")[0]) < 2, "Triton's python backend stub needs numpy<2"
    direct = requirement_names(DOCKER / "triton" / "requirements.txt")
    direct += requirement_names(DOCKER / "triton" / "requirements-cu128.txt")
    assert set(direct) <= set(pins)
    assert requirement_names(DOCKER / "triton" / "requirements-cu128.txt") == ["torch", "torchvision"]


def test_the_shim_images_requirements_are_the_pyprojects_shim_extra():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    extra = [normalize(re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0])
             for requirement in pyproject["project"]["optional-dependencies"]["shim"]]
    direct = requirement_names(DOCKER / "shim" / "requirements.txt")
    assert sorted(direct) == sorted(extra)
    pins = read_pins(REPO / "constraints" / "shim-image.txt")
    assert set(direct) <= set(pins)
    assert int(pins["numpy"].split(".")[0]) < 2, "the shim image runs the numpy line CI tests"


def git_ignores(path: str) -> bool:
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO).returncode == 0
