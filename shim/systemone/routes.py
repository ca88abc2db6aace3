"""The System One handlers; the middleware has already checked the token, admitted a POST and decoded its body."""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from wire import strict_json

from .request import SystemOneInvalid


def _body(raw: bytes):
    try:
        return strict_json.loads(raw, "the body")
    except strict_json.NotStrictJson as exc:
        raise SystemOneInvalid(["body"], str(exc), "json_invalid") from None


async def models(request: Request) -> JSONResponse:
    return JSONResponse(await request.app.state.systemone.models())


async def system_one(request: Request) -> JSONResponse:
    body = _body(await request.body())
    return JSONResponse(await request.app.state.systemone.answer(body, request.state.request_id))


async def batch(request: Request) -> JSONResponse:
    body = _body(await request.body())
    return JSONResponse(await request.app.state.systemone.batch(body, request.state.request_id))
