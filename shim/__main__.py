"""python -m shim [--host H] [--port P]: serve the shim with uvicorn, one worker (INV-2).

Configuration is read from INTERN_DECISION_* and validated before the server starts; a bad value stops it.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

import uvicorn

from .app import create_app
from .settings import ShimSettings


def listen_port(raw: str) -> int:
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise ValueError(f"INTERN_DECISION_PORT must be a port number 1..65535, got {raw!r}")
    return int(raw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shim")
    parser.add_argument("--host", default=os.environ.get("INTERN_DECISION_HOST") or "127.0.0.1")
    parser.add_argument("--port", help="default: INTERN_DECISION_PORT, else 8080")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        port = listen_port(args.port or os.environ.get("INTERN_DECISION_PORT") or "8080")
        settings = ShimSettings.from_env(os.environ)
    except ValueError as exc:
        print(f"refusing to start: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(create_app(settings), host=args.host, port=port, workers=1, log_level="info")
    return 0


if __name__ == "__main__":
    sys.exit(main())
