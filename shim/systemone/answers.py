"""System One's response from a request's questions and its calls' typed answers: every number is predict()'s,
only re-keyed under the caller's names and in the caller's order (INV-1); our own fields carry an `x_` prefix."""
from __future__ import annotations

from wire.answer import CHOICE, SCORE, CallAnswer, ChoiceAnswer, NoulAnswer, QuestionAnswer, ScoreAnswer

from ..errors import IncompleteAnswer
from .request import Question


def call_request(chunk: tuple[Question, ...]) -> dict:
    """A call's predict() request without the state, which the port hands over once for all the calls."""
    return {"questions": {question.name: question.predict for question in chunk}}


def question_numbers(calls: list[tuple[Question, ...]], index: int) -> str:
    """Which questions call `index` asked, numbered from 1 in request order: "questions 17–20"."""
    first = sum(len(chunk) for chunk in calls[:index]) + 1
    last = first + len(calls[index]) - 1
    return f"question {first}" if first == last else f"questions {first}–{last}"


def response_body(model: str, calls: list[tuple[Question, ...]], answers: list[CallAnswer]) -> dict:
    body = {
        "model": model,
        "answers": {question.name: answer_of(question, answer.answers.get(question.name))
                    for chunk, answer in zip(calls, answers) for question in chunk},
        "usage": {"input_tokens": sum(answer.input_tokens for answer in answers),
                  "output_tokens": sum(answer.output_tokens for answer in answers)},
        "x_calls": [{"index": index, "questions": [question.name for question in chunk],
                     "input_tokens": answer.input_tokens, "prompt_sha256": answer.prompt_sha256,
                     "inference_ms": answer.inference_ms}
                    for index, (chunk, answer) in enumerate(zip(calls, answers))],
    }
    first = answers[0]
    body.update(x_calibration=first.calibration, x_prompt_version=first.prompt_version,
                x_model_facts=first.model_facts)
    return body


def answer_of(question: Question, native: QuestionAnswer | None) -> dict:
    expected = {CHOICE: ChoiceAnswer, SCORE: ScoreAnswer}.get(question.type, NoulAnswer)
    if not isinstance(native, expected):
        got = "nothing" if native is None else f"a {native.type} answer"
        raise IncompleteAnswer(f"the model's answer to question {question.name!r} is {got}, not a {question.type}")
    if isinstance(native, ChoiceAnswer):
        return {"type": CHOICE, "choice": native.choice, "confidence": native.confidence,
                "probabilities": _probabilities(question, native, list(question.predict["criteria"])),
                "x_native": native.native}
    if isinstance(native, ScoreAnswer):
        levels = [str(level) for level in range(len(question.levels))]
        return {"type": SCORE, "score": native.score, "confidence": native.confidence,
                "legend": dict(zip(levels, question.levels)),
                "probabilities": _probabilities(question, native, levels), "x_native": native.native}
    return {"type": native.type, "noul": native.noul, "x_native": native.native}


def _probabilities(question: Question, native: QuestionAnswer, values: list[str]) -> dict[str, float]:
    missing = [value for value in values if value not in native.probabilities]
    if missing:
        raise IncompleteAnswer(f"the model's answer to question {question.name!r} lacks the options {missing}")
    return {value: native.probabilities[value] for value in values}
