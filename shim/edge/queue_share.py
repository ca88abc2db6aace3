"""Who holds the queue's places, and whose place goes to a lighter source when it is full (docs/operations.md,
"Bounds per client"). Bookkeeping only: the admission refuses, and tells the reclaimed request to give up."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable

Peer = str | None  # the client's address without its port (the ASGI scope's client); None when it has none


@dataclass(frozen=True)
class QueueAdmission:
    """Whether a POST takes a place, and whose place it takes."""

    admitted: bool
    reclaim: Hashable | None = None  # the request whose place it took, to give up now (only when admitted)
    over: str | None = None  # when refused: "peer" (its source's share) or "total"


@dataclass
class _Place:
    source: Hashable
    capped: bool  # counted against its source's share
    waiting: bool = False  # waiting for the lock, never held: the only time its place may be reclaimed
    waited: bool = False  # its wait for the lock is over: never reclaimed from then on


@dataclass
class QueueShare:
    total: int  # MAX_QUEUE
    per_source: int | None  # MAX_QUEUE_PER_PEER; None: no share, and no place reclaimed
    source: Callable[[Peer], Hashable] = lambda peer: peer
    exempt: Callable[[Peer], bool] = lambda peer: peer is None
    _places: dict[Hashable, _Place] = field(default_factory=dict)  # oldest admitted first
    _held: dict[Hashable, int] = field(default_factory=dict)  # places per capped source

    def __len__(self) -> int:
        return len(self._places)

    def held_by(self, peer: Peer) -> int:
        return self._held.get(self.source(peer), 0)

    def admit(self, request: Hashable, peer: Peer) -> QueueAdmission:
        """May `request` from `peer` take a place? When the queue is full, the newest request still waiting for the
        lock of the heaviest source holding more than this one's (its place forgotten here) gives way to it."""
        capped = self.per_source is not None and not self.exempt(peer)
        source = self.source(peer)
        mine = self._held.get(source, 0) if capped else 0
        if capped and mine >= self.per_source:  # type: ignore[operator]
            return QueueAdmission(False, over="peer")
        victim = None
        if len(self._places) >= self.total:
            victim = self._reclaimable(mine)
            if victim is None:
                return QueueAdmission(False, over="total")
            self.left(victim)
        self._places[request] = _Place(source, capped)
        if capped:
            self._held[source] = mine + 1
        return QueueAdmission(True, victim)

    def waiting(self, request: Hashable, waiting: bool) -> None:
        """`request` begins (True) or ends (False) its wait for the lock; only its first wait may be reclaimed."""
        place = self._places.get(request)
        if place is not None:
            place.waiting = waiting and not place.waited
            place.waited = place.waited or not waiting

    def left(self, request: Hashable) -> None:
        """Answered (or reclaimed); a second call is a no-op."""
        place = self._places.pop(request, None)
        if place is None or not place.capped:
            return
        held = self._held[place.source] - 1
        if held:
            self._held[place.source] = held
        else:
            del self._held[place.source]

    def _reclaimable(self, mine: int) -> Hashable | None:
        """The newest waiting request of the heaviest source that has one, if it holds at least two more than `mine`:
        a place moves only when it evens the shares (a source holding one more would just trade places with the
        newcomer, over and over, among many equal sources), and a source never yields to itself."""
        candidates = [(self._held[place.source], order, request)
                      for order, (request, place) in enumerate(self._places.items())
                      if place.waiting and place.capped and self._held[place.source] > mine + 1]
        return max(candidates)[2] if candidates else None
