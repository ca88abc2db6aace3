"""python -m shim [--host H] [--port P]: the shim under uvicorn, one worker (INV-2), its metrics on their own port."""
from __future__ import annotations

import argparse
import logging.config
import os
import sys

from . import logs, metrics, metrics_server, server, tracing
from .app import build_service
from .settings import ShimSettings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shim")
    parser.add_argument("--host", help=f"default: INTERN_DECISION_HOST, else {ShimSettings.host}")
    parser.add_argument("--port", help=f"default: INTERN_DECISION_PORT, else {ShimSettings.port}")
    args = parser.parse_args(argv)
    try:
        settings = ShimSettings.from_env(os.environ, host=args.host, port=args.port)
    except ValueError as exc:
        print(f"refusing to start: {exc}", file=sys.stderr)
        return 2
    metrics_address = settings.metrics_address
    shim_metrics = metrics.ShimMetrics()
    log_config = logs.log_config()
    if metrics_address is not None:
        host, metrics_port = metrics_address
        try:
            metrics_server.serve(shim_metrics.registry, host, metrics_port)
        except OSError as exc:
            print(f"refusing to start: the metrics port {host}:{metrics_port} cannot be bound "
                  f"(INTERN_DECISION_METRICS_PORT): {exc.strerror or exc}", file=sys.stderr)
            return 2
    logging.config.dictConfig(log_config)
    if metrics_address is not None:
        logging.getLogger("intern_decision.shim").info("metrics on http://%s:%d/metrics", host, metrics_port)
    provider = tracing.start(settings.otlp_endpoint) if settings.otlp_endpoint else None
    try:
        server.run(build_service(settings, metrics=shim_metrics), settings.host, settings.port, log_config,
                   shim_metrics)
    finally:
        if provider is not None:
            provider.shutdown()  # sends the spans still queued
    return 0


if __name__ == "__main__":
    sys.exit(main())
