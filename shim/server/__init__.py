"""The HTTP server python -m shim runs: uvicorn with httptools, one worker, each connection bounded before the app
(docs/operations.md, "Reliability and limits"). Laid out as uvicorn's own protocols/http/:

limits              the connections' bounds (ConnectionLimits) and the server's constants          (pure)
roster              who holds the connections and which give way when a request needs room         (pure)
early_answers       what the server answers itself, each closing the connection
bounded_connection  the protocol: uvicorn's httptools protocol with every bound of a connection
bounded_server      the server: owns the roster; the first SIGTERM drains the app
serve               uvicorn's config and run, as python -m shim calls them
"""
from .bounded_connection import BoundedConnectionProtocol
from .bounded_server import BoundedServer, DrainingServer
from .limits import (BODY_GRACE_SECONDS, KEEP_ALIVE_SECONDS, LINGER_SECONDS, MAX_BODY_CHUNKS, MAX_HEADER_BYTES,
                     MAX_HEADERS, MAX_PIPELINED_REQUESTS, ConnectionLimits)
from .serve import config, run

__all__ = ["BODY_GRACE_SECONDS", "KEEP_ALIVE_SECONDS", "LINGER_SECONDS", "MAX_BODY_CHUNKS", "MAX_HEADER_BYTES",
           "MAX_HEADERS", "MAX_PIPELINED_REQUESTS",
           "BoundedConnectionProtocol", "BoundedServer", "ConnectionLimits", "DrainingServer", "config", "run"]
