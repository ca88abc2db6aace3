"""Who a request comes from: its source address, or with API_KEYS_FILE the key it presented (docs/operations.md,
"Callers")."""
from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from wire.env import PREFIX

DEFAULT_CALLER = "default"  # API_TOKEN's name beside named keys
UNNAMED = "none"
MAX_KEYS = 64  # the per-caller series' label set stays bounded
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_FIELDS = {"name", "sha256", "share"}


@dataclass(frozen=True)
class ApiKey:
    name: str
    sha256: bytes
    share: int | None = None  # places of the queue it may hold while another caller waits


def token_digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


def read_keys_file(path: str, max_queue: int) -> tuple[ApiKey, ...]:
    if not path:
        return ()
    variable = f"{PREFIX}API_KEYS_FILE"
    try:
        document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{variable} {path!r} cannot be read as TOML: {exc}") from None
    tables = document.get("key")
    if set(document) != {"key"} or not isinstance(tables, list) or not tables:
        raise ValueError(f"{variable} must hold [[key]] tables and nothing else")
    if len(tables) > MAX_KEYS:
        raise ValueError(f"{variable} holds {len(tables)} keys; at most {MAX_KEYS}")
    keys = tuple(_key(table, index, max_queue, variable) for index, table in enumerate(tables))
    for field, values in (("name", [key.name for key in keys]), ("sha256", [key.sha256 for key in keys])):
        if len(set(values)) != len(values):
            raise ValueError(f"{variable}: two keys have the same {field}")
    if DEFAULT_CALLER in {key.name for key in keys}:
        raise ValueError(f"{variable}: the name {DEFAULT_CALLER!r} is API_TOKEN's")
    return keys


def _key(table: object, index: int, max_queue: int, variable: str) -> ApiKey:
    where = f"{variable}: key {index + 1}"
    if not isinstance(table, dict) or not {"name", "sha256"} <= set(table) or not set(table) <= _FIELDS:
        raise ValueError(f"{where} must have name and sha256, and may have share; nothing else")
    name, digest, share = table["name"], table["sha256"], table.get("share")
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name == UNNAMED:
        raise ValueError(f"{where}: name must be 1..32 of a-z 0-9 _ - (not {UNNAMED!r}), got {name!r}")
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise ValueError(f"{where} ({name}): sha256 must be 64 lowercase hex digits, the token's SHA-256")
    if share is not None and (type(share) is not int or not 1 <= share <= max_queue):
        raise ValueError(f"{where} ({name}): share must be an integer from 1 to MAX_QUEUE ({max_queue}), "
                         f"got {share!r}")
    return ApiKey(name, bytes.fromhex(digest), share)
