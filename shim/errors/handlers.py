"""Starlette's exception handlers, answering through the one writer."""
from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from .answer import response
from .codes import HTTP_CODES, INVALID, SCORING_FAILED
from .envelope import envelope
from .failures import Failure, ModelFailure
from .raised import ApiError, UnprocessableRequest

log = logging.getLogger("intern_decision.shim")


def error_body(exc: ApiError | UnprocessableRequest) -> dict:
    """The MCP tools' failures carry it as their result."""
    if isinstance(exc, ApiError):
        return envelope(exc.error, exc.public_message, detail=exc.detail)
    return envelope(INVALID, str(exc), detail=exc.detail)


async def invalid_request(request: Request, exc: UnprocessableRequest) -> JSONResponse:
    return response(INVALID, str(exc), path=request.scope["path"], detail=exc.detail)


async def api_error(request: Request, exc: ApiError) -> JSONResponse:
    if isinstance(exc, ModelFailure) and exc.failure is Failure.UNREADABLE:
        log.error("%s %s: %s", request.method, request.url.path, exc)
    elif exc.status >= 500:
        log.warning("%s %s: %s", request.method, request.url.path, exc)
    return response(exc.error, exc.public_message, path=request.scope["path"], own=exc.headers, detail=exc.detail)


async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    """The routing's 404 and 405; any other HTTPException is the shim's own failure."""
    error = HTTP_CODES.get(exc.status_code)
    if error is None:
        return await unexpected(request, exc)
    return response(error, exc.detail, path=request.scope["path"], own=exc.headers)


async def unexpected(request: Request, exc: Exception) -> JSONResponse:
    """The caller is told that something failed, not what."""
    log.exception("%s %s: failed while building the response", request.method, request.url.path)
    return response(SCORING_FAILED, UNEXPECTED_FAILURE, path=request.scope["path"])


UNEXPECTED_FAILURE = "failed while building the response; the log has the detail under this request's id"


EXCEPTION_HANDLERS = {UnprocessableRequest: invalid_request, ApiError: api_error, HTTPException: http_error,
                      Exception: unexpected}
