"""Start the shim in the shim image: the image's CMD.

    python start_shim.py [python -m shim arguments ...]

The compose stack hands the shim its two secrets as files (docker secrets), never as variables in an env file:
for NAME in INTERN_DECISION_API_TOKEN, INTERN_DECISION_API_TOKEN_NEXT (during a rotation) and
INTERN_DECISION_TRITON_API_KEY, when NAME_FILE is set this reads the
file (one trailing newline dropped), sets NAME for the shim alone and unsets NAME_FILE, then execs `python -m shim`.
The shim validates the values itself (the token's rules are INV-6).

Fails closed, exit 2 with one line on stderr: a NAME_FILE that cannot be read or is empty, or NAME and NAME_FILE
both set (which one would win is not obvious, so neither does).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

SECRETS = ("INTERN_DECISION_API_TOKEN", "INTERN_DECISION_API_TOKEN_NEXT", "INTERN_DECISION_TRITON_API_KEY")


class Refused(Exception):
    """A reason not to start."""


def environment(env: Mapping[str, str]) -> dict[str, str]:
    """The shim's environment with every NAME_FILE secret resolved into NAME."""
    result = dict(env)
    for name in SECRETS:
        file_variable = name + "_FILE"
        path = result.pop(file_variable, "")
        if not path:
            continue
        if result.get(name):
            raise Refused(f"both {name} and {file_variable} are set; set only {file_variable}")
        try:
            value = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise Refused(f"{file_variable}: {path} cannot be read: {type(exc).__name__}: {exc}") from None
        value = value.removesuffix("\n").removesuffix("\r")
        if not value:
            raise Refused(f"{file_variable}: {path} is empty")
        result[name] = value
    return result


def command(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "shim", *argv]


if __name__ == "__main__":
    try:
        shim_env = environment(os.environ)
    except Refused as exc:
        print(f"refusing to start: {exc}", file=sys.stderr)
        sys.exit(2)
    args = command(sys.argv[1:])
    os.execve(args[0], args, shim_env)
