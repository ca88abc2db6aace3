"""Interpreters timed round by round, with an A/A control, and a comparison void where both run the same library."""
import itertools

from gpucheck import interpreter_rounds
from gpucheck.interpreter_rounds import OWN, OWN_AGAIN, SHARED, alternated, orders, verdict


def test_the_order_rotates_every_round_so_no_arm_is_always_first_or_last():
    assert orders(["a", "b", "c"], 4) == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def test_the_arms_run_interleaved_round_by_round_never_one_after_the_other():
    ran = []

    def arm(name):
        return lambda shape: ran.append((shape, name)) or 10.0

    timed = alternated({OWN: arm(OWN), OWN_AGAIN: arm(OWN_AGAIN), SHARED: arm(SHARED)}, ["anchor", "long16"], 3,
                       60.0)
    assert ran[:6] == [("anchor", OWN), ("anchor", OWN_AGAIN), ("anchor", SHARED),
                       ("anchor", OWN_AGAIN), ("anchor", SHARED), ("anchor", OWN)]
    assert {shape: {arm: len(ms) for arm, ms in arms.items()} for shape, arms in timed.items()} == \
        {"anchor": {OWN: 3, OWN_AGAIN: 3, SHARED: 3}, "long16": {OWN: 3, OWN_AGAIN: 3, SHARED: 3}}


def test_each_shape_gets_at_least_one_round_when_time_is_out():
    ticks = itertools.count(0, 100.0)
    timed = alternated({OWN: lambda s: 1.0, OWN_AGAIN: lambda s: 1.0, SHARED: lambda s: 1.0}, ["a", "b"], 20, 1.0,
                       clock=lambda: next(ticks))
    assert all(len(ms) == 1 for arms in timed.values() for ms in arms.values())


def test_the_verdict_shows_the_a_a_control_beside_the_a_b_and_is_void_on_a_shared_own_binary():
    timed = {"anchor": {OWN: [30.0, 31.0, 30.0], OWN_AGAIN: [30.3, 30.0, 30.3], SHARED: [34.5, 34.5, 34.0]}}
    static = verdict(timed, own_is_static=True)
    assert static["void"] == "" and static["shapes"]["anchor"]["ab_percent"] == 15.0
    assert static["shapes"]["anchor"]["aa_percent"] == 1.0
    shared = verdict(timed, own_is_static=False)
    assert shared["void"].startswith("void: the interpreter's own binary runs the shared libpython")
    assert interpreter_rounds.percent(None, 30.0) is None
