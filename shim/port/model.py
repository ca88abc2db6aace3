"""The model as the shim sees it: one Protocol that the Triton adapter, the watch and the unit tests' fake implement,
and that the service, the watch, the health check and the app take."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wire.answer import CallAnswer
from wire.facts import ModelFacts

from ..errors import Problem


@dataclass(frozen=True)
class Probe:
    """One ping's outcome; triton_answered when Triton answered it with an error, so the model's process (not
    Triton) is what fails, and only a restart of tritonserver heals it."""

    ok: bool
    problem: Problem | None = None  # why not, when not ok
    triton_answered: bool = False


class Model(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def predict_calls(self, requests: list[dict], request_id: str) -> list[CallAnswer]:
        """The calls' answers in order, from one inference request; ModelFailure for the first call that fails."""

    async def ready(self) -> Problem | None:
        """None when the model can take a request, else why not."""

    async def ping(self) -> Probe: ...

    async def facts(self) -> ModelFacts:
        """ModelFailure (model_unavailable) when they cannot be read."""
