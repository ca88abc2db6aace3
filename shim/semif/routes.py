"""The semif routes, POST /decide and POST /decide/shared, bound to their service when the app is built."""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .request import decide_body, parse_json, shared_body
from .service import DecisionService


def semif_routes(service: DecisionService) -> list[Route]:
    async def decide(request: Request) -> JSONResponse:
        state, decision = decide_body(await parse_json(await request.body()))
        return JSONResponse(await service.decide(state, decision, request.state.request_id))

    async def decide_shared(request: Request) -> JSONResponse:
        state, decisions = shared_body(await parse_json(await request.body()))
        return JSONResponse(await service.decide_shared(state, decisions, request.state.request_id))

    return [Route("/decide", decide, methods=["POST"]), Route("/decide/shared", decide_shared, methods=["POST"])]
