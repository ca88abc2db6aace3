"""The queue's places per source (shim/edge/queue_share.py): a source's share, the balancers exempt, and, when the queue
is full, the heaviest source's newest waiting request giving way to a lighter source's."""
from __future__ import annotations

import pytest

from shim.edge.queue_share import QueueAdmission, QueueShare
from shim.server.roster import address_matcher, source_of

ATTACKER, VICTIM, THIRD = "10.0.0.1", "10.0.0.2", "10.0.0.3"
BALANCER = "10.9.0.7"


WAITING: set[str] = set()  # the requests in their first wait for the model's turn


@pytest.fixture(autouse=True)
def nothing_waiting():
    WAITING.clear()


def share(total: int = 8, per_source: int | None = 2) -> QueueShare:
    return QueueShare(total, per_source, source=source_of, exempt=address_matcher([f"{BALANCER}/32"]),
                      waiting=WAITING.__contains__)


def fill(queue: QueueShare, peer: str, count: int, waiting: bool = True) -> list[str]:
    """`count` requests from `peer` admitted, each waiting for the lock when `waiting`."""
    names = [f"{peer}#{len(queue)}+{n}" for n in range(count)]
    for name in names:
        assert queue.admit(name, peer).admitted
        if waiting:
            WAITING.add(name)
    return names


def test_a_source_past_its_share_is_refused_and_another_admitted():
    queue = share()
    fill(queue, ATTACKER, 2)
    assert queue.admit("one more", ATTACKER) == QueueAdmission(False, over="peer")
    assert queue.admit("victim", VICTIM) == QueueAdmission(True)
    assert queue.held_by(ATTACKER) == 2 and len(queue) == 3


def test_an_answered_request_frees_its_sources_place():
    queue = share()
    first, _ = fill(queue, ATTACKER, 2)
    queue.left(first)
    queue.left(first)  # a second call is a no-op
    assert queue.held_by(ATTACKER) == 1 and queue.admit("again", ATTACKER).admitted


def test_one_ipv6_64_is_one_source():
    queue = share()
    fill(queue, "2001:db8::1", 1)
    fill(queue, "2001:db8::2", 1)
    assert not queue.admit("third", "2001:db8::3").admitted
    assert queue.admit("other 64", "2001:db8:0:1::1").admitted


def test_a_balancers_requests_are_exempt_from_the_share_but_fill_the_queue():
    queue = share(total=4)
    fill(queue, BALANCER, 4)
    assert queue.held_by(BALANCER) == 0
    assert queue.admit("direct", ATTACKER) == QueueAdmission(False, over="total")


def test_no_share_admits_one_source_up_to_the_whole_queue_and_reclaims_nothing():
    queue = share(total=4, per_source=None)
    fill(queue, ATTACKER, 4)
    assert queue.admit("victim", VICTIM) == QueueAdmission(False, over="total")


def test_a_full_queue_gives_the_heaviest_sources_newest_waiting_place_to_a_lighter_source():
    queue = share(total=6, per_source=3)
    attacker = fill(queue, ATTACKER, 3)
    fill(queue, THIRD, 2)
    fill(queue, VICTIM, 1)
    verdict = queue.admit("victim's second", VICTIM)
    assert verdict == QueueAdmission(True, reclaim=attacker[-1])
    assert queue.held_by(ATTACKER) == 2 and queue.held_by(VICTIM) == 2 and len(queue) == 6
    queue.left(attacker[-1])  # the reclaimed request answered: already forgotten
    assert queue.held_by(ATTACKER) == 2 and len(queue) == 6


@pytest.mark.parametrize("total, per_source, held, newcomer, reclaims", [
    (4, 2, {ATTACKER: 2, VICTIM: 2}, THIRD, True),  # holds none, two fewer than the heaviest
    (4, 3, {ATTACKER: 2, VICTIM: 2}, VICTIM, False),  # holds as many as the heaviest
    (3, 3, {ATTACKER: 2, VICTIM: 1}, VICTIM, False),  # holds one fewer: the two would only trade places
    (2, 2, {ATTACKER: 1, THIRD: 1}, VICTIM, False),  # among sources holding one each, no place moves
])
def test_a_place_moves_only_to_a_source_holding_at_least_two_fewer(total, per_source, held, newcomer, reclaims):
    queue = share(total=total, per_source=per_source)
    for peer, count in held.items():
        fill(queue, peer, count)
    verdict = queue.admit("newcomer's", newcomer)
    assert (verdict.reclaim is not None) == reclaims
    assert verdict.admitted == reclaims and verdict.over == (None if reclaims else "total")


