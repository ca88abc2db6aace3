"""uvicorn's server, owning the roster its connections share, and draining the app on the first SIGTERM."""
from __future__ import annotations

import functools
import logging
import signal
from types import FrameType

import uvicorn

from ..drain import Drain
from .bounded_connection import BoundedConnectionProtocol
from .limits import ConnectionLimits


class BoundedServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, limits: ConnectionLimits = ConnectionLimits()):
        self.roster = limits.roster()
        config.http = functools.partial(BoundedConnectionProtocol, limits=limits,  # type: ignore[assignment]
                                        roster=self.roster)
        super().__init__(config)


class DrainingServer(BoundedServer):
    """The first SIGTERM drains the app before uvicorn's graceful shutdown; a second, or SIGINT, is uvicorn's."""

    def __init__(self, config: uvicorn.Config, drain: Drain | None,
                 limits: ConnectionLimits = ConnectionLimits()):
        super().__init__(config, limits)
        self._drain = drain

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and self._drain is not None and not self._drain.draining and not self.should_exit:
            self._drain.begin()
            logging.getLogger("intern_decision.shim.drain").warning(
                "SIGTERM: draining (health 503 now; admitting no more after the announcement)")
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self._drain is not None:
            self._drain.tick()
        if self._drain is not None and self._drain.done and not self.should_exit:
            logging.getLogger("intern_decision.shim.drain").warning("drained: no admitted request left; exiting")
            self.should_exit = True
        return await super().on_tick(counter)
