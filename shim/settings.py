"""Shim configuration, read once from the environment; a bad value is a ValueError naming the variable (INV-6)."""
from __future__ import annotations

import datetime
import ipaddress
import re
from dataclasses import dataclass
from typing import Mapping

from wire.env import PREFIX, get, integer, listen_port, port_number, positive_number
from wire.tracing import otlp_endpoint

from .callers import ApiKey, read_keys_file

_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")
_HOST_PORT = re.compile(r"[A-Za-z0-9.\-\[\]:]+:[0-9]+")
MIN_TOKEN_LENGTH = 32
# The metrics of a shim listening on every address default to the loopback.
_EVERY_ADDRESS = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1", "[::]": "::1"}
_MODEL_NAME = re.compile(r"[\x21-\x7e]{1,128}")


@dataclass(frozen=True)
class ShimSettings:
    api_token: str
    triton_api_key: str
    # docker/multi_gpu.py sizes the balancer and the grace periods by these defaults.
    max_decisions: int = 64
    max_body_bytes: int = 1024 * 1024
    max_queue: int = 32
    max_queue_per_peer: int = 0  # opt-in (docs/differences-from-semif.md)
    triton_url: str = "127.0.0.1:8000"
    metrics_url: str = "http://127.0.0.1:8002/metrics"
    model_name: str = "intern_decision"
    call_timeout_seconds: float = 120.0
    health_timeout_seconds: float = 2.0
    probe_seconds: float = 5.0
    body_timeout_seconds: float = 5.0
    api_token_next: str | None = None
    drain_seconds: float = 5.0
    header_timeout_seconds: float = 10.0
    max_connections: int = 256
    max_connections_per_peer: int = 64
    balancer_addresses: tuple[str, ...] = ()
    extra_model_names: tuple[str, ...] = ()
    model_release_date: str = "2026-09-30"
    max_batch_items: int = 32
    max_decode_ratio: int = 200
    mcp: bool = True
    playground: bool = True
    host: str = "127.0.0.1"
    port: int = 8080
    metrics_host: str = ""
    metrics_port: int = 9464
    otlp_endpoint: str | None = None
    api_keys: tuple[ApiKey, ...] = ()  # none: API_TOKEN is the one caller

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """None when the metrics are off."""
        if self.metrics_port == 0:
            return None
        return self.metrics_host or _EVERY_ADDRESS.get(self.host, self.host), self.metrics_port

    def __repr__(self) -> str:  # never print the token or the key
        return f"ShimSettings(model_name={self.model_name!r}, triton_url={self.triton_url!r}, ...)"

    @classmethod
    def from_env(cls, env: Mapping[str, str], host: str | None = None, port: str | None = None) -> "ShimSettings":
        """host, port: the command line's, in place of HOST and PORT."""
        listen = listen_port(env, "PORT", cls.port, given=port)
        token = _secret(env, "API_TOKEN")
        triton_api_key = _secret(env, "TRITON_API_KEY")
        if triton_api_key == token:  # the key sits on tritonserver's command line; the token must never
            raise ValueError(f"{PREFIX}TRITON_API_KEY must differ from {PREFIX}API_TOKEN")
        token_next = _secret(env, "API_TOKEN_NEXT") if get(env, "API_TOKEN_NEXT") else None
        if token_next is not None and token_next in (token, triton_api_key):
            raise ValueError(f"{PREFIX}API_TOKEN_NEXT must differ from {PREFIX}API_TOKEN and "
                             f"{PREFIX}TRITON_API_KEY")
        triton_url = get(env, "TRITON_URL") or cls.triton_url
        if not _HOST_PORT.fullmatch(triton_url) or port_number(triton_url.rpartition(":")[2]) is None:
            raise ValueError(f"{PREFIX}TRITON_URL must be host:port without a scheme, got {triton_url!r}")
        metrics_url = get(env, "TRITON_METRICS_URL") or cls.metrics_url
        if not re.fullmatch(r"https?://\S+", metrics_url):
            raise ValueError(f"{PREFIX}TRITON_METRICS_URL must be an http(s) URL, got {metrics_url!r}")
        model_name = get(env, "MODEL_NAME") or cls.model_name
        if not re.fullmatch(r"[A-Za-z0-9_\-.]+", model_name):
            raise ValueError(f"{PREFIX}MODEL_NAME must be a Triton model name, got {model_name!r}")
        max_queue = integer(env, "MAX_QUEUE", cls.max_queue)
        max_queue_per_peer = integer(env, "MAX_QUEUE_PER_PEER", cls.max_queue_per_peer, minimum=0)
        if max_queue_per_peer > max_queue:
            raise ValueError(f"{PREFIX}MAX_QUEUE_PER_PEER must be at most {PREFIX}MAX_QUEUE ({max_queue}), "
                             f"got {max_queue_per_peer}")
        max_connections = integer(env, "MAX_CONNECTIONS", cls.max_connections)
        if max_connections <= max_queue:  # a full queue must leave room for /health and the refusals
            raise ValueError(f"{PREFIX}MAX_CONNECTIONS must be above {PREFIX}MAX_QUEUE ({max_queue}), "
                             f"got {max_connections}")
        api_keys = read_keys_file(get(env, "API_KEYS_FILE"), max_queue)
        return cls(
            api_token=token,
            api_keys=api_keys,
            api_token_next=token_next,
            max_decisions=integer(env, "MAX_DECISIONS", cls.max_decisions),
            max_body_bytes=integer(env, "MAX_BODY_BYTES", cls.max_body_bytes),
            max_queue=max_queue,
            max_queue_per_peer=max_queue_per_peer,
            triton_url=triton_url,
            metrics_url=metrics_url,
            model_name=model_name,
            call_timeout_seconds=_seconds(env, "CALL_TIMEOUT_SECONDS", cls.call_timeout_seconds),
            health_timeout_seconds=_seconds(env, "HEALTH_TIMEOUT_SECONDS", cls.health_timeout_seconds),
            body_timeout_seconds=_seconds(env, "BODY_TIMEOUT_SECONDS", cls.body_timeout_seconds),
            triton_api_key=triton_api_key,
            probe_seconds=_seconds(env, "PROBE_SECONDS", cls.probe_seconds),
            drain_seconds=_seconds(env, "DRAIN_SECONDS", cls.drain_seconds),
            header_timeout_seconds=_seconds(env, "HEADER_TIMEOUT_SECONDS", cls.header_timeout_seconds),
            max_connections=max_connections,
            max_connections_per_peer=integer(env, "MAX_CONNECTIONS_PER_PEER", cls.max_connections_per_peer, minimum=0),
            balancer_addresses=_networks(env, "BALANCER_ADDRESSES"),
            extra_model_names=_model_names(env, "EXTRA_MODEL_NAMES"),
            model_release_date=_date(env, "MODEL_RELEASE_DATE", cls.model_release_date),
            max_batch_items=integer(env, "MAX_BATCH_ITEMS", cls.max_batch_items),
            max_decode_ratio=integer(env, "MAX_DECODE_RATIO", cls.max_decode_ratio),
            mcp=switch(env, "MCP", cls.mcp),
            playground=switch(env, "PLAYGROUND", cls.playground),
            host=(get(env, "HOST") or cls.host) if host is None else host,
            port=listen,
            metrics_host=get(env, "METRICS_HOST"),
            metrics_port=_metrics_port(env, listen, cls.metrics_port),
            otlp_endpoint=otlp_endpoint(env),
        )


def _metrics_port(env: Mapping[str, str], listen: int, default: int) -> int:
    port = listen_port(env, "METRICS_PORT", default, zero_means="no metrics")
    if port == listen:
        raise ValueError(f"{PREFIX}METRICS_PORT must differ from the shim's port {listen}")
    return port


def _secret(env: Mapping[str, str], name: str) -> str:
    """The message never shows it."""
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


def switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    """The dev stack reads PLAYGROUND by this rule too."""
    raw = get(env, name)
    if raw == "":
        return default
    if raw not in ("0", "1"):
        raise ValueError(f"{PREFIX}{name} must be 1 (on) or 0 (off), got {raw!r}")
    return raw == "1"


def _model_names(env: Mapping[str, str], name: str) -> tuple[str, ...]:
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
