"""The HTTP server: uvicorn with httptools, each connection bounded before the app (docs/architecture.md)."""
from .bounded_connection import BoundedConnectionProtocol
from .bounded_server import BoundedServer, DrainingServer
from .limits import (
    BODY_GRACE_SECONDS,
    KEEP_ALIVE_SECONDS,
    LINGER_SECONDS,
    MAX_BODY_CHUNKS,
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    MAX_PIPELINED_REQUESTS,
    ConnectionLimits,
)
from .serve import config, run

__all__ = ["BODY_GRACE_SECONDS", "KEEP_ALIVE_SECONDS", "LINGER_SECONDS", "MAX_BODY_CHUNKS", "MAX_HEADER_BYTES",
           "MAX_HEADERS", "MAX_PIPELINED_REQUESTS",
           "BoundedConnectionProtocol", "BoundedServer", "ConnectionLimits", "DrainingServer", "config", "run"]
