"""python -m devstack install-stub | up

up: build (or reuse) the fixture checkpoint, run the model in the bundled tritonserver on the CPU and the shim in
front of it, in the foreground, until interrupted. The API token is INTERN_DECISION_API_TOKEN when set, else one
generated once and kept in .cache/dev-token.
"""
from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys

from devstack import triton
from devstack.fixture import DEFAULT_ROOT, build_fixture
from devstack.shim import ShimServer

CACHE = DEFAULT_ROOT.parent
TOKEN_FILE = CACHE / "dev-token"


def dev_token() -> str:
    if os.environ.get("INTERN_DECISION_API_TOKEN"):
        return os.environ["INTERN_DECISION_API_TOKEN"]
    if not TOKEN_FILE.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        TOKEN_FILE.write_text(secrets.token_urlsafe(32))
        TOKEN_FILE.chmod(0o600)
    return TOKEN_FILE.read_text().strip()


def up(args: argparse.Namespace) -> int:
    print(f"building or reusing the fixture checkpoint under {DEFAULT_ROOT} ...", flush=True)
    pins = build_fixture(DEFAULT_ROOT)
    env = pins.env()
    env.update({"INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32"})
    ports = triton.Ports(args.triton_http_port, args.triton_grpc_port, args.triton_metrics_port)
    server = triton.TritonServer(env, CACHE / "tritonserver.log", ports=ports)
    shim = ShimServer(server, {"INTERN_DECISION_API_TOKEN": dev_token()}, CACHE / "shim.log", port=args.port)
    print(f"starting tritonserver (log: {server.log_path}) ...", flush=True)
    try:
        server.start().wait_ready(timeout=300)
        print(f"starting the shim (log: {shim.log_path}) ...", flush=True)
        shim.start().wait_ready(timeout=60)
        print(f"ready: the service on {shim.url} (Triton HTTP {server.http_url}, metrics {server.metrics_url})\n"
              f"fixture checkpoint: revision {pins.revision}, inference.py sha256 {pins.inference_sha256}\n"
              f"API token: INTERN_DECISION_API_TOKEN if set, else the one in {TOKEN_FILE}\n"
              "Ctrl-C stops both.", flush=True)
        while True:
            signal.pause()
    except KeyboardInterrupt:
        print("stopping ...", flush=True)
    finally:
        shim.stop()
        server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install-stub", help="put the python backend stub where the bundled tritonserver looks")
    serve = sub.add_parser("up", help="run the stack on the CPU with the fixture checkpoint")
    serve.add_argument("--port", type=int, default=8080, help="the service's port")
    serve.add_argument("--triton-http-port", type=int, default=8000)
    serve.add_argument("--triton-grpc-port", type=int, default=8001)
    serve.add_argument("--triton-metrics-port", type=int, default=8002)
    args = parser.parse_args(argv)
    if args.command == "install-stub":
        print(triton.install_stub())
        return 0
    # SIGTERM like Ctrl-C: unwind through up()'s cleanup, which stops the children gracefully.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    return up(args)


if __name__ == "__main__":
    sys.exit(main())
