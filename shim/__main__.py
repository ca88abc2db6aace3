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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shim")
    parser.add_argument("--host", default=os.environ.get("INTERN_DECISION_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("INTERN_DECISION_PORT", "8080")))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = ShimSettings.from_env(os.environ)
    except ValueError as exc:
        print(f"refusing to start: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(create_app(settings), host=args.host, port=args.port, workers=1, log_level="info")
    return 0


if __name__ == "__main__":
    sys.exit(main())
