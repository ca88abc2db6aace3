"""The GPU check's request shapes: the contract's mapping onto predict() calls, and fitting a state to a token count."""
from fixture_checkpoint.prompt_corpus import FILLER_WORDS, filler_text
from gpucheck import shapes


def test_one_call_per_sixteen_questions_with_positional_fields():
    body = shapes.body(shapes.binary_criteria(21), 0)
    calls = shapes.predict_calls(body)
    assert [list(call["questions"]) for call in calls] == [
        [f"q{n}" for n in range(1, 17)], [f"q{n}" for n in range(1, 6)]]
    assert all(call["state"] == shapes.BASE_STATE for call in calls)
    assert calls[1]["questions"]["q1"]["instructions"] == "Does criterion 17 hold for this state?"


def test_a_single_question_is_field_q_and_keeps_the_option_order():
    decision = {"id": "d-1", "question": "Which?", "options": [{"id": "zeta", "description": "Z"},
                                                               {"id": "alpha", "description": "A"}]}
    [call] = shapes.predict_calls({"state": {"k": 1}, "decisions": [decision]})
    assert call == {"state": {"k": 1}, "questions": {"q": {"type": "choice", "instructions": "Which?",
                                                           "criteria": {"zeta": "Z", "alpha": "A"}}}}
    assert "d-1" not in str(call)  # decision ids never reach the prompt


def test_fit_finds_the_filler_closest_to_the_target():
    def count(request):  # a stand-in tokenizer: 100 tokens of prompt, one per word of the state
        return 100 + len(request["state"].split())

    words, tokens = shapes.fit_filler(count, shapes.ANCHOR_DECISIONS, 289)
    assert tokens == 289
    assert count(shapes.predict_calls(shapes.body(shapes.ANCHOR_DECISIONS, words))[0]) == 289


def test_fit_reports_a_floor_above_the_target():
    assert shapes.fit_filler(lambda request: 500, shapes.ANCHOR_DECISIONS, 289) == (0, 500)
    assert not shapes.reached(289, 500)
    assert shapes.reached(3900, 3903) and shapes.reached(3900, 3939) and not shapes.reached(3900, 3950)
    assert shapes.reached(None, 12345)


def test_the_shapes_are_the_measured_ones():
    assert shapes.SHAPES["anchor"][2] == 289 and len(shapes.SHAPES["anchor"][1]) == 3
    assert len(shapes.SHAPES["criteria21"][1]) == 21
    assert shapes.SHAPES["long16"][2] == 3900 and len(shapes.SHAPES["long16"][1]) == 16
    assert shapes.SHAPES["probe"][2] < 8192 and not shapes.SHAPES["probe"][3]
    for _, decisions, _, _ in shapes.SHAPES.values():
        assert all(2 <= len(decision["options"]) <= 16 for decision in decisions)


def test_filler_is_fixed_and_made_of_the_corpus_words():
    text = filler_text(40)
    assert text == filler_text(40)
    words = text.replace(".", "").split()
    assert len(words) == 40 and set(words) <= set(FILLER_WORDS)
    assert "<decision>" not in filler_text(5000)
