"""The semif routes, POST /decide and POST /decide/shared, bound to their service when the app is built."""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..errors import UnprocessableRequest
from ..json_body import request_json
from .service import DecisionService


def semif_routes(service: DecisionService) -> list[Route]:
    async def decide(request: Request) -> JSONResponse:
        body, large = await request_json(request, UnprocessableRequest)
        return JSONResponse(await service.decide(body, request.state.cycle.id, large))

    async def decide_shared(request: Request) -> JSONResponse:
        body, large = await request_json(request, UnprocessableRequest)
        return JSONResponse(await service.decide_shared(body, request.state.cycle.id, large))

    return [Route("/decide", decide, methods=["POST"]), Route("/decide/shared", decide_shared, methods=["POST"])]
