"""Render the one-host, N-GPU stack: one replica per GPU (a tritonserver that sees its card as GPU 0, and its own
shim, both in a network namespace held by the replica's pause container, like a pod), HAProxy in front of the
shims, Prometheus scraping every replica.

    python docker/multi_gpu.py [--gpus N] [--out DIR] [--next-token]
    python docker/multi_gpu.py --balancer-only    # HAProxy's configuration for docker/compose.yaml (one GPU)

N is GPUS in docker/.env (default 1) unless given; DIR defaults to docker/multi-gpu/. Writes DIR/compose.yaml,
DIR/haproxy.cfg and DIR/prometheus.yml; then `docker compose -f docker/multi-gpu/compose.yaml up -d --build`
(docs/scaling-out.md). Compose cannot give each of `replicas:` a card of its own, so the services are written out
per GPU here. compose.yaml is JSON, which is YAML. Standard library only.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from string import Template

DOCKER = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCKER.parent))  # the shim's own settings, standard library only like this file
from shim.settings import ShimSettings  # noqa: E402

TEMPLATE = DOCKER / "haproxy" / "haproxy.cfg.template"
SHIM_PORT = 8080
SHIM_METRICS_PORT = 9464
TRITON_METRICS_PORT = 8002
MAX_CALLS = ShimSettings.max_decisions  # at most one call per ordering
CALL_TIMEOUT_SECONDS = ShimSettings.call_timeout_seconds
DRAIN_SECONDS = ShimSettings.drain_seconds
# The liveness ping's margin over one call: the ping's own empty execute and the model's metric update (queued).
PING_MARGIN_SECONDS = 5
CHECK_MARGIN_SECONDS = 15  # healthcheck.py triton around its ping (liveness_check_timeout_seconds)
# HAProxy's bounds on a client (docs/scaling-out.md, "The balancer's bounds"): seconds, never the longest request.
HTTP_REQUEST_TIMEOUT = "5s"  # the request line and headers
BODY_WAIT = "1s"  # from the headers to the whole body, or its first buffer (tune.bufsize, 16 KiB); else 408 here
CLIENT_TIMEOUT = "5s"  # a client silent this long while it owes bytes
FASTINTER = "250ms"  # checks while a replica changes state, and the next one after a 5xx
# A check answered later than this is a failed check; `fall 3` in a row take a replica out, so one slow /health (an
# event loop busy for a few seconds) never does.
TIMEOUT_CHECK = "3s"
# Per source address (docs/scaling-out.md, "The balancer's bounds"; docs/operations.md, "Callers and the queue"):
# connections open at once, and requests per period of a source that presents no token.
PER_SOURCE_CONNECTIONS = 64
PER_SOURCE_REQUESTS = 600
RATE_PERIOD = "10s"
# A source presenting a token may send, per period and per replica, more than one replica can answer (its quickest
# request, one call of a short state, takes about 10 ms on the card: at most 1,000 per 10 s), so the rate never caps
# what the fleet gives one caller.
TOKEN_REQUESTS_PER_REPLICA = 1000
# POSTs in flight at once from one source: every replica's MAX_QUEUE, so that a lone caller can fill the fleet's
# queues as the contract lets it fill one; the shims' turns keep it from starving another caller.
MAX_QUEUE = ShimSettings.max_queue
# HAProxy's connections at once, at least; and how many sources holding their whole share of connections it
# tolerates with room to spare (the hostile matrix's 16).
MAXCONN = 4096
TOLERATED_SOURCES = 16
# The internal network's fixed subnet and HAProxy's fixed address on it: the shims read the client from
# X-Forwarded-For only when it comes from there (BALANCER_ADDRESSES), for the model's turns per caller.
BACKEND_SUBNET = "172.30.8.0/24"
BALANCER_ADDRESS = "172.30.8.2"
# Requests at once on one shim (below its MAX_CONNECTIONS, 256; above its MAX_QUEUE, 32, so that its own 429 busy
# still answers a full replica), and how long a request may wait here for one when every shim is at it.
SERVER_MAXCONN = 64
TIMEOUT_QUEUE = "5s"
MAX_BODY_BYTES = ShimSettings.max_body_bytes  # a declared Content-Length above it is refused here
# HAProxy's HTTP log with the path alone (%HP) where `option httplog` logs the whole request line (%r): a query
# string, a token pasted into a URL among others, never reaches the log.
LOG_FORMAT = ("%ci:%cp [%tr] %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %tsc %ac/%fc/%bc/%sc/%rc %sq/%bq "
              "%HM %{+Q}HP %HV")
# The drain rule's margin (stop_grace_seconds): the shim's answers and exit, and in a pod Triton's own stop after the
# shim (--exit-timeout-secs=10, its watchdog 5 s more), which shares the pod's grace period.
GRACE_MARGIN_SECONDS = 30
# The shim's settings the rule and HAProxy's server timeout read, by the names of docker/shim.env.
TIMING_SETTINGS = {"drain_seconds": "INTERN_DECISION_DRAIN_SECONDS",
                   "call_timeout": "INTERN_DECISION_CALL_TIMEOUT_SECONDS",
                   "max_calls": "INTERN_DECISION_MAX_DECISIONS"}
BODY_SETTING = "INTERN_DECISION_MAX_BODY_BYTES"


def longest_request_seconds(max_calls: int = MAX_CALLS, call_timeout: float = CALL_TIMEOUT_SECONDS) -> int:
    """What one request may take at most once it reaches the lock: every call at its timeout. Its calls go to Triton
    as one inference whose timeout is CALL_TIMEOUT_SECONDS per call (shim/port/triton.py)."""
    return math.ceil(max_calls * call_timeout)


def ping_timeout_seconds(call_timeout: float = CALL_TIMEOUT_SECONDS) -> int:
    """How long a ping through the model may wait (Triton's liveness: the watchdog in Compose, the liveness probe in
    Kubernetes): one call's time and a margin, whatever MAX_DECISIONS is.

        ping timeout = CALL_TIMEOUT_SECONDS + PING_MARGIN_SECONDS   (120 + 5 = 125 s)

    The model runs one inference at a time, so a ping sent during a long request waits behind it and may time out;
    the model counts each call on Triton's metrics port as it ends, and a ping that timed out while that count moved
    says "busy", which is alive (wire/liveness.py). A working model ends a call within CALL_TIMEOUT_SECONDS, so a
    ping that waits this long while no call ends has found a hung model, after about two minutes rather than the
    longest request's 64 x 120 s. A dead model process is caught at once: its pings fail with an error."""
    return math.ceil(call_timeout) + PING_MARGIN_SECONDS


