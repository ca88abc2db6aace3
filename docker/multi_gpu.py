"""Render the one-host, N-GPU stack: one replica per GPU (a tritonserver that sees its card as GPU 0, and its own
shim in Triton's network namespace, like a pod), HAProxy in front of the shims, Prometheus scraping every replica.

    python docker/multi_gpu.py [--gpus N] [--out DIR] [--next-token]

N is GPUS in docker/.env (default 1) unless given; DIR defaults to docker/multi-gpu/. Writes DIR/compose.yaml,
DIR/haproxy.cfg and DIR/prometheus.yml; then `docker compose -f docker/multi-gpu/compose.yaml up -d --build`
(docs/scaling-out.md). Compose cannot give each of `replicas:` a card of its own, so the services are written out
per GPU here. compose.yaml is JSON, which is YAML. Standard library only.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from string import Template

DOCKER = Path(__file__).resolve().parent
TEMPLATE = DOCKER / "haproxy" / "haproxy.cfg.template"
SHIM_PORT = 8080
SHIM_METRICS_PORT = 9464
TRITON_METRICS_PORT = 8002
MAX_CALLS = 64  # MAX_DECISIONS' default: at most one call per ordering
CALL_TIMEOUT_SECONDS = 120  # the shim's default


def longest_request_seconds(max_calls: int = MAX_CALLS, call_timeout: float = CALL_TIMEOUT_SECONDS) -> int:
    """What one request may take at most once it reaches the lock: every call at its timeout."""
    return math.ceil(max_calls * call_timeout)


def haproxy_config(servers: list[tuple[str, str]], bind: str, *, timeout_request_seconds: int | None = None,
                   check_inter: str = "1s", maxconn: int = 4096, log_to_stdout: bool = True,
                   docker_dns: bool = False) -> str:
    """The template with one `server NAME ADDRESS` line per replica's shim. docker_dns: names are resolved by
    Docker's DNS, again whenever a container comes back with another address, and one not up yet starts down."""
    if not servers or len({name for name, _ in servers}) != len(servers):
        raise ValueError("at least one server, each with a name of its own")
    seconds = timeout_request_seconds or longest_request_seconds() + 60
    return Template(TEMPLATE.read_text()).substitute(
        maxconn=maxconn, bind=bind, check_inter=check_inter, timeout_request=f"{seconds}s",
        resolvers=("resolvers docker\n    nameserver dns 127.0.0.11:53\n    hold valid 10s\n\n" if docker_dns else ""),
        server_options=" resolvers docker init-addr last,libc,none" if docker_dns else "",
        log_global="    log stdout format raw local0 info" if log_to_stdout else "",
        log_defaults="    log global\n    option httplog" if log_to_stdout else "",
        servers="\n".join(f"    server {name} {address}" for name, address in servers))


def _triton(gpu: int) -> dict:
    return {
        "build": {"context": "../..", "dockerfile": "docker/triton/Dockerfile"},
        "image": "intern-decision-triton:local",
        "env_file": ["../triton.env"],
        "environment": {"INTERN_DECISION_DEVICE": "cuda",
                        "INTERN_DECISION_TRITON_API_KEY_FILE": "/run/secrets/triton_api_key"},
        "secrets": ["triton_api_key"],
        "volumes": [{"type": "bind", "source": "${HF_CACHE:-/srv/hf}", "target": "/hf", "read_only": True,
                     "bind": {"create_host_path": False}}],
        "shm_size": "1g",
        "networks": ["backend"],
        # Its card only, which it sees as GPU 0: config.pbtxt (one instance on GPU 0) is unchanged.
        "deploy": {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "device_ids": [str(gpu)], "capabilities": ["gpu"]}]}}},
        "healthcheck": {"test": ["CMD", "/opt/venv/bin/python", "/opt/intern-decision/healthcheck.py", "triton"],
                        "interval": "15s", "timeout": "10s", "retries": 3, "start_period": "600s"},
        # The watchdog exits 3 when the model stays unreachable: the restart is the heal.
        "restart": "on-failure:5",
        "stop_grace_period": "45s",
        "logging": {"driver": "json-file", "options": {"max-size": "50m", "max-file": "5"}},
    }


