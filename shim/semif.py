"""The semif routes: POST /decide and POST /decide/shared (the contract's surface kept)."""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from .validation import decide_body, parse_json, shared_body


async def decide(request: Request) -> JSONResponse:
    state, decision = decide_body(parse_json(await request.body()))
    return JSONResponse(await request.app.state.service.decide(state, decision, request.state.request_id))


async def decide_shared(request: Request) -> JSONResponse:
    state, decisions = shared_body(parse_json(await request.body()))
    return JSONResponse(await request.app.state.service.decide_shared(state, decisions, request.state.request_id))
