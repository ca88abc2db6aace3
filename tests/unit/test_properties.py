"""Properties of the shim's pure logic, over generated requests (hypothesis): planning (chunking and waves),
combining (averaging over orderings) and validation."""
from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shim.errors import UnprocessableRequest
from shim.port.chunking import MAX_QUESTIONS_PER_CALL
from shim.semif.answers import averaged_result
from shim.semif.plan import plan
from shim.semif.request import Decision, Option, shared_body

EXAMPLES = settings(max_examples=200, deadline=None)
ids = st.text(alphabet="ab#o01", min_size=1, max_size=4)


@st.composite
def decisions(draw, min_size=1, max_size=40) -> list[Decision]:
    count = draw(st.integers(min_size, max_size))
    names = draw(st.lists(ids, min_size=count, max_size=count, unique=True))
    made = []
    for name in names:
        option_ids = draw(st.lists(ids, min_size=2, max_size=16, unique=True))
        modes = ["none", "rotations"] + (["all"] if len(option_ids) <= 4 else [])
        options = tuple(Option(option_id, f"{option_id} described") for option_id in option_ids)
        made.append(Decision(name, f"question of {name}?", options, draw(st.sampled_from(modes))))
    return made


# --- planning -----------------------------------------------------------------------------------------------------

@EXAMPLES
@given(asked=decisions())
def test_calls_are_greedy_chunks_of_each_wave_in_request_order(asked):
    calls = plan(asked, max_decisions=10**6)
    expanded = [decision.option_orders for decision in asked]
    assert [call.index for call in calls] == list(range(len(calls)))
    position = 0
    for wave in range(max(map(len, expanded))):
        members = [(index, orderings[wave]) for index, orderings in enumerate(expanded) if len(orderings) > wave]
        sizes = [MAX_QUESTIONS_PER_CALL] * (len(members) // MAX_QUESTIONS_PER_CALL)
        sizes += [len(members) % MAX_QUESTIONS_PER_CALL] if len(members) % MAX_QUESTIONS_PER_CALL else []
        wave_calls = calls[position:position + len(sizes)]
        position += len(sizes)
        assert [len(call.slots) for call in wave_calls] == sizes  # greedy: full calls, then the rest
        slots = [slot for call in wave_calls for slot in call.slots]
        assert [(slot.decision, slot.options) for slot in slots] == members  # request order, the wave's ordering
        assert all(slot.ordering == wave for slot in slots)
    assert position == len(calls)


@EXAMPLES
@given(asked=decisions())
def test_a_call_never_holds_two_orderings_of_a_decision_and_names_its_fields_by_position(asked):
    for call in plan(asked, max_decisions=10**6):
        assert 1 <= len(call.slots) <= MAX_QUESTIONS_PER_CALL
        in_call = [slot.decision for slot in call.slots]
        assert len(set(in_call)) == len(in_call)
        expected = ["q"] if len(call.slots) == 1 else [f"q{n}" for n in range(1, len(call.slots) + 1)]
        assert [slot.field for slot in call.slots] == expected
        request = call.request(asked)
        assert list(request["questions"]) == expected
        for slot in call.slots:
            assert list(request["questions"][slot.field]["criteria"]) == [option.id for option in slot.options]


@EXAMPLES
@given(asked=decisions(max_size=12))
def test_every_ordering_is_scored_once_and_counts_toward_the_cap(asked):
    expanded = [decision.option_orders for decision in asked]
    scored = sum(map(len, expanded))
    assert [len(orderings) for orderings in expanded] == [decision.ordering_count for decision in asked]
    calls = plan(asked, max_decisions=scored)
    seen = sorted((slot.decision, slot.ordering) for call in calls for slot in call.slots)
    assert seen == sorted((index, k) for index, orderings in enumerate(expanded) for k in range(len(orderings)))
    for index, orderings in enumerate(expanded):
        assert orderings[0] == asked[index].options  # the caller's order first
        assert len(set(orderings)) == len(orderings)
    with pytest.raises(UnprocessableRequest, match=f"scores {scored} orderings"):
        plan(asked, max_decisions=scored - 1)


# --- combining ----------------------------------------------------------------------------------------------------

def softmax(values: list[float]) -> list[float]:
    peak = max(values)
    weights = [math.exp(value - peak) for value in values]
    return [weight / sum(weights) for weight in weights]


def ordering_results(decision: Decision, score) -> list[dict]:
    """One result per ordering, as the model's argmax would top it (an exact tie to the smaller id)."""
    results = []
    for k, options in enumerate(decision.option_orders):
        option_ids = [option.id for option in options]
        probabilities = score(option_ids)
        by_id = dict(zip(option_ids, probabilities))
        results.append({"id": f"{decision.id}#o{k}", "option_ids": option_ids, "probabilities": probabilities,
                        "top": min(by_id, key=lambda option_id: (-by_id[option_id], option_id))})
    return results


@st.composite
def decision_with_orderings(draw) -> Decision:
    mode = draw(st.sampled_from(["rotations", "all"]))
    count = draw(st.integers(2, 4 if mode == "all" else 16))
    option_ids = draw(st.lists(ids, min_size=count, max_size=count, unique=True))
    return Decision("d", "q?", tuple(Option(option_id, "") for option_id in option_ids), mode)


finite = st.floats(min_value=-5, max_value=5, allow_nan=False)


@EXAMPLES
@given(decision=decision_with_orderings(), data=st.data())
def test_a_pure_position_bias_cancels_exactly(decision, data):
    base = {option.id: data.draw(finite) for option in decision.options}
    bias = data.draw(st.lists(finite, min_size=len(decision.options), max_size=len(decision.options)))
    results = ordering_results(decision, lambda option_ids: softmax(
        [base[option_id] + bias[position] for position, option_id in enumerate(option_ids)]))
    combined = averaged_result(decision, results)["combined"]
    assert combined["probabilities"] == pytest.approx(softmax([base[o] for o in decision.option_ids]), abs=1e-12)


@EXAMPLES
@given(decision=decision_with_orderings(), data=st.data())
def test_combined_probabilities_sum_to_one_and_agreement_and_spread_follow_from_the_orderings(decision, data):
    probability = st.floats(min_value=0, max_value=1, allow_nan=False)

    def score(option_ids: list[str]) -> list[float]:
        weights = data.draw(st.lists(probability, min_size=len(option_ids), max_size=len(option_ids)))
        assume(sum(weights) > 0)
        return [weight / sum(weights) for weight in weights]

    results = ordering_results(decision, score)
    averaged = averaged_result(decision, results)
    combined = averaged["combined"]
    assert averaged["orderings"] == results and averaged["option_ids"] == decision.option_ids
    assert math.isclose(math.fsum(combined["probabilities"]), 1.0, abs_tol=1e-12)
    assert combined["orderings"] == len(results) and combined["method"] == decision.orderings
    top = combined["probabilities"].index(max(combined["probabilities"]))
    assert combined["top"] == decision.option_ids[top]  # the first maximum in the caller's order
    assert combined["agreement"] == sum(result["top"] == combined["top"] for result in results) / len(results)
    for option_id in decision.option_ids:
        seen = [dict(zip(result["option_ids"], result["probabilities"]))[option_id] for result in results]
        assert combined["spread"][option_id] == [min(seen), max(seen)]


# --- validation ---------------------------------------------------------------------------------------------------

def as_body(asked: list[Decision]) -> dict:
    return {"state": {"ticket": 1}, "decisions": [
        {"id": decision.id, "question": decision.question, "orderings": decision.orderings,
         "options": [{"id": option.id, "description": option.description} for option in decision.options]}
        for decision in asked]}


def result_ids(decision: Decision) -> list[str]:
    return [decision.id] + ([f"{decision.id}#o{k}" for k in range(len(decision.option_orders))]
                            if decision.orderings != "none" else [])


@EXAMPLES
@given(asked=decisions(max_size=8))
def test_a_request_within_the_rules_is_accepted_unchanged_unless_its_result_ids_collide(asked):
    every_id = [result_id for decision in asked for result_id in result_ids(decision)]
    if len(set(every_id)) == len(every_id):
        state, parsed = shared_body(as_body(asked))
        assert state == {"ticket": 1} and parsed == asked
    else:
        with pytest.raises(UnprocessableRequest, match="result ids must be unique within the response"):
            shared_body(as_body(asked))


MUTATIONS = {
    "id": (lambda d: d.update(id=""), "id must be a nonempty string"),
    "question": (lambda d: d.update(question=7), "question must be a nonempty string"),
    "one option": (lambda d: d.update(options=d["options"][:1]), "options must hold 2..16 options"),
    "17 options": (lambda d: d.update(options=[{"id": str(n), "description": ""} for n in range(17)]),
                   "options must hold 2..16 options"),
    "same option id": (lambda d: d["options"].append(dict(d["options"][0])), "is not unique within the decision"),
    "option id type": (lambda d: d["options"][0].update(id=None), "options[0].id must be a string"),
    "description type": (lambda d: d["options"][-1].update(description=[]), ".description must be a string"),
    "orderings": (lambda d: d.update(orderings="some"), "orderings must be one of none, rotations, all"),
    "all above 4": (lambda d: d.update(orderings="all", options=[{"id": str(n), "description": ""}
                                                                 for n in range(5)]), "'all' is allowed up to 4"),
}


@EXAMPLES
@given(asked=decisions(max_size=8), data=st.data())
def test_a_broken_rule_is_refused_naming_the_decision_and_field(asked, data):
    every_id = [result_id for decision in asked for result_id in result_ids(decision)]
    assume(len(set(every_id)) == len(every_id))
    body = as_body(asked)
    index = data.draw(st.integers(0, len(asked) - 1))
    mutate, message = MUTATIONS[data.draw(st.sampled_from(sorted(MUTATIONS)))]
    mutate(body["decisions"][index])
    assume(len(body["decisions"][index]["options"]) <= 16 or message.startswith("options must hold"))
    with pytest.raises(UnprocessableRequest) as refused:
        shared_body(body)
    assert str(refused.value).startswith(f"decisions[{index}]") and message in str(refused.value)


def test_the_permutations_of_all_are_itertools_own():
    decision = Decision("d", "q?", tuple(Option(c, c) for c in "abcd"), "all")
    assert decision.option_orders == list(itertools.permutations(decision.options))
