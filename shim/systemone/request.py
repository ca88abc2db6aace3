"""A System One body, checked as far as predict() would refuse it cheaply and translated into predict() questions;
every refusal names its field as FastAPI's `loc` does."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from wire.answer import CHOICE, NOUL, SCORE

from ..errors import UnprocessableRequest, validation_detail
from ..json_body import json_object
from ..port.chunking import MAX_QUESTIONS_PER_CALL

MAX_OPTIONS = 62  # the checkpoint's answer symbols
OPTIONS_BOUND = "the checkpoint's single-token answer symbols; TypeSafe takes up to 255"
QUESTION_TYPES = (CHOICE, SCORE, NOUL)
CONFIG_KEYS = ("single_call",)
NOUL_KEYS = ("true", "false")


class SystemOneInvalid(UnprocessableRequest):
    """422 with FastAPI's detail."""

    def __init__(self, loc: list, message: str, kind: str = "value_error"):
        super().__init__(f"{_dotted(loc)}: {message}" if len(loc) > 1 else message)
        self.loc = loc
        self.msg = message
        self.kind = kind

    @property
    def detail(self) -> list[dict]:
        return validation_detail(self.loc, self.msg, self.kind)


def _dotted(loc: list) -> str:
    return ".".join(str(part) for part in loc[1:])


@dataclass(frozen=True)
class Question:
    name: str
    type: str
    predict: dict
    levels: tuple | None = None  # as the caller gave them, for the legend


@dataclass(frozen=True)
class SystemOneRequest:
    model: str
    state: Any
    questions: tuple[Question, ...]
    single_call: bool = False


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _is_content(value: Any) -> bool:
    return isinstance(value, (str, dict, list))


def invalid_json(message: str) -> SystemOneInvalid:
    return SystemOneInvalid(["body"], message, "json_invalid")


def _object(value: Any, loc: list) -> dict:
    return json_object(value, lambda: SystemOneInvalid(loc, "must be a JSON object", "dict_type"))


def _content(value: Any, loc: list, nullable: bool) -> Any:
    if value is None and nullable:
        return None
    if not _is_content(value):
        allowed = "a string, object or array" + (" or null" if nullable else "")
        raise SystemOneInvalid(loc, f"must be {allowed}", "type_error")
    return value


def _count(size: int, low: int, high: int, loc: list, what: str, bound: str = "") -> None:
    if not low <= size <= high:
        named = f" ({bound})" if bound else ""
        raise SystemOneInvalid(loc, f"must hold {low}..{high} {what}{named}, got {size}",
                               "too_short" if size < low else "too_long")


def parse_request(body: Any, max_questions: int, loc: list | None = None) -> SystemOneRequest:
    loc = loc or ["body"]
    body = _object(body, loc)
    for key in ("model", "state", "questions"):
        if key not in body:
            raise SystemOneInvalid([*loc, key], "Field required", "missing")
    model = body["model"]
    if not isinstance(model, str):
        raise SystemOneInvalid([*loc, "model"], "must be a string", "string_type")
    state = body["state"]
    if not _is_content(state):  # empty included, as TypeSafe's schema has it
        raise SystemOneInvalid([*loc, "state"], "must be a string, object or array", "type_error")
    assets = body.get("assets")
    if assets is not None and assets != {}:
        raise SystemOneInvalid([*loc, "assets"], "this model takes no images: send no assets, null or {}")
    single_call = _config(body.get("config"), [*loc, "config"])
    raw = _object(body["questions"], [*loc, "questions"])
    _count(len(raw), 1, max_questions, [*loc, "questions"], "questions", "MAX_DECISIONS")
    if single_call and len(raw) > MAX_QUESTIONS_PER_CALL:
        raise SystemOneInvalid([*loc, "config", "single_call"],
                               f"single_call allows at most {MAX_QUESTIONS_PER_CALL} questions (one call), the "
                               f"request has {len(raw)}")
    questions = tuple(_question(name, value, [*loc, "questions", name]) for name, value in raw.items())
    return SystemOneRequest(model, state, questions, single_call)


def _config(config: Any, loc: list) -> bool:
    if config is None:
        return False
    config = _object(config, loc)
    for key in config:
        if key not in CONFIG_KEYS:
            raise SystemOneInvalid([*loc, key], f"unknown config key; this model accepts {', '.join(CONFIG_KEYS)}",
                                   "extra_forbidden")
    single_call = config.get("single_call", False)
    if not isinstance(single_call, bool):
        raise SystemOneInvalid([*loc, "single_call"], "must be a boolean", "bool_type")
    return single_call


def _question(name: str, value: Any, loc: list) -> Question:
    if not name:
        raise SystemOneInvalid(loc, "question names must be nonempty strings")
    question = _object(value, loc)
    kind = question.get("type")
    if kind == "box":
        raise SystemOneInvalid([*loc, "type"], "box questions need an image; this model takes no images")
    if kind not in QUESTION_TYPES:
        raise SystemOneInvalid([*loc, "type"], f"must be one of {', '.join(QUESTION_TYPES)}", "literal_error")
    predict: dict = {"type": kind}
    instructions = _content(question.get("instructions"), [*loc, "instructions"], nullable=True)
    if instructions is not None:
        predict["instructions"] = text_of(instructions)
    if kind == CHOICE:
        criteria = _object(question.get("criteria"), [*loc, "criteria"])
        _count(len(criteria), 1, MAX_OPTIONS, [*loc, "criteria"], "options", OPTIONS_BOUND)
        predict["criteria"] = {value: "" if description is None else text_of(description)
                               for value, description in
                               ((value, _content(description, [*loc, "criteria", value], nullable=True))
                                for value, description in criteria.items())}
        return Question(name, kind, predict)
    if kind == SCORE:
        criteria = question.get("criteria")
        if not isinstance(criteria, list):
            raise SystemOneInvalid([*loc, "criteria"], "must be an array of levels (a list only)", "list_type")
        _count(len(criteria), 1, MAX_OPTIONS, [*loc, "criteria"], "levels", OPTIONS_BOUND)
        levels = tuple(_content(level, [*loc, "criteria", index], nullable=False)
                       for index, level in enumerate(criteria))
        predict["criteria"] = [text_of(level) for level in levels]
        return Question(name, kind, predict, levels)
    criteria = question.get("criteria")
    if criteria is not None:
        criteria = _object(criteria, [*loc, "criteria"])
        # Keys other than true and false are left out, as TypeSafe's schema ignores them.
        described = {key: text_of(_content(criteria[key], [*loc, "criteria", key], nullable=True))
                     for key in NOUL_KEYS if criteria.get(key) is not None}
        if described:
            predict["criteria"] = described
    return Question(name, kind, predict)
