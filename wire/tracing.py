"""Tracing's one setting for both sides, INTERN_DECISION_OTLP_ENDPOINT (unset, nothing is traced), and the
tritonserver flags that send Triton's spans there."""
from __future__ import annotations

import re
from typing import Mapping
from urllib.parse import SplitResult, urlsplit

from .env import PREFIX, get

TRITON_SERVICE_NAME = "intern-decision-triton"
# Triton splits --trace-config at ',' and '=': the URL may hold neither, nor spaces.
_URL_CHARACTERS = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!$&'()*+;%-]+")


def otlp_endpoint(env: Mapping[str, str]) -> str | None:
    raw = get(env, "OTLP_ENDPOINT")
    if raw == "":
        return None
    parts = urlsplit(raw) if _URL_CHARACTERS.fullmatch(raw) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.username is not None \
            or not _port_valid(parts):
        raise ValueError(f"{PREFIX}OTLP_ENDPOINT must be an http(s) URL of an OTLP/HTTP traces endpoint without ',' "
                         f"'=' or credentials (e.g. http://collector:4318/v1/traces), got {raw!r}")
    return raw


def _port_valid(parts: SplitResult) -> bool:
    try:
        return parts.port != 0
    except ValueError:
        return False


def triton_trace_flags(endpoint: str, service_name: str = TRITON_SERVICE_NAME) -> list[str]:
    """A request carrying a traceparent header joins the caller's trace."""
    return [
        "--trace-config=mode=opentelemetry",
        f"--trace-config=opentelemetry,url={endpoint}",
        f"--trace-config=opentelemetry,resource=service.name={service_name}",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
    ]
