"""How an INTERN_DECISION_* value is read, for both sides' settings: a bad value is a ValueError naming the
variable."""
from __future__ import annotations

import math
import re
from typing import Mapping

PREFIX = "INTERN_DECISION_"
_DIGITS = re.compile(r"[0-9]+")
MAX_PORT = 65535


def get(env: Mapping[str, str], name: str) -> str:
    return env.get(PREFIX + name, "")


def integer(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = get(env, name)
    if raw == "":
        return default
    if not _DIGITS.fullmatch(raw) or int(raw) < minimum:
        raise ValueError(f"{PREFIX}{name} must be an integer >= {minimum}, got {raw!r}")
    return int(raw)


def positive_number(env: Mapping[str, str], name: str, what: str) -> float | None:
    raw = get(env, name)
    if raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{PREFIX}{name} must be a finite number {what}, got {raw!r}")
    return value


def port_number(raw: str, lowest: int = 1) -> int | None:
    if not _DIGITS.fullmatch(raw) or not lowest <= int(raw) <= MAX_PORT:
        return None
    return int(raw)


def listen_port(env: Mapping[str, str], name: str, default: int, given: str | None = None,
                zero_means: str | None = None) -> int:
    """zero_means: 0 is allowed too, and means that."""
    raw = given or get(env, name) or str(default)
    port = port_number(raw, lowest=0 if zero_means else 1)
    if port is None:
        also = f", or 0 for {zero_means}" if zero_means else ""
        raise ValueError(f"{PREFIX}{name} must be a port number 1..{MAX_PORT}{also}, got {raw!r}")
    return port


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)
