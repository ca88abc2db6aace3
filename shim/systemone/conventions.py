"""TypeSafe's HTTP conventions on the System One routes, as one pure ASGI middleware that create_app puts around
the whole app for the paths it names (the edge and the handlers stay unaware of them):

* the request id also as `x-typesafe-request-id`, which the TypeSafe SDK reads;
* every error in TypeSafe's shape beside the project's envelope: a 422 carries FastAPI's `detail: [{loc, msg,
  type}]` (the handlers' own, or `loc ["body"]` for a refusal at the edge), any other error `detail: {error_type,
  message}` with TypeSafe's `error_type` word for its status, so that clients written for TypeSafe (other languages,
  raw HTTP callers, proxies) read it. The envelope `{error: {code, message}}` stays as it is.
"""
from __future__ import annotations

import json

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import validation_detail

REQUEST_ID_HEADER = "x-typesafe-request-id"
# TypeSafe's error_type words by status; a status not listed takes the word of its class.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 405: "invalid_request_error", 408: "timeout_error",
               413: "request_too_large", 415: "invalid_request_error", 429: "rate_limit_error",
               431: "invalid_request_error", 500: "api_error", 501: "invalid_request_error", 502: "api_error",
               503: "overloaded_error"}
CLASS_ERROR_TYPES = {4: "invalid_request_error", 5: "api_error"}
UNPROCESSABLE = 422


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, CLASS_ERROR_TYPES.get(status // 100, "api_error"))


def typesafe_error(status: int, body: dict) -> dict:
    """The envelope with TypeSafe's detail beside it (a body that is not the envelope is returned as it is)."""
    error = body.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return body
    if status == UNPROCESSABLE:
        return body if "detail" in body else {**body, "detail": validation_detail(["body"], error["message"])}
    return {**body, "detail": {"error_type": error_type(status), "message": error["message"]}}


class SystemOneConventions:
    def __init__(self, app: ASGIApp, prefixes: tuple[str, ...]):
        self.app = app
        self._prefixes = prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self._prefixes):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        held: list[bytes] = []

        async def send_conventionally(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                request_id = scope.get("state", {}).get("request_id")
                if request_id:
                    headers[REQUEST_ID_HEADER] = request_id
                if message["status"] >= 400 and headers.get("content-type", "").startswith("application/json"):
                    start = message  # an error body: held until whole, then reshaped
                    return
                await send(message)
            elif start is not None and message["type"] == "http.response.body":
                held.append(message.get("body", b""))
                if not message.get("more_body", False):
                    await self._send_error(start, b"".join(held), send)
            else:
                await send(message)

        await self.app(scope, receive, send_conventionally)

    @staticmethod
    async def _send_error(start: Message, raw: bytes, send: Send) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if isinstance(body, dict):
            raw = json.dumps(typesafe_error(start["status"], body), ensure_ascii=False,
                             separators=(",", ":")).encode()
        headers = MutableHeaders(scope=start)
        headers["content-length"] = str(len(raw))
        await send(start)
        await send({"type": "http.response.body", "body": raw, "more_body": False})
