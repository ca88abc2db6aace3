"""python -m devstack install-stub | fixture | up"""
from __future__ import annotations

import argparse
import sys

from devstack import triton


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install-stub", help="put the python backend stub where the bundled tritonserver looks")
    args = parser.parse_args(argv)
    if args.command == "install-stub":
        print(triton.install_stub())
    return 0


if __name__ == "__main__":
    sys.exit(main())
