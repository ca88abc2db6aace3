"""How python -m shim runs a Service: uvicorn with httptools, one worker, its own access log off."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import uvicorn

from ..drain import Drain
from .bounded_server import DrainingServer
from .limits import KEEP_ALIVE_SECONDS, ConnectionLimits

if TYPE_CHECKING:
    from ..metrics import ShimMetrics


class Served(Protocol):
    @property
    def app(self) -> Any: ...

    @property
    def drain(self) -> Drain: ...

    @property
    def limits(self) -> ConnectionLimits: ...


def config(app: Any, host: str, port: int, log_config: dict | None = None,
           balancer_addresses: tuple[str, ...] = ()) -> uvicorn.Config:
    """uvicorn's access log is off: it would record query strings, a token pasted into a URL among them."""
    logging = {} if log_config is None else {"log_config": log_config}
    # Only a balancer's X-Forwarded-For is read.
    forwarded = {"proxy_headers": bool(balancer_addresses), "forwarded_allow_ips": list(balancer_addresses) or None}
    return uvicorn.Config(app, host=host, port=port, workers=1, log_level="info",
                          timeout_keep_alive=KEEP_ALIVE_SECONDS, access_log=False, **forwarded, **logging)


def run(service: Served, host: str, port: int, log_config: dict | None = None,
        metrics: ShimMetrics | None = None) -> None:
    limits = service.limits
    server = DrainingServer(config(service.app, host, port, log_config, limits.balancer_addresses), service.drain,
                            limits)
    if metrics is not None:
        metrics.watch_connections(server.roster, limits.max_connections)
    server.run()
