"""System One requests and batches: checked whole before any model work, each request's calls run back to back
under the lock as one inference request (shim/port/calls.py), the first failure failing the whole request or batch."""
from __future__ import annotations

from typing import Any

from ..cycle import note_usage
from ..errors import ModelFailure, validation_detail
from ..json_body import read_body
from ..port.calls import CallRunner
from ..port.chunking import chunks
from ..port.facts_cache import FactsCache
from ..settings import ShimSettings
from .answers import call_request, question_numbers, response_body
from .catalog import Catalog, models_body
from .request import SystemOneInvalid, SystemOneRequest, parse_request


class SystemOneService:
    def __init__(self, runner: CallRunner, facts: FactsCache, settings: ShimSettings):
        self._runner = runner
        self._facts = facts
        self._settings = settings

    async def models(self) -> dict:
        facts = await self._facts.get()
        return models_body(Catalog.of(facts, self._settings), facts, self._settings)

    async def answer(self, body: Any, request_id: str, large: bool = False) -> dict:
        """large: the body was over json_body.ON_LOOP_BYTES, and is read into its request off the loop."""
        request = await read_body(large, parse_request, body, self._settings.max_decisions)
        catalog = await self._catalog()
        _check_model(catalog, request, ["body"])
        result = await self._run(catalog, request, request_id, None)
        _note_usage([result])
        return result

    async def batch(self, body: Any, request_id: str, large: bool = False) -> dict:
        if not isinstance(body, dict):
            raise SystemOneInvalid(["body"], "must be a JSON object", "dict_type")
        items = body.get("requests")
        if not isinstance(items, list):
            raise SystemOneInvalid(["body", "requests"], "must be an array of System One requests", "list_type")
        limit = self._settings.max_batch_items
        if not 1 <= len(items) <= limit:
            raise SystemOneInvalid(["body", "requests"], f"must hold 1..{limit} requests (MAX_BATCH_ITEMS), got "
                                   f"{len(items)}", "too_short" if not items else "too_long")
        requests = await read_body(large, _parse_items, items, self._settings.max_decisions)
        catalog = await self._catalog()
        for index, request in enumerate(requests):
            _check_model(catalog, request, ["body", "requests", index])
        # Item i's inference request is <id>.<i>: the model's log names its call k <id>.<i>.<k>.
        results = []
        for index, request in enumerate(requests):
            results.append(await self._run(catalog, request, f"{request_id}.{index}", index))
            _note_usage(results)
        return {"results": results}

    async def _catalog(self) -> Catalog:
        return Catalog.of(await self._facts.get(), self._settings)

    async def _run(self, catalog: Catalog, request: SystemOneRequest, request_id: str, item: int | None) -> dict:
        calls = chunks(request.questions)
        try:
            ran = await self._runner.run(request.state, [call_request(chunk) for chunk in calls], request_id)
        except ModelFailure as exc:
            raise _named(exc, calls, item) from None
        return response_body(catalog.canonical, calls, ran.answers)


def _parse_items(items: list, max_questions: int) -> list[SystemOneRequest]:
    return [parse_request(item, max_questions, ["body", "requests", index]) for index, item in enumerate(items)]


def _note_usage(results: list[dict]) -> None:
    """The access line's usage: a batch's adds up its items'."""
    note_usage(calls=sum(len(result["x_calls"]) for result in results),
               input_tokens=sum(result["usage"]["input_tokens"] for result in results))


def _check_model(catalog: Catalog, request: SystemOneRequest, loc: list) -> None:
    if not catalog.accepts(request.model):
        raise SystemOneInvalid([*loc, "model"], f"unknown model {request.model!r}; this service answers to "
                               f"{', '.join(repr(name) for name in catalog.names)} (exact, case-sensitive)")


def _named(exc: ModelFailure, calls: list, item: int | None) -> ModelFailure:
    """The model's failure, its message naming the call and the batch item."""
    where = []
    if item is not None:
        where.append(f"requests[{item}]")
    if exc.call is not None and exc.call < len(calls):
        where.append(f"call {exc.call} ({question_numbers(calls, exc.call)})")
    message = ": ".join([*where, exc.message])
    loc = ["body"] if item is None else ["body", "requests", item]
    detail = validation_detail(loc, message) if exc.status == 422 else None
    return ModelFailure(exc.failure, message, exc.call, None, detail, exc.reason, ": ".join(where))
