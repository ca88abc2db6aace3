"""The System One routes, bound to their service when the app is built."""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..json_body import request_json
from .request import invalid_json
from .service import SystemOneService


def systemone_routes(service: SystemOneService) -> list[Route]:
    async def models(request: Request) -> JSONResponse:
        return JSONResponse(await service.models())

    async def system_one(request: Request) -> JSONResponse:
        body, large = await request_json(request, invalid_json)
        return JSONResponse(await service.answer(body, request.state.cycle.id, large))

    async def batch(request: Request) -> JSONResponse:
        body, large = await request_json(request, invalid_json)
        return JSONResponse(await service.batch(body, request.state.cycle.id, large))

    return [Route("/v1/models", models, methods=["GET"]), Route("/v1/systemone", system_one, methods=["POST"]),
            Route("/v1/systemone/batch", batch, methods=["POST"])]
