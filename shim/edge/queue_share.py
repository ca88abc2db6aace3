"""Who holds the queue's places, and whose place goes to a lighter source when it is full (docs/operations.md,
"Bounds per client"). Bookkeeping only: the admission refuses."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Hashable

USE_HALF_LIFE_SECONDS = 1.0

Peer = str | None  # the client's address without its port


@dataclass(frozen=True)
class QueueAdmission:
    admitted: bool
    reclaim: Hashable | None = None  # the request whose place it took, to give up now
    over: str | None = None  # "peer" or "total"


@dataclass
class _Place:
    source: Hashable
    capped: bool


@dataclass
class QueueShare:
    total: int
    per_source: int | None  # None: no share, and no place reclaimed
    source: Callable[[Peer], Hashable] = lambda peer: peer
    exempt: Callable[[Peer], bool] = lambda peer: peer is None
    waiting: Callable[[Hashable], bool] = lambda request: False  # in its first wait for the turn
    clock: Callable[[], float] = time.monotonic
    _places: dict[Hashable, _Place] = field(default_factory=dict)  # oldest first
    _held: dict[Hashable, int] = field(default_factory=dict)
    _line: dict[Hashable, Hashable] = field(default_factory=dict)  # request -> source
    _use: dict[Hashable, tuple[float, float]] = field(default_factory=dict)  # source -> (admissions, at)

    def __len__(self) -> int:
        return len(self._places)

    def held_by(self, peer: Peer) -> int:
        return self._held.get(self.source(peer), 0)

    def admit(self, request: Hashable, peer: Peer) -> QueueAdmission:
        """When the queue is full, a waiting request's place may go to it (_reclaimable)."""
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
            if len(self._use) > 64 * self.total:
                self._use = {other: use for other, use in self._use.items() if self.used(other) >= 0.01}

    def used(self, source: Hashable) -> float:
        count, at = self._use.get(source, (0.0, 0.0))
        return count * 0.5 ** ((self.clock() - at) / USE_HALF_LIFE_SECONDS)

    def line_up(self, request: Hashable, peer: Peer) -> tuple[bool, Hashable | None]:
        """(in line, the request it pushed out): a source that used the queue less lately pushes out the one that
        used it most, so a flood of sources never keeps a quiet one waiting."""
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
        """Returns the request in line given the freed place; a second call is a no-op."""
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
        """The newest `waiting` request of a source holding two more than `mine`: one more would just trade places
        with the newcomer, over and over, among many equal sources."""
        candidates = [(self._held[place.source], order, request)
                      for order, (request, place) in enumerate(self._places.items())
                      if self.waiting(request) and place.capped and self._held[place.source] > mine + 1]
        return max(candidates)[2] if candidates else None
