"""Strict JSON, both sides' reader and writer: UTF-8, finite, no lone surrogate, no key twice, a bounded depth and
count of values (docs/operations.md, "Reliability and limits")."""
from __future__ import annotations

import json
import math
import re
from typing import Any

# Far below what json, deepcopy or the chat template can take, far above any real state.
MAX_DEPTH = 64
MAX_VALUES = 131_072


class NotStrictJson(ValueError):
    """The message names `what` was read."""


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_NESTING_BYTES = bytes.maketrans(b"{}", b"[]")
_NOT_NESTING = bytes(byte for byte in range(256) if byte not in b'[]{}"')
_NOT_NESTING_OR_COMMA = bytes(byte for byte in range(256) if byte not in b'[]{}",')


def _balanced_pattern(depth: int) -> re.Pattern:
    """Possessive, so a miss never backtracks."""
    pattern = b""
    for _ in range(depth):
        pattern = rb"(?:\[" + pattern + rb"\])*+"
    return re.compile(pattern)


_WITHIN_MAX_DEPTH = _balanced_pattern(MAX_DEPTH)


def _outside_strings(raw: bytes, dropped: bytes) -> bytes:
    """Read in C: escaped backslashes and quotes go first, so that every quote left opens or closes a string."""
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(unescaped.translate(_NESTING_BYTES, dropped).split(b'"')[::2])


def nested_too_deeply(raw: bytes) -> bool:
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return False
    return _WITHIN_MAX_DEPTH.fullmatch(_outside_strings(raw, _NOT_NESTING)) is None


def values_at_most(raw: bytes) -> int:
    """An upper bound, read in C before anything is built."""
    counted = 1 + raw.count(b",") + raw.count(b"[") + raw.count(b"{")
    if counted <= MAX_VALUES:  # the strings' commas counted too: never fewer
        return counted
    structure = _outside_strings(raw, _NOT_NESTING_OR_COMMA)
    return 1 + structure.count(b",") + structure.count(b"[")


def loads(raw: bytes, what: str) -> Any:

    def refuse_constant(name: str) -> None:
        raise NotStrictJson(f"{what} is not finite JSON: {name} is not a JSON number")

    def finite_float(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise NotStrictJson(f"{what} is not finite JSON: {text} does not fit a finite number")
        return value

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict:
        value = dict(pairs)
        if len(value) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise NotStrictJson(f"{what} is not usable JSON: the key {key!r} appears twice in one object")
                seen.add(key)
        return value

    if values_at_most(raw) > MAX_VALUES:
        raise NotStrictJson(f"{what} holds too many values: more than {MAX_VALUES} (one per comma and per opening "
                            f"bracket)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotStrictJson(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        value = json.loads(text, parse_constant=refuse_constant, parse_float=finite_float,
                           object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise NotStrictJson(f"{what} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise NotStrictJson(f"{what} is nested too deeply: more than {MAX_DEPTH} levels of arrays and "
                            f"objects") from None
    except NotStrictJson:
        raise
    except ValueError as exc:  # an integer beyond Python's digit limit
        raise NotStrictJson(f"{what} is not usable JSON: {exc}") from None
    if nested_too_deeply(raw):
        raise NotStrictJson(f"{what} is nested too deeply: more than {MAX_DEPTH} levels of arrays and objects")
    if _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise NotStrictJson(f"{what} is not usable JSON: it escapes a lone UTF-16 surrogate") from None
    return value


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
