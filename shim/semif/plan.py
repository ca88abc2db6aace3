"""From validated decisions to the predict() calls that score them (the contract's "Mapping onto the model"):
ordering k of every decision forms wave k, each wave packed greedily into calls of at most 16 questions."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UnprocessableRequest
from ..port.chunking import chunks
from .request import Decision, Option


@dataclass(frozen=True)
class Slot:
    """One question in a call: ordering `ordering` of decision `decision`, asked under `field`."""

    decision: int
    ordering: int
    options: tuple[Option, ...]
    field: str


@dataclass(frozen=True)
class Call:
    index: int
    slots: tuple[Slot, ...]

    def request(self, decisions: list[Decision]) -> dict:
        """This call's predict() request without the state, which the port hands over once for all the calls;
        decision ids never reach it."""
        return {
            "questions": {
                slot.field: {
                    "type": "choice",
                    "instructions": decisions[slot.decision].question,
                    "criteria": {option.id: option.description for option in slot.options},
                }
                for slot in self.slots
            },
        }


def _fields(count: int) -> list[str]:
    return ["q"] if count == 1 else [f"q{number}" for number in range(1, count + 1)]


def plan(decisions: list[Decision], max_decisions: int) -> list[Call]:
    expanded = [decision.option_orders for decision in decisions]
    scored = sum(len(orderings) for orderings in expanded)
    if not 1 <= scored <= max_decisions:
        raise UnprocessableRequest(f"the request scores {scored} orderings after expansion; "
                                   f"1..{max_decisions} are allowed (MAX_DECISIONS)")
    calls: list[Call] = []
    for wave in range(max(len(orderings) for orderings in expanded)):
        members = [(index, orderings[wave]) for index, orderings in enumerate(expanded) if len(orderings) > wave]
        for chunk in chunks(members):
            slots = tuple(Slot(index, wave, options, field)
                          for (index, options), field in zip(chunk, _fields(len(chunk))))
            calls.append(Call(len(calls), slots))
    return calls