def liveness_check_timeout_seconds(call_timeout: float = CALL_TIMEOUT_SECONDS) -> int:
    """The timeout of the check that runs the ping (Compose's healthcheck, Kubernetes' livenessProbe): the ping,
    then the readiness request and the two reads of the call count (4 s each at most) and the interpreter's start."""
    return ping_timeout_seconds(call_timeout) + CHECK_MARGIN_SECONDS


def stop_grace_seconds(drain_seconds: float = DRAIN_SECONDS, call_timeout: float = CALL_TIMEOUT_SECONDS,
                       max_calls: int = MAX_CALLS) -> int:
    """The drain rule: the time a stopping shim is given between SIGTERM and SIGKILL (Compose's stop_grace_period,
    Kubernetes' terminationGracePeriodSeconds), so that nothing it admitted is lost (docs/operations.md, "Draining").

        grace = DRAIN_SECONDS + MAX_DECISIONS x CALL_TIMEOUT_SECONDS + GRACE_MARGIN_SECONDS

    For DRAIN_SECONDS after SIGTERM the shim still admits (the balancer is taking it out). Then every request still
    waiting for the lock, MAX_QUEUE at most, is answered 503 `draining` with Retry-After at once, so the queue adds
    nothing however full it is; only the request holding the lock runs to its end, and that is one inference of at
    most MAX_DECISIONS calls, each bounded by CALL_TIMEOUT_SECONDS (longest_request_seconds). The margin covers the
    answers, the exit and, in a pod, Triton's own stop after the shim."""
    return math.ceil(drain_seconds + longest_request_seconds(max_calls, call_timeout) + GRACE_MARGIN_SECONDS)


def max_body_bytes_from_env_file(path: Path) -> int:
    """MAX_BODY_BYTES from the shim's env file, the shim's default where it is not set: HAProxy refuses a body
    declared above it before a shim sees it."""
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, value = line.partition("=")
            if name.strip() == BODY_SETTING and value.strip():
                return int(value.strip())
    return MAX_BODY_BYTES


def timing_from_env_file(path: Path) -> dict:
    """stop_grace_seconds' and longest_request_seconds' arguments from the shim's env file (docker/shim.env):
    those it sets, the shim's defaults for the rest."""
    values: dict = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    timing: dict = {}
    for argument, name in TIMING_SETTINGS.items():
        if values.get(name):
            timing[argument] = int(values[name]) if argument == "max_calls" else float(values[name])
    return timing


