"""Shim configuration, read once from the environment; a bad value is a ValueError naming the variable (INV-6)."""
from __future__ import annotations

import datetime
import ipaddress
import re
from dataclasses import dataclass
from typing import Mapping

from wire.env import PREFIX, get, integer, listen_port, port_number, positive_number
from wire.tracing import otlp_endpoint

_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")
_HOST_PORT = re.compile(r"[A-Za-z0-9.\-\[\]:]+:[0-9]+")
MIN_TOKEN_LENGTH = 32
# The date the contract pinned the model's revision: /v1/models' release_date unless MODEL_RELEASE_DATE says otherwise.
DEFAULT_RELEASE_DATE = "2026-09-30"
# Defaults that the deployment's renderer (docker/multi_gpu.py) sizes the balancer and the grace periods by.
DEFAULT_MAX_DECISIONS = 64
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_CALL_TIMEOUT_SECONDS = 120.0
DEFAULT_DRAIN_SECONDS = 5.0
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_METRICS_PORT = 9464
# A host that listens on every address, and the loopback its metrics default to.
_EVERY_ADDRESS = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1", "[::]": "::1"}
_MODEL_NAME = re.compile(r"[\x21-\x7e]{1,128}")


@dataclass(frozen=True)
class ShimSettings:
    api_token: str
    max_decisions: int
    max_body_bytes: int
    max_queue: int
    triton_url: str
    metrics_url: str
    model_name: str
    call_timeout_seconds: float
    health_timeout_seconds: float
    triton_api_key: str
    probe_seconds: float
    body_timeout_seconds: float = 5.0
    api_token_next: str | None = None
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    # The connection's bounds (shim/server/): the request line and headers must arrive within
    # header_timeout_seconds of the connection's opening or the request's first byte; at most max_connections open.
    header_timeout_seconds: float = 10.0
    max_connections: int = 256
    # One client's share of max_connections (0: no share); connections from balancer_addresses (addresses or CIDR
    # networks of the balancers in front, whose clients all share their address) count towards max_connections only.
    max_connections_per_peer: int = 64
    balancer_addresses: tuple[str, ...] = ()
    # The System One surface (shim/systemone/).
    extra_model_names: tuple[str, ...] = ()
    model_release_date: str = DEFAULT_RELEASE_DATE
    max_batch_items: int = 32
    # A body's gzip or zstd may decode to at most this many bytes per byte sent (shim/edge/encoding.py).
    max_decode_ratio: int = 200
    # System One's operations as MCP tools at /mcp (shim/systemone/mcp.py); off where the mcp package is not
    # installed (the GPU check's environment).
    mcp: bool = True
    # The playground, a page for people at /playground (shim/playground/).
    playground: bool = True
    # Where python -m shim listens, and its metrics (shim/metrics.py): metrics_host "" is the shim's host, or the
    # loopback where the shim listens on every address (the metrics are published only when named); metrics_port 0
    # serves no metrics.
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    metrics_host: str = ""
    metrics_port: int = DEFAULT_METRICS_PORT
    # Where the request's spans go over OTLP/HTTP (shim/tracing.py); None: tracing off, nothing recorded or sent.
    otlp_endpoint: str | None = None

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """Where the metrics are served; None when they are off."""
        if self.metrics_port == 0:
            return None
        return self.metrics_host or _EVERY_ADDRESS.get(self.host, self.host), self.metrics_port

    def __repr__(self) -> str:  # never print the token or the key
        return f"ShimSettings(model_name={self.model_name!r}, triton_url={self.triton_url!r}, ...)"

    @classmethod
    def from_env(cls, env: Mapping[str, str], host: str | None = None, port: str | None = None) -> "ShimSettings":
        """host, port: the command line's --host and --port, when given, in place of HOST and PORT."""
        listen = listen_port(env, "PORT", DEFAULT_PORT, given=port)
        token = _secret(env, "API_TOKEN")
        triton_api_key = _secret(env, "TRITON_API_KEY")
        if triton_api_key == token:  # the key sits on tritonserver's command line; the token must never
            raise ValueError(f"{PREFIX}TRITON_API_KEY must differ from {PREFIX}API_TOKEN")
        token_next = _secret(env, "API_TOKEN_NEXT") if get(env, "API_TOKEN_NEXT") else None
        if token_next is not None and token_next in (token, triton_api_key):
            raise ValueError(f"{PREFIX}API_TOKEN_NEXT must differ from {PREFIX}API_TOKEN and "
                             f"{PREFIX}TRITON_API_KEY")
        triton_url = get(env, "TRITON_URL") or "127.0.0.1:8000"
        if not _HOST_PORT.fullmatch(triton_url) or port_number(triton_url.rpartition(":")[2]) is None:
            raise ValueError(f"{PREFIX}TRITON_URL must be host:port without a scheme, got {triton_url!r}")
        metrics_url = get(env, "TRITON_METRICS_URL") or "http://127.0.0.1:8002/metrics"
        if not re.fullmatch(r"https?://\S+", metrics_url):
            raise ValueError(f"{PREFIX}TRITON_METRICS_URL must be an http(s) URL, got {metrics_url!r}")
        model_name = get(env, "MODEL_NAME") or "intern_decision"
        if not re.fullmatch(r"[A-Za-z0-9_\-.]+", model_name):
            raise ValueError(f"{PREFIX}MODEL_NAME must be a Triton model name, got {model_name!r}")
        max_queue = integer(env, "MAX_QUEUE", 32)
        max_connections = integer(env, "MAX_CONNECTIONS", 256)
        if max_connections <= max_queue:  # a full queue must leave room for /health and the refusals
            raise ValueError(f"{PREFIX}MAX_CONNECTIONS must be above {PREFIX}MAX_QUEUE ({max_queue}), "
                             f"got {max_connections}")
        return cls(
            api_token=token,
            api_token_next=token_next,
            max_decisions=integer(env, "MAX_DECISIONS", DEFAULT_MAX_DECISIONS),
            max_body_bytes=integer(env, "MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES),
            max_queue=max_queue,
            triton_url=triton_url,
            metrics_url=metrics_url,
            model_name=model_name,
            call_timeout_seconds=_seconds(env, "CALL_TIMEOUT_SECONDS", DEFAULT_CALL_TIMEOUT_SECONDS),
            health_timeout_seconds=_seconds(env, "HEALTH_TIMEOUT_SECONDS", 2.0),
            body_timeout_seconds=_seconds(env, "BODY_TIMEOUT_SECONDS", 5.0),
            triton_api_key=triton_api_key,
            probe_seconds=_seconds(env, "PROBE_SECONDS", 5.0),
            drain_seconds=_seconds(env, "DRAIN_SECONDS", DEFAULT_DRAIN_SECONDS),
            header_timeout_seconds=_seconds(env, "HEADER_TIMEOUT_SECONDS", 10.0),
            max_connections=max_connections,
            max_connections_per_peer=integer(env, "MAX_CONNECTIONS_PER_PEER", 64, minimum=0),
            balancer_addresses=_networks(env, "BALANCER_ADDRESSES"),
            extra_model_names=_model_names(env, "EXTRA_MODEL_NAMES"),
            model_release_date=_date(env, "MODEL_RELEASE_DATE", DEFAULT_RELEASE_DATE),
            max_batch_items=integer(env, "MAX_BATCH_ITEMS", 32),
            max_decode_ratio=integer(env, "MAX_DECODE_RATIO", 200),
            mcp=_switch(env, "MCP", True),
            playground=_switch(env, "PLAYGROUND", True),
            host=(get(env, "HOST") or DEFAULT_HOST) if host is None else host,
            port=listen,
            metrics_host=get(env, "METRICS_HOST"),
            metrics_port=_metrics_port(env, listen),
            otlp_endpoint=otlp_endpoint(env),
        )


def _metrics_port(env: Mapping[str, str], listen: int) -> int:
    port = listen_port(env, "METRICS_PORT", DEFAULT_METRICS_PORT, zero_means="no metrics")
    if port == listen:
        raise ValueError(f"{PREFIX}METRICS_PORT must differ from the shim's port {listen}")
    return port


def _secret(env: Mapping[str, str], name: str) -> str:
    """A required secret: at least MIN_TOKEN_LENGTH visible ASCII characters; the message never shows it."""
    value = get(env, name)
    if not value:
        raise ValueError(f"{PREFIX}{name} is required")
    if len(value) < MIN_TOKEN_LENGTH or not _VISIBLE_ASCII.fullmatch(value):
        raise ValueError(f"{PREFIX}{name} must be at least {MIN_TOKEN_LENGTH} visible ASCII characters "
                         f"(33..126), got {len(value)} characters")
    return value


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    value = positive_number(env, name, "of seconds > 0")
    return default if value is None else value


def _switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = get(env, name)
    if raw == "":
        return default
    if raw not in ("0", "1"):
        raise ValueError(f"{PREFIX}{name} must be 1 (on) or 0 (off), got {raw!r}")
    return raw == "1"


def _model_names(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """Comma-separated names, each visible ASCII without a comma (1..128 characters), none twice."""
    raw = get(env, name)
    if raw.strip() == "":
        return ()
    names = [part.strip() for part in raw.split(",")]
    for part in names:
        if not _MODEL_NAME.fullmatch(part):
            raise ValueError(f"{PREFIX}{name} must be comma-separated model names of 1..128 visible ASCII "
                             f"characters, got {part!r} in {raw!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{PREFIX}{name} names a model twice: {raw!r}")
    return tuple(names)


def _networks(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """Comma-separated IP addresses or CIDR networks ("10.0.0.7, 10.0.1.0/24"), each normalized."""
    raw = get(env, name)
    if raw.strip() == "":
        return ()
    networks = []
    for part in raw.split(","):
        try:
            networks.append(str(ipaddress.ip_network(part.strip(), strict=False)))
        except ValueError:
            raise ValueError(f"{PREFIX}{name} must be comma-separated IP addresses or CIDR networks, got "
                             f"{part.strip()!r} in {raw!r}") from None
    return tuple(networks)


def _date(env: Mapping[str, str], name: str, default: str) -> str:
    raw = get(env, name) or default
    try:
        parsed = datetime.date.fromisoformat(raw)
    except ValueError:
        parsed = None
    if parsed is None or not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", raw):
        raise ValueError(f"{PREFIX}{name} must be a date YYYY-MM-DD, got {raw!r}")
    return raw
