"""The bounds a server puts on its connections (docs/operations.md, "Reliability and limits")."""
from __future__ import annotations

from dataclasses import dataclass

from ..settings import ShimSettings
from .roster import Roster, address_matcher

KEEP_ALIVE_SECONDS = 5
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADERS = 100  # as HAProxy and Envoy
MAX_BODY_CHUNKS = 1024  # each costs the loop a parser callback and a copy, whatever its size
MAX_PIPELINED_REQUESTS = 16
BODY_GRACE_SECONDS = 1.0  # so that an admitted POST's own 408 is answered first
LINGER_SECONDS = 2.0


@dataclass(frozen=True)
class ConnectionLimits:
    header_seconds: float = ShimSettings.header_timeout_seconds
    silent_seconds: float = KEEP_ALIVE_SECONDS  # as a kept-alive connection that sent nothing more
    body_seconds: float = ShimSettings.body_timeout_seconds + BODY_GRACE_SECONDS
    max_connections: int | None = None
    max_per_peer: int | None = None
    balancer_addresses: tuple[str, ...] = ()
    max_pipelined: int = MAX_PIPELINED_REQUESTS
    health_path: str | None = None  # answered even when refused for too many connections, then closed

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
