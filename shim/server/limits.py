"""The bounds a server puts on its connections, set from the shim's settings; what each one means:
docs/operations.md, "Reliability and limits"."""
from __future__ import annotations

from dataclasses import dataclass

from ..settings import ShimSettings
from .roster import Roster, address_matcher

KEEP_ALIVE_SECONDS = 5  # idle time allowed between requests on one connection (uvicorn's timeout_keep_alive)
MAX_HEADER_BYTES = 64 * 1024  # one request's line and headers together
MAX_HEADERS = 100  # header fields of one request (HAProxy and Envoy refuse past 100 too)
# Chunks of one chunked body: each costs the loop a parser callback and a copy, whatever its size.
MAX_BODY_CHUNKS = 1024
MAX_PIPELINED_REQUESTS = 16  # requests one connection may queue behind the one being answered
# After BODY_TIMEOUT_SECONDS, so that an admitted POST's own 408 (counted from admission) is answered first.
BODY_GRACE_SECONDS = 1.0
# After a refusal the server writes (431, the pipeline's 400), how long it still reads and drops what the client sends.
LINGER_SECONDS = 2.0


@dataclass(frozen=True)
class ConnectionLimits:
    # From a connection's opening, or a request's first byte, to the end of its headers.
    header_seconds: float = ShimSettings.header_timeout_seconds
    # To a connection's first byte: closed as soon as a kept-alive one that sent nothing more would be.
    silent_seconds: float = KEEP_ALIVE_SECONDS
    # From the end of a request's headers to the end of its body.
    body_seconds: float = ShimSettings.body_timeout_seconds + BODY_GRACE_SECONDS
    max_connections: int | None = None  # open at once (idle ones give way first); beyond: 503 too_many_connections
    max_per_peer: int | None = None  # open from one client address; beyond: the same
    balancer_addresses: tuple[str, ...] = ()  # addresses or networks exempt from max_per_peer
    max_pipelined: int = MAX_PIPELINED_REQUESTS
    # A GET of it refused for too many connections is still answered, then closed; the app names it.
    health_path: str | None = None

    @classmethod
    def of(cls, settings: ShimSettings, health_path: str | None = None) -> "ConnectionLimits":
        return cls(header_seconds=settings.header_timeout_seconds,
                   body_seconds=settings.body_timeout_seconds + BODY_GRACE_SECONDS,
                   max_connections=settings.max_connections,
                   max_per_peer=settings.max_connections_per_peer or None,
                   balancer_addresses=settings.balancer_addresses,
                   health_path=health_path)

    def roster(self) -> Roster:
        return Roster(total=self.max_connections, per_peer=self.max_per_peer,
                      exempt=address_matcher(self.balancer_addresses))
