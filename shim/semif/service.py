"""The semif routes' requests: their decisions planned into calls, the calls run, the results assembled."""
from __future__ import annotations

import time
from typing import Any

from wire.answer import CallAnswer

from ..cycle import note_usage
from ..json_body import read_body
from ..port.calls import AnsweredCalls, CallRunner
from ..settings import ShimSettings
from .answers import averaged_result, ordering_result
from .plan import Call, plan
from .request import Decision, decide_body, shared_body


class DecisionService:
    def __init__(self, runner: CallRunner, settings: ShimSettings):
        self._runner = runner  # the app's one runner: the process-wide lock (INV-2) shared with System One
        self._settings = settings

    async def _score(self, state: Any, decisions: list[Decision], request_id: str) -> tuple[list[Call], AnsweredCalls]:
        calls = plan(decisions, self._settings.max_decisions)
        note_usage(calls=len(calls))
        ran = await self._runner.run(state, [call.request(decisions) for call in calls], request_id)
        note_usage(input_tokens=sum(answer.input_tokens for answer in ran.answers))
        return calls, ran

    @staticmethod
    def _results(decisions: list[Decision], calls: list[Call], answers: list[CallAnswer]) -> list[dict]:
        per_decision: list[list[dict]] = [[] for _ in decisions]
        for call, answer in zip(calls, answers):
            for slot in call.slots:
                decision = decisions[slot.decision]
                result_id = decision.id if decision.orderings == "none" else decision.ordering_id(slot.ordering)
                per_decision[slot.decision].append(ordering_result(decision, result_id, slot, call, answer))
        return [results[0] if decision.orderings == "none" else averaged_result(decision, results)
                for decision, results in zip(decisions, per_decision)]

    async def decide(self, body: Any, request_id: str, large: bool = False) -> dict:
        """large: the body was over json_body.ON_LOOP_BYTES, and is read into its decisions off the loop."""
        state, decision = await read_body(large, decide_body, body)
        calls, ran = await self._score(state, [decision], request_id)
        result = self._results([decision], calls, ran.answers)[0]
        if decision.orderings == "none":
            result["total_seconds"] = time.perf_counter() - ran.scoring_started
            result["queue_seconds"] = ran.queue_seconds
            result["forward_seconds"] = ran.answers[0].inference_ms / 1000
        return result

    async def decide_shared(self, body: Any, request_id: str, large: bool = False) -> dict:
        state, decisions = await read_body(large, shared_body, body)
        calls, ran = await self._score(state, decisions, request_id)
        return {"results": self._results(decisions, calls, ran.answers), "timing": self._timing(calls, ran)}

    @staticmethod
    def _timing(calls: list[Call], ran: AnsweredCalls) -> dict:
        answers = ran.answers
        return {
            "total_seconds": time.perf_counter() - ran.scoring_started,
            "queue_seconds": ran.queue_seconds,
            "batch_size": sum(len(call.slots) for call in calls),
            "calls": len(calls),
            "questions_per_call": [len(call.slots) for call in calls],
            "input_tokens": [answer.input_tokens for answer in answers],
            "inference_seconds": sum(answer.inference_ms for answer in answers) / 1000,
        }
