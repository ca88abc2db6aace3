"""Who holds the server's connections, and which give way when a request needs room (docs/operations.md,
"Bounds per client"). Bookkeeping only: the server closes what it names."""
from __future__ import annotations

import ipaddress
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable

Peer = str | None  # the client's address without its port; None on a Unix socket


@dataclass(frozen=True)
class ConnectionAdmission:
    admitted: bool
    evict: tuple[Hashable, ...] = ()
    over: str | None = None  # "peer" or "total"


@dataclass
class _Entry:
    peer: Peer  # source_of
    capped: bool
    busy: int = 0
    in_head: bool = False  # not admitted yet: closing it loses no admitted work


@dataclass
class Roster:
    total: int | None = None
    per_peer: int | None = None
    exempt: Callable[[Peer], bool] = lambda peer: peer is None
    _entries: dict[Hashable, _Entry] = field(default_factory=dict)
    _idle: "OrderedDict[Hashable, None]" = field(default_factory=OrderedDict)  # oldest idle first
    _per_peer: dict[Peer, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._entries)

    def held_by(self, peer: Peer) -> int:
        return self._per_peer.get(source_of(peer), 0)

    @property
    def busy(self) -> int:
        return len(self._entries) - len(self._idle)

    def is_idle(self, connection: Hashable) -> bool:
        return connection in self._idle

    def opened(self, connection: Hashable, peer: Peer) -> None:
        capped = self.per_peer is not None and not self.exempt(peer)
        source = source_of(peer)
        self._entries[connection] = _Entry(source, capped)
        self._idle[connection] = None
        if capped:
            self._per_peer[source] = self._per_peer.get(source, 0) + 1

    def closed(self, connection: Hashable) -> None:
        """A second call is a no-op."""
        entry = self._entries.pop(connection, None)
        if entry is None:
            return
        self._idle.pop(connection, None)
        if entry.capped:
            left = self._per_peer[entry.peer] - 1
            if left:
                self._per_peer[entry.peer] = left
            else:
                del self._per_peer[entry.peer]

    def request_began(self, connection: Hashable) -> None:
        entry = self._entries.get(connection)
        if entry is not None:
            entry.busy += 1
            entry.in_head = True
            self._idle.pop(connection, None)

    def request_answered(self, connection: Hashable) -> None:
        entry = self._entries.get(connection)
        if entry is not None and entry.busy:
            entry.busy -= 1
            entry.in_head = False
            if not entry.busy:
                self._idle[connection] = None

    def admit_peer(self, connection: Hashable) -> ConnectionAdmission:
        """Asked at a request's first byte, so that a head trickled over many connections is refused as it begins."""
        entry = self._entries.get(connection)
        if entry is None:
            return ConnectionAdmission(True)
        verdict = self._peer_room(connection, entry)
        for victim in verdict.evict:
            self.closed(victim)
        return verdict

    def _peer_room(self, connection: Hashable, entry: _Entry) -> ConnectionAdmission:
        if not entry.capped:
            return ConnectionAdmission(True)
        excess = self._per_peer[entry.peer] - self.per_peer  # type: ignore[operator]
        if excess <= 0:
            return ConnectionAdmission(True)
        mine = self._oldest_idle(connection, lambda other: other.peer == entry.peer, excess)
        if len(mine) < excess:
            return ConnectionAdmission(False, over="peer")
        return ConnectionAdmission(True, tuple(mine))

    def admit(self, connection: Hashable) -> ConnectionAdmission:
        """The caller closes the connections in `evict`, already forgotten here."""
        entry = self._entries.get(connection)
        if entry is None:
            return ConnectionAdmission(True)
        peer = self._peer_room(connection, entry)
        if not peer.admitted:
            return peer
        evict: list[Hashable] = list(peer.evict)
        if self.total is not None:
            excess = len(self._entries) - len(evict) - self.total
            if excess > 0:
                chosen = set(evict)
                mine = self._held(entry)
                # a lighter source's kept-alive connection never goes for a heavier one
                others = self._oldest_idle(connection, lambda other: self._held(other) > mine, excess, chosen)
                chosen.update(others)
                others += self._heaviest_heads(connection, entry, excess - len(others), chosen)
                others += self._oldest_idle(connection, lambda other: self._held(other) >= mine,
                                            excess - len(others), chosen)
                if len(others) < excess:
                    return ConnectionAdmission(False, over="total")
                evict.extend(others)
        entry.in_head = False
        for victim in evict:
            self.closed(victim)
        return ConnectionAdmission(True, tuple(evict))

    def _held(self, entry: _Entry) -> int:
        return self._per_peer.get(entry.peer, 0) if entry.capped else 0

    def _heaviest_heads(self, asking: Hashable, entry: _Entry, count: int, skip: set) -> list[Hashable]:
        """A complete head outranks one still arriving, never from a source lighter than its own."""
        if count <= 0:
            return []
        held = dict(self._per_peer)
        for other in skip:
            victim = self._entries[other]
            if victim.capped:
                held[victim.peer] -= 1
        mine = held.pop(entry.peer, 0) if entry.capped else 0
        found: list[Hashable] = []
        while len(found) < count and held:
            heaviest = max(held, key=held.__getitem__)
            if held[heaviest] < mine:
                break
            head = next((other for other, candidate in self._entries.items()
                         if other != asking and other not in skip and candidate.in_head and candidate.busy == 1
                         and candidate.capped and candidate.peer == heaviest), None)
            if head is None:
                del held[heaviest]
                continue
            found.append(head)
            skip.add(head)
            held[heaviest] -= 1
        return found

    def _oldest_idle(self, asking: Hashable, wanted: Callable[[_Entry], bool], count: int,
                     skip: Iterable[Hashable] = ()) -> list[Hashable]:
        skipped = set(skip)
        found: list[Hashable] = []
        if count <= 0:
            return found
        for other in self._idle:
            if len(found) == count:
                break
            if other != asking and other not in skipped and wanted(self._entries[other]):
                found.append(other)
        return found


def _ip(peer: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An IPv4-mapped IPv6 address as IPv4."""
    try:
        address = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def source_of(peer: Peer) -> Peer:
    """An IPv6 address's /64, as HAProxy keys its stick tables."""
    address = None if peer is None else _ip(peer)
    if address is None:
        return peer
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def address_matcher(networks: Iterable[str]) -> Callable[[Peer], bool]:
    """A Unix socket always matches: it is never one remote client."""
    parsed = tuple(ipaddress.ip_network(network.strip(), strict=False) for network in networks)

    def matches(peer: Peer) -> bool:
        address = None if peer is None else _ip(peer)
        return address is None or any(address in network for network in parsed)

    return matches
