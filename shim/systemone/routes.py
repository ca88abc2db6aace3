"""The System One routes, bound to their service when the app is built; the edge has already checked the token,
admitted a POST and decoded its body."""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from wire import strict_json

from ..json_body import ON_LOOP_BYTES, strict_body
from .request import SystemOneInvalid
from .service import SystemOneService


async def _body(raw: bytes):
    try:
        return await strict_body(raw)
    except strict_json.NotStrictJson as exc:
        raise SystemOneInvalid(["body"], str(exc), "json_invalid") from None


def systemone_routes(service: SystemOneService) -> list[Route]:
    async def models(request: Request) -> JSONResponse:
        return JSONResponse(await service.models())

    async def system_one(request: Request) -> JSONResponse:
        raw = await request.body()
        return JSONResponse(await service.answer(await _body(raw), request.state.request_id,
                                                 len(raw) > ON_LOOP_BYTES))

    async def batch(request: Request) -> JSONResponse:
        raw = await request.body()
        return JSONResponse(await service.batch(await _body(raw), request.state.request_id,
                                                len(raw) > ON_LOOP_BYTES))

    return [Route("/v1/models", models, methods=["GET"]), Route("/v1/systemone", system_one, methods=["POST"]),
            Route("/v1/systemone/batch", batch, methods=["POST"])]
