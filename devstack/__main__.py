"""python -m devstack install-stub | up

up: build (or reuse) the fixture checkpoint, run the model in the bundled tritonserver on the CPU and the shim in
front of it, in the foreground, until interrupted (Ctrl-C or SIGTERM stops both). The API token is
INTERN_DECISION_API_TOKEN when set, else one generated once and kept in .cache/dev-token. The logs are
.cache/tritonserver.log and .cache/shim.log; the previous run's are kept as *.log.1.
"""
from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
from pathlib import Path

from devstack import triton
from devstack.fixture import DEFAULT_ROOT, build_fixture
from devstack.process import ServerExited, port_is_free
from devstack.shim import ShimServer
from shim.settings import ShimSettings, switch
from wire import env as wire_env
from wire import tracing

CACHE = DEFAULT_ROOT.parent
TOKEN_FILE = CACHE / "dev-token"
TRITON_KEY_FILE = CACHE / "triton-api-key"  # this run's; for calling Triton by hand


def write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)


def dev_token() -> str:
    if os.environ.get("INTERN_DECISION_API_TOKEN"):
        return os.environ["INTERN_DECISION_API_TOKEN"]
    if not TOKEN_FILE.exists():
        write_private(TOKEN_FILE, secrets.token_urlsafe(32))
    return TOKEN_FILE.read_text().strip()


PORT_FLAGS = {"--port": "port", "--metrics-port": "metrics_port", "--triton-http-port": "triton_http_port",
              "--triton-grpc-port": "triton_grpc_port", "--triton-metrics-port": "triton_metrics_port"}


def taken_ports(args: argparse.Namespace) -> list[str]:
    """'port <port> (<flag>)' for each port the stack needs that something else already listens on, or that repeats."""
    seen: set[int] = set()
    taken = []
    for flag, name in PORT_FLAGS.items():
        port = getattr(args, name)
        if port in seen or not port_is_free(port):
            taken.append(f"port {port} ({flag})")
        seen.add(port)
    return taken


def up(args: argparse.Namespace) -> int:
    taken = taken_ports(args)
    if taken:
        print(f"cannot start: already in use: {', '.join(taken)}; stop what listens there (another ./dev up? "
              f"Ctrl-C stops it) or choose another port with the flag named", file=sys.stderr)
        return 2
    try:  # set, the shim (which reads the same environment) and Triton both trace to it
        otlp_endpoint = tracing.otlp_endpoint(os.environ)
    except ValueError as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 2
    print(f"building or reusing the fixture checkpoint under {DEFAULT_ROOT} ...", flush=True)
    pins = build_fixture(DEFAULT_ROOT)
    env = pins.env()
    env.update({"INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32"})
    ports = triton.Ports(args.triton_http_port, args.triton_grpc_port, args.triton_metrics_port)
    server = triton.TritonServer(env, CACHE / "tritonserver.log", ports=ports, otlp_endpoint=otlp_endpoint)
    write_private(TRITON_KEY_FILE, server.api_key)
    shim = ShimServer(server, {"INTERN_DECISION_API_TOKEN": dev_token()}, CACHE / "shim.log", port=args.port,
                      metrics_port=args.metrics_port)
    print(f"starting tritonserver (log: {server.log_path}) ...", flush=True)
    try:
        server.start().wait_ready(timeout=300)
        print(f"starting the shim (log: {shim.log_path}) ...", flush=True)
        shim.start().wait_ready(timeout=60)
        print(f"ready: the service on {shim.url} (its metrics {shim.metrics_url}; Triton HTTP {server.http_url}, "
              f"metrics {server.metrics_url})\n"
              f"{playground_line(shim.url)}"
              f"fixture checkpoint: revision {pins.revision}, inference.py sha256 {pins.inference_sha256}\n"
              f"API token: INTERN_DECISION_API_TOKEN if set, else the one in {TOKEN_FILE}\n"
              f"Triton's APIs but health and metadata need the header triton-api-key: this run's key is in "
              f"{TRITON_KEY_FILE}\n"
              "Ctrl-C stops both.", flush=True)
        while True:
            signal.pause()
    except KeyboardInterrupt:
        print("stopping ...", flush=True)
    except (ServerExited, TimeoutError) as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 1
    finally:
        shim.stop()
        server.stop()
    return 0


def playground_line(url: str) -> str:
    """Where the playground is, unless INTERN_DECISION_PLAYGROUND=0 turned it off."""
    if not switch(os.environ, "PLAYGROUND", ShimSettings.playground):
        return ""
    return f"playground: {url}/playground (open it in a browser; INTERN_DECISION_PLAYGROUND=0 turns it off)\n"


def port_number(raw: str) -> int:
    port = wire_env.port_number(raw)
    if port is None:
        raise argparse.ArgumentTypeError(f"a port number 1..65535, got {raw!r}")
    return port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install-stub", help="put the python backend stub where the bundled tritonserver looks")
    serve = sub.add_parser("up", help="run the stack on the CPU with the fixture checkpoint")
    serve.add_argument("--port", type=port_number, default=ShimSettings.port,
                       help=f"the service's port (default {ShimSettings.port})")
    serve.add_argument("--metrics-port", type=port_number, default=ShimSettings.metrics_port,
                       help=f"the shim's Prometheus metrics (default {ShimSettings.metrics_port})")
    serve.add_argument("--triton-http-port", type=port_number, default=8000, help="default 8000")
    serve.add_argument("--triton-grpc-port", type=port_number, default=8001, help="default 8001")
    serve.add_argument("--triton-metrics-port", type=port_number, default=8002,
                       help="Triton's and the model's metrics (default 8002)")
    args = parser.parse_args(argv)
    if args.command == "install-stub":
        print(triton.install_stub())
        return 0
    # SIGTERM like Ctrl-C: unwind through up()'s cleanup, which stops the children gracefully.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    return up(args)


if __name__ == "__main__":
    sys.exit(main())