def fleet_bounds(replicas: int) -> dict[str, int]:
    """HAProxy's bounds for `replicas` shims (docs/operations.md, "Callers and the queue"): one source may hold every
    replica's queue in POSTs and the connections they take plus PER_SOURCE_CONNECTIONS' room for its other requests;
    maxconn stays above TOLERATED_SOURCES sources holding their whole share, with room for everyone else."""
    posts = MAX_QUEUE * replicas
    connections = PER_SOURCE_CONNECTIONS + MAX_QUEUE * (replicas - 1)
    return {"per_source_posts": posts, "per_source_connections": connections,
            "per_source_token_requests": TOKEN_REQUESTS_PER_REPLICA * replicas,
            "maxconn": max(MAXCONN, TOLERATED_SOURCES * connections + MAXCONN // 4)}


def haproxy_config(servers: list[tuple[str, str]], bind: str, *, timeout_request_seconds: int | None = None,
                   check_inter: str = "1s", fastinter: str = FASTINTER, maxconn: int | None = None,
                   log_to_stdout: bool = True, docker_dns: bool = False,
                   per_source_connections: int | None = None,
                   per_source_requests: int = PER_SOURCE_REQUESTS, rate_period: str = RATE_PERIOD,
                   per_source_posts: int | None = None, per_source_token_requests: int | None = None,
                   server_maxconn: int = SERVER_MAXCONN, timeout_queue: str = TIMEOUT_QUEUE,
                   timeout_check: str = TIMEOUT_CHECK, max_body_bytes: int = MAX_BODY_BYTES) -> str:
    """The template with one `server NAME ADDRESS` line per replica's shim. docker_dns: names are resolved by
    Docker's DNS, again whenever a container comes back with another address, and one not up yet starts down.
    The per-source bounds and maxconn scale with the replicas unless given (fleet_bounds)."""
    if not servers or len({name for name, _ in servers}) != len(servers):
        raise ValueError("at least one server, each with a name of its own")
    seconds = timeout_request_seconds or longest_request_seconds() + 60
    fleet = fleet_bounds(len(servers))
    per_source_connections = per_source_connections or fleet["per_source_connections"]
    return Template(TEMPLATE.read_text()).substitute(
        maxconn=maxconn or fleet["maxconn"], bind=bind, check_inter=check_inter, fastinter=fastinter,
        timeout_request=f"{seconds}s", timeout_http_request=HTTP_REQUEST_TIMEOUT, timeout_client=CLIENT_TIMEOUT,
        body_wait=BODY_WAIT,
        per_source_connections=per_source_connections, per_source_requests=per_source_requests,
        per_source_token_requests=per_source_token_requests or max(per_source_requests,
                                                                   fleet["per_source_token_requests"]),
        rate_period=rate_period, per_source_posts=per_source_posts or fleet["per_source_posts"],
        server_maxconn=server_maxconn,
        timeout_queue=timeout_queue, timeout_check=timeout_check, max_body_bytes=max_body_bytes,
        resolvers=("resolvers docker\n    nameserver dns 127.0.0.11:53\n    hold valid 10s\n\n" if docker_dns else ""),
        server_options=" resolvers docker init-addr last,libc,none" if docker_dns else "",
        log_global="    log stdout format raw local0 info" if log_to_stdout else "",
        log_defaults=f'    log global\n    log-format "{LOG_FORMAT}"' if log_to_stdout else "",
        servers="\n".join(f"    server {name} {address}" for name, address in servers))


TRITON_HOME = "/home/intern-decision"  # the Triton image's HOME (docker/triton/Dockerfile)
TRITON_CACHE_DIR = TRITON_HOME + "/.triton/cache"  # OpenAI Triton's kernel cache, flash-linear-attention's kernels
TRITON_TMPFS = ["/tmp:size=1g", f"{TRITON_HOME}:size=1g,uid=10001,gid=10001,mode=0700"]
# Memory limits, as the Kubernetes pods have them.
TRITON_MEMORY, SHIM_MEMORY, HAPROXY_MEMORY, PROMETHEUS_MEMORY, POD_MEMORY = "48g", "2g", "256m", "2g", "16m"
GRAFANA_MEMORY = "512m"
GRAFANA_IMAGE = "grafana/grafana:11.6.0"  # docker/compose.yaml pins the same
# What holds a replica's network namespace, as a pod's pause container does: it runs nothing, so it outlives every
# restart of Triton (the watchdog's heal) and of the shim, and both keep meeting on its 127.0.0.1. Were the
# namespace Triton's own, a restarted Triton would come back in a new one and strand the shim in the old.
POD_IMAGE = "registry.k8s.io/pause:3.10"
# HAProxy stops after the shims (each shim depends on it), so the answers of a draining shim still reach their
# clients; SIGUSR1 is its soft stop (no new connections, the open ones finished), given this long.
HAPROXY_STOP_GRACE = "30s"


# Hardening every service gets, as the Kubernetes pods have it: no capabilities, no privilege gained by exec, a
# read-only root filesystem with tmpfs where something must write, a memory limit.
def _hardened(memory: str, tmpfs: list[str] | None = None) -> dict:
    return {"read_only": True, "tmpfs": tmpfs or ["/tmp:size=64m"], "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges:true"], "mem_limit": memory}


def _pod(gpu: int) -> dict:
    """The replica's namespace holder; on the internal network it answers to triton-N, the name HAProxy and
    Prometheus use for the replica (Triton's metrics and the shim's API and metrics share its address)."""
    return {
        "image": POD_IMAGE,
        "networks": {"backend": {"aliases": [f"triton-{gpu}"]}},
        "restart": "on-failure:3",
        "logging": {"driver": "json-file", "options": {"max-size": "10m", "max-file": "2"}},
        **_hardened(POD_MEMORY, ["/tmp:size=1m"]),
    }


def _triton(gpu: int, call_timeout: float) -> dict:
    return {
        "build": {"context": "../..", "dockerfile": "docker/triton/Dockerfile"},
        "image": "intern-decision-triton:local",
        "env_file": ["../triton.env"],
        "environment": {"INTERN_DECISION_DEVICE": "cuda",
                        "INTERN_DECISION_TRITON_API_KEY_FILE": "/run/secrets/triton_api_key",
                        "HOME": TRITON_HOME, "TRITON_CACHE_DIR": TRITON_CACHE_DIR,
                        # the watchdog's and the healthcheck's ping: one call's time (ping_timeout_seconds)
                        "INTERN_DECISION_PING_TIMEOUT_SECONDS": str(ping_timeout_seconds(call_timeout))},
        "secrets": ["triton_api_key"],  # its own key only: never the API token (the checkpoint's code runs here)
        "volumes": [{"type": "bind", "source": "${HF_CACHE:-/srv/hf}", "target": "/hf", "read_only": True,
                     "bind": {"create_host_path": False}}],
        "shm_size": "1g",
        "network_mode": f"service:pod-{gpu}",
        "depends_on": {f"pod-{gpu}": {"condition": "service_started"}},
        # Its card only, which it sees as GPU 0: config.pbtxt (one instance on GPU 0) is unchanged.
        "deploy": {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "device_ids": [str(gpu)], "capabilities": ["gpu"]}]}}},
        "healthcheck": {"test": ["CMD", "/opt/venv/bin/python", "/opt/intern-decision/healthcheck.py", "triton"],
                        "interval": "15s", "timeout": f"{liveness_check_timeout_seconds(call_timeout)}s",
                        "retries": 3, "start_period": "600s"},
        # The watchdog exits 3 when the model stays unreachable: the restart is the heal.
        "restart": "on-failure:5",
        "stop_grace_period": "45s",
        "logging": {"driver": "json-file", "options": {"max-size": "50m", "max-file": "5"}},
        # HOME in memory and writable: the kernels flash-linear-attention compiles at warm-up go to TRITON_CACHE_DIR
        # under it (CUDA's own cache to ~/.nv); /dev/shm is shm_size.
        **_hardened(TRITON_MEMORY, TRITON_TMPFS),
    }


