"""One call's answer, as the model writes it and the shim reads it; every number is predict()'s own (INV-1)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

CHOICE, SCORE, NOUL = "choice", "score", "noul"
ANSWER_TYPES = (CHOICE, SCORE, NOUL)

# added to predict()'s output by the model
PROMPT_SHA256 = "prompt_sha256"
PROMPT_VERSION = "prompt_version"
MODEL_FACTS = "model_facts"


class AnswerUnreadable(ValueError):
    """Never guessed."""


def written(predicted: dict, prompt_sha256: str, prompt_version: str, model_facts: dict) -> dict:
    predicted[PROMPT_SHA256] = prompt_sha256
    predicted[PROMPT_VERSION] = prompt_version
    predicted[MODEL_FACTS] = model_facts
    return predicted


def input_tokens(predicted: dict) -> int:
    return predicted["usage"]["input_tokens"]


@dataclass(frozen=True)
class QuestionAnswer:
    type: str
    probabilities: dict[str, float]  # in option order
    confidence: float
    native: dict


@dataclass(frozen=True)
class ChoiceAnswer(QuestionAnswer):
    choice: str


@dataclass(frozen=True)
class ScoreAnswer(QuestionAnswer):
    score: float  # may fall between levels
    legend: dict[str, str]


@dataclass(frozen=True)
class NoulAnswer(QuestionAnswer):
    noul: float  # P(yes)


@dataclass(frozen=True)
class CallAnswer:
    answers: dict[str, QuestionAnswer]  # in the call's order
    input_tokens: int
    output_tokens: int
    inference_ms: float
    calibration: dict
    prompt_sha256: str
    prompt_version: str
    model_facts: dict

    @classmethod
    def read(cls, value: Any) -> "CallAnswer":
        answer = _mapping(value, "the answer")
        usage = _mapping(_key(answer, "usage", "the answer"), "usage")
        timing = _mapping(_key(answer, "timing", "the answer"), "timing")
        fields = _mapping(_key(answer, "answers", "the answer"), "answers")
        return cls(
            answers={_text(field, "a field name"): _question(native, field) for field, native in fields.items()},
            input_tokens=_count(_key(usage, "input_tokens", "usage"), "usage.input_tokens"),
            output_tokens=_count(_key(usage, "output_tokens", "usage"), "usage.output_tokens"),
            inference_ms=_number(_key(timing, "inference_ms", "timing"), "timing.inference_ms"),
            calibration=_mapping(_key(answer, "calibration", "the answer"), "calibration"),
            prompt_sha256=_text(_key(answer, PROMPT_SHA256, "the answer"), PROMPT_SHA256),
            prompt_version=_text(_key(answer, PROMPT_VERSION, "the answer"), PROMPT_VERSION),
            model_facts=_mapping(_key(answer, MODEL_FACTS, "the answer"), MODEL_FACTS),
        )

    def field(self, name: str) -> QuestionAnswer:
        try:
            return self.answers[name]
        except KeyError:
            raise AnswerUnreadable(f"the answer lacks the field {name!r}") from None


def _question(value: Any, field: str) -> QuestionAnswer:
    where = f"answers[{field!r}]"
    native = _mapping(value, where)
    kind = _key(native, "type", where)
    probabilities = _mapping(_key(native, "probabilities", where), f"{where}.probabilities")
    common = dict(
        type=kind,
        probabilities={_text(option, f"{where}.probabilities key"): _number(p, f"{where}.probabilities[{option!r}]")
                       for option, p in probabilities.items()},
        confidence=_number(_key(native, "confidence", where), f"{where}.confidence"),
        native=native,
    )
    if kind == CHOICE:
        return ChoiceAnswer(**common, choice=_text(_key(native, "choice", where), f"{where}.choice"))
    if kind == SCORE:
        legend = _mapping(_key(native, "legend", where), f"{where}.legend")
        return ScoreAnswer(**common, score=_number(_key(native, "score", where), f"{where}.score"),
                           legend={_text(level, f"{where}.legend key"): description
                                   for level, description in legend.items()})
    if kind == NOUL:
        return NoulAnswer(**common, noul=_number(_key(native, "noul", where), f"{where}.noul"))
    raise AnswerUnreadable(f"{where}.type must be one of {', '.join(ANSWER_TYPES)}, got {kind!r}")


def _key(mapping: dict, key: str, where: str) -> Any:
    try:
        return mapping[key]
    except KeyError:
        raise AnswerUnreadable(f"{where} lacks {key!r}") from None


def _mapping(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise AnswerUnreadable(f"{where} must be an object, got {type(value).__name__}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise AnswerUnreadable(f"{where} must be a string, got {type(value).__name__}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AnswerUnreadable(f"{where} must be a finite number, got {value!r}")
    return float(value)


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AnswerUnreadable(f"{where} must be a count, got {value!r}")
    return value
