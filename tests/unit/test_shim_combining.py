"""The averaged view over orderings: mean log p renormalised, first maximum, agreement, spread."""
import math

import pytest

from shim.errors import IncompleteAnswer
from shim.semif.answers import LOG_FLOOR, averaged_result, ordering_result
from shim.semif.plan import plan
from shim.semif.request import Decision, Option
from wire.answer import CallAnswer

DECISION = Decision("d", "which?", (Option("x", "X"), Option("y", "Y"), Option("z", "Z")), "rotations")


def result(option_ids, probabilities, top):
    return {"option_ids": option_ids, "probabilities": probabilities, "top": top}


def test_mean_log_probability_renormalised_in_the_callers_order():
    orderings = [result(["x", "y", "z"], [0.5, 0.3, 0.2], "x"),
                 result(["y", "z", "x"], [0.6, 0.1, 0.3], "y"),
                 result(["z", "x", "y"], [0.2, 0.4, 0.4], "x")]
    combined = averaged_result(DECISION, orderings)["combined"]
    logs = {"x": [0.5, 0.3, 0.4], "y": [0.3, 0.6, 0.4], "z": [0.2, 0.1, 0.2]}
    means = {k: sum(math.log(v) for v in vs) / 3 for k, vs in logs.items()}
    total = sum(math.exp(m) for m in means.values())
    assert combined["probabilities"] == pytest.approx([math.exp(means[k]) / total for k in "xyz"], abs=1e-15)
    assert combined["top"] == "y" == max("xyz", key=lambda k: means[k])
    assert combined["agreement"] == 1 / 3
    assert combined["spread"] == {"x": [0.3, 0.5], "y": [0.3, 0.6], "z": [0.1, 0.2]}
    assert combined["method"] == "rotations" and combined["orderings"] == 3


def test_first_maximum_in_the_callers_order_wins_a_tie():
    orderings = [result(["x", "y", "z"], [0.4, 0.4, 0.2], "x"), result(["y", "z", "x"], [0.4, 0.2, 0.4], "x"),
                 result(["z", "x", "y"], [0.2, 0.4, 0.4], "x")]
    assert averaged_result(DECISION, orderings)["combined"]["top"] == "x"


def test_zero_probability_is_floored_before_the_log():
    orderings = [result(["x", "y", "z"], [1.0, 0.0, 0.0], "x"), result(["y", "z", "x"], [0.0, 0.0, 1.0], "x"),
                 result(["z", "x", "y"], [0.0, 1.0, 0.0], "x")]
    combined = averaged_result(DECISION, orderings)["combined"]
    assert combined["probabilities"][0] == 1.0
    assert combined["probabilities"][1:] == pytest.approx([1e-300, 1e-300], rel=1e-12)
    assert LOG_FLOOR == 1e-300
    assert combined["agreement"] == 1.0


def test_an_answer_missing_an_option_id_is_never_guessed():
    decision = Decision("d", "which?", (Option("x", "X"), Option("y", "Y")))
    call = plan([decision], 64)[0]
    native = {"type": "choice", "probabilities": {"x": 1.0}, "choice": "x", "confidence": 1.0}
    answer = {"answers": {"q": native}, "usage": {"input_tokens": 5, "output_tokens": 1},
              "timing": {"inference_ms": 1.0}, "calibration": {}, "prompt_sha256": "", "prompt_version": "",
              "model_facts": {}}
    with pytest.raises(IncompleteAnswer, match=r"lacks option ids \['y'\]"):
        ordering_result(decision, "d", call.slots[0], call, CallAnswer.read(answer))
    del answer["answers"]["q"]
    with pytest.raises(IncompleteAnswer, match="lacks 'q'"):
        ordering_result(decision, "d", call.slots[0], call, CallAnswer.read(answer))
