"""Who holds the queue's places, and whose place goes to a lighter source when it is full (docs/operations.md,
"Bounds per client"). Bookkeeping only: the admission refuses, and tells the reclaimed request to give up."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Hashable

USE_HALF_LIFE_SECONDS = 1.0  # how fast a source's recent admissions are forgotten, for its turn in the line

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


@dataclass
class QueueShare:
    total: int  # MAX_QUEUE
    per_source: int | None  # MAX_QUEUE_PER_PEER; None: no share, and no place reclaimed
    source: Callable[[Peer], Hashable] = lambda peer: peer
    exempt: Callable[[Peer], bool] = lambda peer: peer is None
    waiting: Callable[[Hashable], bool] = lambda request: False  # in its first wait for the turn: reclaimable
    clock: Callable[[], float] = time.monotonic
    _places: dict[Hashable, _Place] = field(default_factory=dict)  # oldest admitted first
    _held: dict[Hashable, int] = field(default_factory=dict)  # places per capped source
    _line: dict[Hashable, Hashable] = field(default_factory=dict)  # request -> its source, waiting for a place
    _use: dict[Hashable, tuple[float, float]] = field(default_factory=dict)  # source -> (admissions, at), decaying

    def __len__(self) -> int:
        return len(self._places)

    def held_by(self, peer: Peer) -> int:
        return self._held.get(self.source(peer), 0)

    def admit(self, request: Hashable, peer: Peer) -> QueueAdmission:
        """May `request` from `peer` take a place? When the queue is full, the place of a waiting request of a source
        holding at least two more than this one's (_reclaimable; forgotten here) goes to it."""
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
            self._forget(victim)
        self._take(request, source, capped)
        return QueueAdmission(True, victim)

    def _take(self, request: Hashable, source: Hashable, capped: bool) -> None:
        self._places[request] = _Place(source, capped)
        if capped:
            self._held[source] = self._held.get(source, 0) + 1
            self._use[source] = (self.used(source) + 1, self.clock())
            if len(self._use) > 64 * self.total:  # the sources long quiet are forgotten
                self._use = {other: use for other, use in self._use.items() if self.used(other) >= 0.01}

    def used(self, source: Hashable) -> float:
        """The source's admissions, each counting half as much every USE_HALF_LIFE_SECONDS."""
        count, at = self._use.get(source, (0.0, 0.0))
        return count * 0.5 ** ((self.clock() - at) / USE_HALF_LIFE_SECONDS)

    def line_up(self, request: Hashable, peer: Peer) -> tuple[bool, Hashable | None]:
        """A request refused for a full queue waits in line for the next place freed: (in line, the request it
        pushed out). The line holds at most MAX_QUEUE requests, one per source; a source that used the queue less
        recently pushes out the one that used it most, so a flood of sources never keeps a quiet one waiting."""
        source = self.source(peer)
        if self.per_source is None or self.exempt(peer) or source in self._line.values():
            return False, None
        pushed = None
        if len(self._line) >= self.total:
            pushed = max(self._line, key=lambda other: self.used(self._line[other]))
            if self.used(self._line[pushed]) <= self.used(source):
                return False, None
            del self._line[pushed]
        self._line[request] = source
        return True, pushed

    def out_of_line(self, request: Hashable) -> None:
        self._line.pop(request, None)

    def left(self, request: Hashable) -> Hashable | None:
        """Answered; a second call is a no-op. The place freed goes to the request in line whose source used the queue
        least recently, returned."""
        self._forget(request)
        if not self._line or len(self._places) >= self.total:
            return None
        ready = [waiting for waiting, source in self._line.items() if self._held.get(source, 0) < self.per_source]
        if not ready:
            return None
        turn = min(ready, key=lambda waiting: self.used(self._line[waiting]))
        self._take(turn, self._line.pop(turn), True)
        return turn

    def _forget(self, request: Hashable) -> None:
        place = self._places.pop(request, None)
        if place is None or not place.capped:
            return
        held = self._held[place.source] - 1
        if held:
            self._held[place.source] = held
        else:
            del self._held[place.source]

    def _reclaimable(self, mine: int) -> Hashable | None:
        """The newest `waiting` request of the heaviest source that has one, if
        it holds at least two more than `mine`: a place moves only when it evens the shares (a source holding one
        more would just trade places with the newcomer, over and over, among many equal sources), and a source never
        yields to itself."""
        candidates = [(self._held[place.source], order, request)
                      for order, (request, place) in enumerate(self._places.items())
                      if self.waiting(request) and place.capped and self._held[place.source] > mine + 1]
        return max(candidates)[2] if candidates else None
