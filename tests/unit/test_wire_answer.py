"""One call's answer on the wire: the keys the model adds, and the typed answer the shim reads it into once."""
import math

import pytest

from shim.errors import Failure
from shim.metrics import TRITON_ERROR_KINDS
from wire.answer import AnswerUnreadable, CallAnswer, ChoiceAnswer, NoulAnswer, ScoreAnswer, written
from wire.protocol import Kind

from .fake_model import FakeModel

REQUEST = {"state": "s", "questions": {
    "team": {"type": "choice", "criteria": {"billing": "b", "delivery": "d"}},
    "urgency": {"type": "score", "criteria": ["Low", "High"]},
    "refund": {"type": "noul"}}}


def answer() -> dict:
    return FakeModel(base={"billing": 1.0}).answer_for(REQUEST)


def test_the_three_types_are_read_into_their_classes_with_predicts_numbers():
    raw = answer()
    read = CallAnswer.read(raw)
    assert list(read.answers) == ["team", "urgency", "refund"]
    team, urgency, refund = read.answers.values()
    assert isinstance(team, ChoiceAnswer) and team.choice == "billing"
    assert team.probabilities == raw["answers"]["team"]["probabilities"] and team.native is raw["answers"]["team"]
    assert isinstance(urgency, ScoreAnswer) and urgency.score == raw["answers"]["urgency"]["score"]
    assert urgency.legend == {"0": "Low", "1": "High"}
    assert isinstance(refund, NoulAnswer) and refund.noul == raw["answers"]["refund"]["noul"]
    assert (read.input_tokens, read.output_tokens, read.inference_ms) == (130, 3, 12.5)
    assert read.prompt_sha256 == raw["prompt_sha256"] and read.model_facts == raw["model_facts"]


def test_an_integer_number_is_read_as_a_float():
    raw = answer()
    raw["answers"]["team"]["confidence"] = 1
    assert isinstance(CallAnswer.read(raw).answers["team"].confidence, float)


@pytest.mark.parametrize("spoil, message", [
    (lambda a: a.pop("timing"), "the answer lacks 'timing'"),
    (lambda a: a["usage"].pop("output_tokens"), "usage lacks 'output_tokens'"),
    (lambda a: a["usage"].update(input_tokens=True), "usage.input_tokens must be a count, got True"),
    (lambda a: a["answers"]["team"].pop("choice"), "answers['team'] lacks 'choice'"),
    (lambda a: a["answers"]["urgency"].pop("legend"), "answers['urgency'] lacks 'legend'"),
    (lambda a: a["answers"]["refund"].update(noul=math.nan), "answers['refund'].noul must be a finite number"),
    (lambda a: a["answers"]["team"]["probabilities"].update(billing="0.5"),
     "answers['team'].probabilities['billing'] must be a finite number"),
    (lambda a: a["answers"]["team"].update(type="box"), "answers['team'].type must be one of choice, score, noul"),
    (lambda a: a.update(answers=[]), "answers must be an object, got list"),
    (lambda a: a.update(prompt_sha256=None), "prompt_sha256 must be a string, got NoneType"),
])
def test_whatever_is_missing_or_mistyped_is_refused_by_name(spoil, message):
    raw = answer()
    spoil(raw)
    with pytest.raises(AnswerUnreadable, match=message.replace("[", r"\[").replace("(", r"\(")):
        CallAnswer.read(raw)


def test_a_field_the_call_did_not_answer_is_refused():
    with pytest.raises(AnswerUnreadable, match="lacks the field 'other'"):
        CallAnswer.read(answer()).field("other")


def test_the_model_side_writes_the_three_keys_onto_predicts_output():
    predicted = {"answers": {}, "usage": {}}
    assert written(predicted, "h", "v", {"name": "m"}) == {"answers": {}, "usage": {}, "prompt_sha256": "h",
                                                           "prompt_version": "v", "model_facts": {"name": "m"}}


def test_one_failure_type_names_the_kind_everywhere():
    assert [Failure.of(kind) for kind in Kind] == [Failure.INVALID, Failure.OUT_OF_MEMORY, Failure.FAILED]
    for kind in Kind:
        failure = Failure.of(kind)
        assert (failure.error.code, failure.label) == (kind.word, kind.word)
    assert TRITON_ERROR_KINDS == ("invalid_request", "out_of_memory", "scoring_failed", "model_unavailable",
                                  "transport", "unreadable_answer")
    assert [failure for failure in Failure if failure.marks_down] == [Failure.TRITON, Failure.TRANSPORT]
    assert Failure.DOWN.label is None and Failure.DOWN.error.status == 502
