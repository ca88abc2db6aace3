"""Mapping onto the model: orderings, waves and the greedy packing into calls of at most 16 questions."""
import math
from collections import Counter

import pytest

from shim.errors import UnprocessableRequest
from shim.port.chunking import MAX_QUESTIONS_PER_CALL
from shim.semif.plan import plan
from shim.semif.request import Decision, Option


def decision(decision_id: str, options: int = 2, orderings: str = "none") -> Decision:
    return Decision(decision_id, f"question {decision_id}?",
                    tuple(Option(f"o{k}", f"option {k}") for k in range(options)), orderings)


def test_one_decision_is_one_call_with_field_q_and_the_callers_order_and_no_state():
    calls = plan([decision("d", options=3)], 64)
    assert len(calls) == 1
    request = calls[0].request([decision("d", options=3)])
    assert request == {"questions": {"q": {
        "type": "choice", "instructions": "question d?",
        "criteria": {"o0": "option 0", "o1": "option 1", "o2": "option 2"}}}}
    assert list(request["questions"]["q"]["criteria"]) == ["o0", "o1", "o2"]


@pytest.mark.parametrize("count, sizes, last_fields", [
    (16, [16], ["q%d" % n for n in range(1, 17)]),
    (17, [16, 1], ["q"]),
    (40, [16, 16, 8], ["q%d" % n for n in range(1, 9)]),
])
def test_greedy_packing_in_request_order(count, sizes, last_fields):
    decisions = [decision(f"d{n}") for n in range(count)]
    calls = plan(decisions, 64)
    assert [len(call.slots) for call in calls] == sizes
    assert [call.index for call in calls] == list(range(len(sizes)))
    assert [slot.decision for call in calls for slot in call.slots] == list(range(count))
    assert [slot.field for slot in calls[-1].slots] == last_fields
    request = calls[0].request(decisions)
    assert list(request["questions"]) == [slot.field for slot in calls[0].slots]
    assert [q["instructions"] for q in request["questions"].values()] == [f"question d{n}?" for n in range(sizes[0])]


def test_decision_ids_never_reach_a_call():
    decisions = [Decision("secret-id-%d" % n, "which?", (Option("a", "A"), Option("b", "B")), "rotations")
                 for n in range(20)]
    for call in plan(decisions, 64):
        assert "secret-id" not in repr(call.request(decisions))


def test_rotations_put_each_option_in_each_position_once():
    rotations = decision("d", options=5, orderings="rotations").option_orders
    assert len(rotations) == 5
    assert [option.id for option in rotations[0]] == ["o0", "o1", "o2", "o3", "o4"]
    for position in range(5):
        assert sorted(ordering[position].id for ordering in rotations) == ["o0", "o1", "o2", "o3", "o4"]


def test_all_is_every_permutation_with_the_callers_order_first():
    permutations = decision("d", options=4, orderings="all").option_orders
    assert len(permutations) == math.factorial(4)
    assert len({tuple(option.id for option in p) for p in permutations}) == 24
    assert [option.id for option in permutations[0]] == ["o0", "o1", "o2", "o3"]


def test_waves_never_repeat_a_decision_within_a_call_and_wave_0_is_the_request_as_written():
    decisions = [decision("a", 3, "rotations"), decision("b", 2), decision("c", 4, "all"), decision("d", 2)]
    calls = plan(decisions, 64)
    for call in calls:
        assert len({slot.decision for slot in call.slots}) == len(call.slots)
        assert len({slot.ordering for slot in call.slots}) == 1
    wave0 = [call for call in calls if call.slots[0].ordering == 0]
    assert len(wave0) == 1
    assert [(slot.decision, [o.id for o in slot.options]) for slot in wave0[0].slots] == \
        [(n, [o.id for o in d.options]) for n, d in enumerate(decisions)]
    assert wave0[0].request(decisions) == plan(
        [Decision(d.id, d.question, d.options) for d in decisions], 64)[0].request(decisions)
    assert Counter(slot.decision for call in calls for slot in call.slots) == {0: 3, 1: 1, 2: 24, 3: 1}
    waves = [call.slots[0].ordering for call in calls]
    assert waves == sorted(waves)


def test_orderings_count_toward_the_cap():
    assert len(plan([decision("a", 4, "all")], 24)) == 24
    with pytest.raises(UnprocessableRequest, match="scores 25 orderings after expansion; 1..24 are allowed"):
        plan([decision("a", 4, "all"), decision("b")], 24)
    with pytest.raises(UnprocessableRequest, match="scores 4 orderings"):
        plan([decision("a", 4, "rotations")], 3)


def test_max_questions_per_call_is_the_models_limit():
    assert MAX_QUESTIONS_PER_CALL == 16