def _shim(gpu: int, next_token: bool, grace_seconds: int) -> dict:
    shim = {
        "build": {"context": "../..", "dockerfile": "docker/shim/Dockerfile"},
        "image": "intern-decision-shim:local",
        "env_file": ["../shim.env"],
        "environment": {"INTERN_DECISION_API_TOKEN_FILE": "/run/secrets/api_token",
                        "INTERN_DECISION_TRITON_API_KEY_FILE": "/run/secrets/triton_api_key",
                        "INTERN_DECISION_TRITON_URL": "127.0.0.1:8000",
                        "INTERN_DECISION_TRITON_METRICS_URL": "http://127.0.0.1:8002/metrics",
                        "INTERN_DECISION_HOST": "0.0.0.0", "INTERN_DECISION_PORT": str(SHIM_PORT),
                        "INTERN_DECISION_METRICS_HOST": "0.0.0.0",
                        "INTERN_DECISION_METRICS_PORT": str(SHIM_METRICS_PORT),
                        # every connection comes from HAProxy: the per-source bounds are its own, and the
                        # client it names in X-Forwarded-For is the caller whose turn it is
                        "INTERN_DECISION_MAX_CONNECTIONS_PER_PEER": "0",
                        "INTERN_DECISION_BALANCER_ADDRESSES": BALANCER_ADDRESS},
        "secrets": ["api_token", "triton_api_key"],
        # The replica's namespace, Triton's too, as in a pod: the shim talks to its own Triton on 127.0.0.1 only,
        # and a restarted Triton comes back in the same namespace.
        "network_mode": f"service:pod-{gpu}",
        # Compose stops dependents first: the shim drains while Triton still scores and HAProxy still forwards.
        "depends_on": {f"pod-{gpu}": {"condition": "service_started"},
                       f"triton-{gpu}": {"condition": "service_healthy"},
                       "haproxy": {"condition": "service_started"}},
        "healthcheck": {"test": ["CMD", "python", "/opt/intern-decision/healthcheck.py", "shim"],
                        "interval": "15s", "timeout": "10s", "retries": 3, "start_period": "30s"},
        "restart": "on-failure:3",
        "stop_grace_period": f"{grace_seconds}s",  # the drain rule (stop_grace_seconds)
        "logging": {"driver": "json-file", "options": {"max-size": "50m", "max-file": "5"}},
        **_hardened(SHIM_MEMORY),
    }
    if next_token:  # during a rotation: the second accepted token (docs/operations.md, "Rotating the API token")
        shim["environment"]["INTERN_DECISION_API_TOKEN_NEXT_FILE"] = "/run/secrets/api_token_next"
        shim["secrets"].append("api_token_next")
    return shim