def test_nothing_waiting_is_nothing_reclaimed():
    queue = share(total=4, per_source=4)
    fill(queue, ATTACKER, 4, waiting=False)  # admitted, their bodies still arriving
    assert queue.admit("victim", VICTIM) == QueueAdmission(False, over="total")


def test_a_request_that_held_the_lock_is_never_reclaimed():
    queue = share(total=2, per_source=2)
    scoring, waiting = fill(queue, ATTACKER, 2)
    WAITING.discard(scoring)  # it holds the turn now
    assert queue.admit("victim", VICTIM).reclaim == waiting
    assert queue.admit("third", THIRD) == QueueAdmission(False, over="total")


def test_the_heaviest_source_with_a_waiting_request_gives_way_when_the_heaviest_has_none():
    queue = share(total=5, per_source=3)
    fill(queue, ATTACKER, 3, waiting=False)
    third = fill(queue, THIRD, 2)
    assert queue.admit("victim", VICTIM).reclaim == third[-1]


def test_a_balancers_requests_are_never_reclaimed_and_reclaim_from_a_direct_source():
    queue = share(total=4, per_source=2)
    fill(queue, BALANCER, 2)
    attacker = fill(queue, ATTACKER, 2)
    assert queue.admit("victim", VICTIM).reclaim == attacker[-1]
    assert queue.admit("through the balancer", BALANCER) == QueueAdmission(False, over="total")  # 1 each now


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sources(count: int) -> list[str]:
    return [f"10.1.0.{n}" for n in range(1, count + 1)]


def test_a_full_queue_hands_its_next_place_to_the_request_in_line_of_the_source_that_used_it_least():
    clock = Clock()
    queue = QueueShare(2, 1, source=source_of, exempt=address_matcher([]), clock=clock,
                       waiting=WAITING.__contains__)
    first, second, flooder = sources(3)
    for turn in range(3):  # the flooder used the queue three times, lately
        assert queue.admit(f"flooder#{turn}", flooder).admitted
        queue.left(f"flooder#{turn}")
    fill(queue, first, 1)
    fill(queue, second, 1)
    assert queue.admit("flooder's", flooder).over == "total"
    assert queue.line_up("flooder's", flooder) == (True, None)  # first in line
    assert queue.line_up("quiet", VICTIM) == (True, None)
    assert queue.left(f"{second}#1+0") == "quiet"  # the place freed goes to the source that used it least
    assert queue.held_by(VICTIM) == 1 and len(queue) == 2
    assert queue.left(f"{first}#0+0") == "flooder's"


def test_a_quiet_source_goes_first_and_pushes_the_busiest_out_of_a_full_line():
    clock = Clock()
    queue = QueueShare(2, 1, source=source_of, exempt=address_matcher([]), clock=clock,
                       waiting=WAITING.__contains__)
    busy = sources(4)
    for source in busy:  # each used the queue lately
        assert queue.admit(source, source).admitted
        queue.left(source)
    fill(queue, busy[0], 1)
    fill(queue, busy[1], 1)
    assert queue.line_up("busy 3", busy[2]) == (True, None)
    assert queue.line_up("busy 4", busy[3]) == (True, None)  # the line is full: MAX_QUEUE long
    clock.now += 0.5
    in_line, pushed = queue.line_up("quiet", VICTIM)
    assert in_line and pushed in ("busy 3", "busy 4")
    assert queue.line_up("busy 2 again", busy[1]) == (False, None)  # no lighter than those in line
    assert queue.left(next(iter(queue._places))) == "quiet"


def test_a_source_waits_in_line_once_and_only_under_a_share():
    queue = QueueShare(1, 1, source=source_of, exempt=address_matcher([f"{BALANCER}/32"]),
                       waiting=WAITING.__contains__)
    fill(queue, ATTACKER, 1)
    assert queue.line_up("victim", VICTIM) == (True, None)
    assert queue.line_up("victim's second", VICTIM) == (False, None)
    assert queue.line_up("balancer's", BALANCER) == (False, None)
    assert QueueShare(1, None).line_up("anyone", VICTIM) == (False, None)


def test_recent_use_is_forgotten_by_half_every_half_life():
    clock = Clock()
    queue = QueueShare(4, 2, source=source_of, clock=clock, waiting=WAITING.__contains__)
    queue.admit("a", ATTACKER)
    queue.admit("b", ATTACKER)
    assert queue.used(ATTACKER) == 2
    clock.now += 2
    assert queue.used(ATTACKER) == 0.5