def _shim(gpu: int, next_token: bool) -> dict:
    shim = {
        "build": {"context": "../..", "dockerfile": "docker/shim/Dockerfile"},
        "image": "intern-decision-shim:local",
        "env_file": ["../shim.env"],
        "environment": {"INTERN_DECISION_API_TOKEN_FILE": "/run/secrets/api_token",
                        "INTERN_DECISION_TRITON_API_KEY_FILE": "/run/secrets/triton_api_key",
                        "INTERN_DECISION_TRITON_URL": "127.0.0.1:8000",
                        "INTERN_DECISION_TRITON_METRICS_URL": "http://127.0.0.1:8002/metrics",
                        "INTERN_DECISION_HOST": "0.0.0.0", "INTERN_DECISION_PORT": str(SHIM_PORT),
                        "INTERN_DECISION_METRICS_PORT": str(SHIM_METRICS_PORT)},
        "secrets": ["api_token", "triton_api_key"],
        # Triton's network namespace, as in a pod: the shim talks to its own Triton on 127.0.0.1 only.
        "network_mode": f"service:triton-{gpu}",
        "depends_on": {f"triton-{gpu}": {"condition": "service_healthy"}},
        "healthcheck": {"test": ["CMD", "python", "/opt/intern-decision/healthcheck.py", "shim"],
                        "interval": "15s", "timeout": "10s", "retries": 3, "start_period": "30s"},
        "restart": "on-failure:3",
        "stop_grace_period": "60s",  # DRAIN_SECONDS, then what it admitted finishes
        "logging": {"driver": "json-file", "options": {"max-size": "50m", "max-file": "5"}},
    }
    if next_token:  # during a rotation: the second accepted token (docs/operations.md, "Rotating the API token")
        shim["environment"]["INTERN_DECISION_API_TOKEN_NEXT_FILE"] = "/run/secrets/api_token_next"
        shim["secrets"].append("api_token_next")
    return shim


def compose_file(gpus: int, next_token: bool = False) -> dict:
    if gpus < 1:
        raise ValueError(f"GPUS must be at least 1, got {gpus}")
    services: dict = {}
    for gpu in range(gpus):
        services[f"triton-{gpu}"] = _triton(gpu)
        services[f"shim-{gpu}"] = _shim(gpu, next_token)
    services["haproxy"] = {
        "image": "haproxy:2.6",
        "volumes": ["./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro"],
        "ports": ["${SHIM_BIND:-127.0.0.1}:${SHIM_PORT:-8080}:8080"],
        "networks": ["backend", "edge"],
        "depends_on": [f"shim-{gpu}" for gpu in range(gpus)],
        "restart": "on-failure:3",
        "logging": {"driver": "json-file", "options": {"max-size": "50m", "max-file": "5"}},
    }
    services["prometheus"] = {
        "image": "prom/prometheus:v3.1.0",
        "command": ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus",
                    "--storage.tsdb.retention.time=30d"],
        "volumes": ["./prometheus.yml:/etc/prometheus/prometheus.yml:ro", "../alerts.yml:/etc/prometheus/alerts.yml:ro",
                    "prometheus-data:/prometheus"],
        "ports": ["127.0.0.1:${PROMETHEUS_PORT:-9090}:9090"],
        "networks": ["backend", "edge"],
        "restart": "on-failure:3",
        "logging": {"driver": "json-file", "options": {"max-size": "50m", "max-file": "5"}},
    }
    secrets = {"api_token": {"file": "../secrets/api_token"}, "triton_api_key": {"file": "../secrets/triton_api_key"}}
    if next_token:
        secrets["api_token_next"] = {"file": "../secrets/api_token_next"}
    return {
        "name": "intern-decision-multi-gpu",
        "services": services,
        "secrets": secrets,
        "networks": {"backend": {"internal": True}, "edge": {}},
        "volumes": {"prometheus-data": {}},
    }


def prometheus_config(gpus: int) -> str:
    def targets(port: int) -> str:
        return json.dumps([f"triton-{gpu}:{port}" for gpu in range(gpus)])

    return (
        "# Rendered by docker/multi_gpu.py: every replica's Triton and shim (the shim shares Triton's address).\n"
        "global:\n  scrape_interval: 15s\n  evaluation_interval: 15s\n\n"
        "rule_files:\n  - alerts.yml\n\n"
        "scrape_configs:\n"
        f"  - job_name: triton\n    static_configs:\n      - targets: {targets(TRITON_METRICS_PORT)}\n"
        f"  - job_name: shim\n    static_configs:\n      - targets: {targets(SHIM_METRICS_PORT)}\n")


def gpus_from_env_file(path: Path) -> int:
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, value = line.partition("=")
            if name.strip() == "GPUS" and value.strip():
                return int(value.strip())
    return 1


def render(gpus: int, out: Path, next_token: bool = False) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    servers = [(f"shim-{gpu}", f"triton-{gpu}:{SHIM_PORT}") for gpu in range(gpus)]
    files = {
        "compose.yaml": "# Rendered by docker/multi_gpu.py; do not edit (JSON is YAML).\n"
                        + json.dumps(compose_file(gpus, next_token), indent=2) + "\n",
        "haproxy.cfg": haproxy_config(servers, f"0.0.0.0:{SHIM_PORT}", docker_dns=True),
        "prometheus.yml": prometheus_config(gpus),
    }
    written = []
    for name, text in files.items():
        (out / name).write_text(text)
        written.append(out / name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="multi_gpu.py")
    parser.add_argument("--gpus", type=int, help="default: GPUS in docker/.env, else 1")
    parser.add_argument("--out", type=Path, default=DOCKER / "multi-gpu")
    parser.add_argument("--next-token", action="store_true",
                        help="during a rotation: the shims also accept docker/secrets/api_token_next")
    args = parser.parse_args(argv)
    gpus = args.gpus if args.gpus is not None else gpus_from_env_file(DOCKER / ".env")
    for path in render(gpus, args.out, args.next_token):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
