"""semif-serve's request rules, re-stated by the contract."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ..errors import UnprocessableRequest
from ..json_body import json_object

ORDERINGS = ("none", "rotations", "all")
MIN_OPTIONS, MAX_OPTIONS = 2, 16
MAX_OPTIONS_FOR_ALL = 4


@dataclass(frozen=True)
class Option:
    id: str
    description: str


@dataclass(frozen=True)
class Decision:
    id: str
    question: str
    options: tuple[Option, ...]
    orderings: str = "none"
    # The caller's first; read by the validation and the plan alike.
    option_orders: list[tuple[Option, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        options = self.options
        if self.orderings == "rotations":
            orders = [options[k:] + options[:k] for k in range(len(options))]
        elif self.orderings == "all":
            orders = list(itertools.permutations(options))
        else:
            orders = [options]
        object.__setattr__(self, "option_orders", orders)

    @property
    def option_ids(self) -> list[str]:
        return [option.id for option in self.options]

    @property
    def ordering_count(self) -> int:
        return len(self.option_orders)

    def ordering_id(self, ordering: int) -> str:
        return f"{self.id}#o{ordering}"

    @property
    def result_ids(self) -> list[str]:
        if self.orderings == "none":
            return [self.id]
        return [self.id] + [self.ordering_id(ordering) for ordering in range(self.ordering_count)]


def _object(value: Any, where: str) -> dict:
    return json_object(value, lambda: UnprocessableRequest(f"{where} must be a JSON object"))


def _nonempty_string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise UnprocessableRequest(f"{where} must be a nonempty string")
    return value


def _state(body: dict) -> Any:
    if "state" not in body:
        raise UnprocessableRequest("state is required")
    state = body["state"]
    if not isinstance(state, (str, dict, list)):
        raise UnprocessableRequest("state must be a nonempty string, object or array")
    if not state:
        raise UnprocessableRequest("state must not be empty")
    return state


def _workload(body: dict) -> None:
    if body.get("workload") is not None:
        raise UnprocessableRequest("workload is not supported: there is no per-workload calibration table, the model's "
                                   "own calibration always applies (send no workload, or null)")


def _options(value: Any, where: str) -> tuple[Option, ...]:
    if not isinstance(value, list):
        raise UnprocessableRequest(f"{where} must be an array")
    if not MIN_OPTIONS <= len(value) <= MAX_OPTIONS:
        raise UnprocessableRequest(f"{where} must hold {MIN_OPTIONS}..{MAX_OPTIONS} options, got {len(value)}")
    options, seen = [], set()
    for index, item in enumerate(value):
        item = _object(item, f"{where}[{index}]")
        option_id, description = item.get("id"), item.get("description")
        if not isinstance(option_id, str):
            raise UnprocessableRequest(f"{where}[{index}].id must be a string")
        if not isinstance(description, str):
            raise UnprocessableRequest(f"{where}[{index}].description must be a string")
        if option_id in seen:
            raise UnprocessableRequest(f"{where}[{index}].id {option_id!r} is not unique within the decision")
        seen.add(option_id)
        options.append(Option(option_id, description))
    return tuple(options)


def _decision(value: Any, where: str) -> Decision:
    body = _object(value, where or "the body")
    prefix = f"{where}." if where else ""
    decision_id = _nonempty_string(body.get("id"), f"{prefix}id")
    question = _nonempty_string(body.get("question"), f"{prefix}question")
    options = _options(body.get("options"), f"{prefix}options")
    orderings = body.get("orderings")
    orderings = "none" if orderings is None else orderings
    if orderings not in ORDERINGS:
        raise UnprocessableRequest(f"{prefix}orderings must be one of {', '.join(ORDERINGS)}")
    if orderings == "all" and len(options) > MAX_OPTIONS_FOR_ALL:
        raise UnprocessableRequest(f"{prefix}orderings 'all' is allowed up to {MAX_OPTIONS_FOR_ALL} options, "
                                   f"this decision has {len(options)}")
    return Decision(decision_id, question, options, orderings)


def decide_body(payload: Any) -> tuple[Any, Decision]:
    """POST /decide: {id, state, question, options, orderings?, workload?}"""
    body = _object(payload, "the body")
    _workload(body)
    return _state(body), _decision(body, "")


def shared_body(payload: Any) -> tuple[Any, list[Decision]]:
    """POST /decide/shared: {state, decisions: [{id, question, options, orderings?}], workload?}"""
    body = _object(payload, "the body")
    _workload(body)
    state = _state(body)
    raw = body.get("decisions")
    if not isinstance(raw, list) or not raw:
        raise UnprocessableRequest("decisions must be a nonempty array")
    decisions, seen = [], set()
    for index, item in enumerate(raw):
        decision = _decision(item, f"decisions[{index}]")
        if decision.id in seen:
            raise UnprocessableRequest(f"decisions[{index}].id {decision.id!r} is not unique within the request")
        seen.add(decision.id)
        decisions.append(decision)
    _result_ids_unique(decisions)
    return state, decisions


def _result_ids_unique(decisions: list[Decision]) -> None:
    """E.g. a decision `a#o0` beside `a` with orderings, whose ordering 0 answers as `a#o0`."""
    owner: dict[str, int] = {}
    for index, decision in enumerate(decisions):
        for result_id in decision.result_ids:
            if result_id in owner and owner[result_id] != index:
                raise UnprocessableRequest(f"decisions[{index}] would answer with the id {result_id!r}, which "
                                           f"decisions[{owner[result_id]}] already answers with; result ids must be "
                                           f"unique within the response")
            owner[result_id] = index