def compose_file(gpus: int, next_token: bool = False, timing: dict | None = None) -> dict:
    """timing: stop_grace_seconds' arguments (timing_from_env_file), the shim's defaults where absent."""
    if gpus < 1:
        raise ValueError(f"GPUS must be at least 1, got {gpus}")
    grace_seconds = stop_grace_seconds(**(timing or {}))
    call_timeout = (timing or {}).get("call_timeout", CALL_TIMEOUT_SECONDS)
    services: dict = {}
    for gpu in range(gpus):
        services[f"pod-{gpu}"] = _pod(gpu)
        services[f"triton-{gpu}"] = _triton(gpu, call_timeout)
        services[f"shim-{gpu}"] = _shim(gpu, next_token, grace_seconds)
    services["haproxy"] = {
        "image": "haproxy:2.6",
        "volumes": ["./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro"],
        "ports": ["${SHIM_BIND:-127.0.0.1}:${SHIM_PORT:-8080}:8080"],
        "networks": {"backend": {"ipv4_address": BALANCER_ADDRESS}, "edge": {}},
        # No depends_on: the shims depend on it, so that it stops after them (their drain's answers pass here).
        "stop_signal": "SIGUSR1",
        "stop_grace_period": HAPROXY_STOP_GRACE,
        "restart": "on-failure:3",
        "logging": {"driver": "json-file", "options": {"max-size": "50m", "max-file": "5"}},
        **_hardened(HAPROXY_MEMORY),
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
        **_hardened(PROMETHEUS_MEMORY),
    }
    services["grafana"] = grafana_service("../../deploy/grafana")
    secrets = {"api_token": {"file": "../secrets/api_token"}, "triton_api_key": {"file": "../secrets/triton_api_key"}}
    if next_token:
        secrets["api_token_next"] = {"file": "../secrets/api_token_next"}
    return {
        "name": "intern-decision-multi-gpu",
        "services": services,
        "secrets": secrets,
        "networks": {"backend": {"internal": True, "ipam": {"config": [{"subnet": BACKEND_SUBNET}]}}, "edge": {}},
        "volumes": {"prometheus-data": {}, "grafana-data": {}},
    }


