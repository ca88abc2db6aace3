"""The model as the shim sees it: the Triton adapter, the watch and the unit tests' fake implement one Protocol."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wire.answer import CallAnswer
from wire.facts import ModelFacts

from ..errors import Problem
from .graph_series import LiveGraphs


@dataclass(frozen=True)
class Probe:
    """triton_answered: Triton answered with an error, so the model's process fails and only a restart heals it."""

    ok: bool
    problem: Problem | None = None  # why not, when not ok
    triton_answered: bool = False


class Model(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def predict_calls(self, state: object, calls: list[dict], request_id: str) -> list[CallAnswer]:
        """The calls' answers in order, from one inference request; ModelFailure for the first call that fails.
        Each call is a predict() request without its state: the state every call shares is handed over once."""

    async def ready(self) -> Problem | None:
        """None when the model can take a request, else why not."""

    async def ping(self) -> Probe: ...

    async def facts(self) -> ModelFacts:
        """ModelFailure (model_unavailable) when they cannot be read."""

    async def graphs(self) -> LiveGraphs | None:
        """What the CUDA graphs do now; None when the model publishes it not or it cannot be read."""
