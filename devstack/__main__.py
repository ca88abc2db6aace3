"""python -m devstack install-stub | up

up: build (or reuse) the fixture checkpoint and run the model in the bundled tritonserver on the CPU, in the
foreground, until interrupted.
"""
from __future__ import annotations

import argparse
import signal
import sys

from devstack import triton
from devstack.fixture import DEFAULT_ROOT, build_fixture


def up(args: argparse.Namespace) -> int:
    print(f"building or reusing the fixture checkpoint under {DEFAULT_ROOT} ...", flush=True)
    pins = build_fixture(DEFAULT_ROOT)
    env = pins.env()
    env.update({"INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32"})
    ports = triton.Ports(args.triton_http_port, args.triton_grpc_port, args.triton_metrics_port)
    log_path = DEFAULT_ROOT.parent / "tritonserver.log"
    server = triton.TritonServer(env, log_path, ports=ports).start()
    print(f"starting tritonserver (log: {log_path}) ...", flush=True)
    try:
        server.wait_ready(timeout=300)
        print(f"ready: Triton HTTP on http://{server.http_url}, metrics on {server.metrics_url}\n"
              f"model facts: revision {pins.revision}, inference.py sha256 {pins.inference_sha256}\n"
              "Ctrl-C stops it.", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install-stub", help="put the python backend stub where the bundled tritonserver looks")
    serve = sub.add_parser("up", help="run the stack on the CPU with the fixture checkpoint")
    serve.add_argument("--triton-http-port", type=int, default=8000)
    serve.add_argument("--triton-grpc-port", type=int, default=8001)
    serve.add_argument("--triton-metrics-port", type=int, default=8002)
    args = parser.parse_args(argv)
    if args.command == "install-stub":
        print(triton.install_stub())
        return 0
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    return up(args)


if __name__ == "__main__":
    sys.exit(main())