def grafana_service(grafana_dir: str) -> dict:
    """Grafana with the generated dashboard and its Prometheus datasource, as in docker/compose.yaml (a test holds the
    two equal); grafana_dir: deploy/grafana/ relative to the compose file."""
    return {
        "image": GRAFANA_IMAGE,
        "environment": {
            "GF_AUTH_ANONYMOUS_ENABLED": "true", "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
            "GF_AUTH_DISABLE_LOGIN_FORM": "true", "GF_AUTH_BASIC_ENABLED": "false",
            "GF_ANALYTICS_REPORTING_ENABLED": "false", "GF_ANALYTICS_CHECK_FOR_UPDATES": "false",
            "GF_ANALYTICS_CHECK_FOR_PLUGIN_UPDATES": "false", "GF_LOG_MODE": "console",
            "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH": "/etc/grafana/dashboards/intern-decision.json",
        },
        "volumes": [f"{grafana_dir}/provisioning:/etc/grafana/provisioning:ro",
                    f"{grafana_dir}/intern-decision.json:/etc/grafana/dashboards/intern-decision.json:ro",
                    "grafana-data:/var/lib/grafana"],
        "ports": ["127.0.0.1:${GRAFANA_PORT:-3000}:3000"],
        "depends_on": ["prometheus"],
        "networks": ["backend", "edge"],
        "healthcheck": {"test": ["CMD", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1:3000/api/health"],
                        "interval": "30s", "timeout": "5s", "retries": 3},
        "restart": "on-failure:3",
        "logging": {"driver": "json-file", "options": {"max-size": "50m", "max-file": "5"}},
        **_hardened(GRAFANA_MEMORY),
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


def render(gpus: int, out: Path, next_token: bool = False, timing: dict | None = None,
           max_body_bytes: int = MAX_BODY_BYTES) -> list[Path]:
    """timing: the shim's settings the drain rule and HAProxy's server timeout read (timing_from_env_file);
    max_body_bytes: the shim's MAX_BODY_BYTES (max_body_bytes_from_env_file)."""
    timing = timing or {}
    out.mkdir(parents=True, exist_ok=True)
    servers = [(f"shim-{gpu}", f"triton-{gpu}:{SHIM_PORT}") for gpu in range(gpus)]
    longest = longest_request_seconds(**{key: value for key, value in timing.items() if key != "drain_seconds"})
    files = {
        "compose.yaml": "# Rendered by docker/multi_gpu.py; do not edit (JSON is YAML).\n"
                        + json.dumps(compose_file(gpus, next_token, timing), indent=2) + "\n",
        "haproxy.cfg": haproxy_config(servers, f"0.0.0.0:{SHIM_PORT}", timeout_request_seconds=longest + 60,
                                      docker_dns=True, max_body_bytes=max_body_bytes),
        "prometheus.yml": prometheus_config(gpus),
    }
    written = []
    for name, text in files.items():
        (out / name).write_text(text)
        written.append(out / name)
    return written


SINGLE_GPU_BALANCER = DOCKER / "haproxy" / "haproxy.cfg"  # docker/compose.yaml mounts it


def balancer_config(timing: dict | None = None, max_body_bytes: int = MAX_BODY_BYTES) -> str:
    """HAProxy's configuration for docker/compose.yaml's one replica: the same template and bounds as N GPUs, its
    one server the shim in the replica's network namespace (triton:8080, the pod container's alias)."""
    longest = longest_request_seconds(**{key: value for key, value in (timing or {}).items()
                                         if key != "drain_seconds"})
    return haproxy_config([("shim", f"triton:{SHIM_PORT}")], f"0.0.0.0:{SHIM_PORT}",
                          timeout_request_seconds=longest + 60, docker_dns=True, max_body_bytes=max_body_bytes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="multi_gpu.py")
    parser.add_argument("--gpus", type=int, help="default: GPUS in docker/.env, else 1")
    parser.add_argument("--out", type=Path, default=DOCKER / "multi-gpu")
    parser.add_argument("--next-token", action="store_true",
                        help="during a rotation: the shims also accept docker/secrets/api_token_next")
    parser.add_argument("--balancer-only", action="store_true",
                        help=f"only HAProxy's configuration for docker/compose.yaml (one GPU): {SINGLE_GPU_BALANCER}")
    args = parser.parse_args(argv)
    shim_env = DOCKER / "shim.env"
    if args.balancer_only:
        SINGLE_GPU_BALANCER.write_text(balancer_config(timing_from_env_file(shim_env),
                                                       max_body_bytes_from_env_file(shim_env)))
        print(SINGLE_GPU_BALANCER)
        return 0
    gpus = args.gpus if args.gpus is not None else gpus_from_env_file(DOCKER / ".env")
    for path in render(gpus, args.out, args.next_token, timing_from_env_file(shim_env),
                       max_body_bytes_from_env_file(shim_env)):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
