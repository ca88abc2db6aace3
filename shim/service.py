"""One request's calls, run back to back under the process-wide lock (INV-2), and its results assembled."""
from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, NamedTuple, Protocol

from .access import note_usage
from .combining import IncompleteAnswer, averaged_result, ordering_result
from .errors import ApiError, Unreachable
from .watch import ModelDown
from .metrics import TRITON_ERROR_KINDS, ShimMetrics
from .planning import Call, plan
from .validation import Decision


class Model(Protocol):
    async def predict_calls(self, requests: list[dict], request_id: str) -> list[dict]: ...


class Scored(NamedTuple):
    calls: list[Call]
    answers: list[dict]
    queue_seconds: float  # waiting for the lock (INV-2) behind other requests
    scoring_started: float  # perf_counter() once the lock was held: semif's total_seconds runs from here


class DecisionService:
    def __init__(self, model: Model, max_decisions: int, metrics: ShimMetrics, lock: asyncio.Lock | None = None):
        self._model = model
        self._max_decisions = max_decisions
        self._metrics = metrics
        self._lock = lock or asyncio.Lock()

    async def _score(self, state: Any, decisions: list[Decision], request_id: str) -> Scored:
        calls = plan(decisions, self._max_decisions)
        requests = [call.predict_request(state, decisions) for call in calls]
        self._metrics.calls_per_request.observe(len(calls))
        note_usage(calls=len(calls))
        self._metrics.queued.inc()
        queued_at = time.perf_counter()
        try:
            await self._lock.acquire()
        finally:
            self._metrics.queued.dec()
        scoring_started = time.perf_counter()
        try:
            answers = await self._model.predict_calls(requests, request_id)
        except ModelDown:
            raise  # refused by the watch: nothing reached Triton
        except ApiError as exc:
            self._metrics.triton_error(_error_kind(exc))
            raise
        except IncompleteAnswer:
            self._metrics.triton_error("unreadable_answer")
            raise
        finally:
            self._lock.release()
        with _answers_read():
            note_usage(input_tokens=sum(answer["usage"]["input_tokens"] for answer in answers))
        return Scored(calls, answers, scoring_started - queued_at, scoring_started)

    @staticmethod
    def _results(decisions: list[Decision], calls: list[Call], answers: list[dict]) -> list[dict]:
        per_decision: list[list[dict]] = [[] for _ in decisions]
        for call, answer in zip(calls, answers):
            for slot in call.slots:
                decision = decisions[slot.decision]
                result_id = decision.id if decision.orderings == "none" else decision.ordering_id(slot.ordering)
                per_decision[slot.decision].append(ordering_result(decision, result_id, slot, call, answer))
        return [results[0] if decision.orderings == "none" else averaged_result(decision, results)
                for decision, results in zip(decisions, per_decision)]

    async def decide(self, state: Any, decision: Decision, request_id: str) -> dict:
        scored = await self._score(state, [decision], request_id)
        with _answers_read():
            result = self._results([decision], scored.calls, scored.answers)[0]
            if decision.orderings == "none":
                result["total_seconds"] = time.perf_counter() - scored.scoring_started
                result["queue_seconds"] = scored.queue_seconds
                result["forward_seconds"] = scored.answers[0]["timing"]["inference_ms"] / 1000
        return result

    async def decide_shared(self, state: Any, decisions: list[Decision], request_id: str) -> dict:
        scored = await self._score(state, decisions, request_id)
        with _answers_read():
            return {"results": self._results(decisions, scored.calls, scored.answers),
                    "timing": self._timing(scored)}

    @staticmethod
    def _timing(scored: Scored) -> dict:
        calls, answers = scored.calls, scored.answers
        return {
            "total_seconds": time.perf_counter() - scored.scoring_started,
            "queue_seconds": scored.queue_seconds,
            "batch_size": sum(len(call.slots) for call in calls),
            "calls": len(calls),
            "questions_per_call": [len(call.slots) for call in calls],
            "input_tokens": [answer["usage"]["input_tokens"] for answer in answers],
            "inference_seconds": sum(answer["timing"]["inference_ms"] for answer in answers) / 1000,
        }


def _error_kind(error: ApiError) -> str:
    if isinstance(error, Unreachable):
        return "transport"
    # the model's kind words, or model_unavailable for Triton's own errors
    return error.code if error.code in TRITON_ERROR_KINDS else "model_unavailable"


@contextlib.contextmanager
def _answers_read():
    """Reading the model's answers: anything missing or mistyped is a scoring failure, never a guess."""
    try:
        yield
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        raise IncompleteAnswer(f"the model's answer cannot be read: {type(exc).__name__}: {exc}") from None
