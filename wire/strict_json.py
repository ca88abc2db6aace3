"""Strict JSON: what either side receives must be UTF-8, finite, and free of lone surrogates; what it sends too."""
from __future__ import annotations

import json
import math
import re
from typing import Any


class NotStrictJson(ValueError):
    """The text is not strict JSON; the message names `what` was read."""


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def loads(raw: bytes, what: str) -> Any:
    """The value of `raw`, refused with a message about `what` (e.g. "the body") unless it is strict JSON."""

    def refuse_constant(name: str) -> None:
        raise NotStrictJson(f"{what} is not finite JSON: {name} is not a JSON number")

    def finite_float(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise NotStrictJson(f"{what} is not finite JSON: {text} does not fit a finite number")
        return value

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotStrictJson(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        value = json.loads(text, parse_constant=refuse_constant, parse_float=finite_float)
    except json.JSONDecodeError as exc:
        raise NotStrictJson(f"{what} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise NotStrictJson(f"{what} is nested too deeply") from None
    except NotStrictJson:
        raise
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise NotStrictJson(f"{what} is not usable JSON: {exc}") from None
    if _SURROGATE_ESCAPE.search(raw):  # escaped surrogates must pair up into real characters
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise NotStrictJson(f"{what} is not usable JSON: it escapes a lone UTF-16 surrogate") from None
    return value


def dumps(value: Any) -> bytes:
    """UTF-8 JSON; NaN and infinities are refused (ValueError), as is anything JSON cannot hold (TypeError)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
