"""System One's operations as MCP tools at /mcp, stateless so that any replica answers any call."""
from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from .. import cycle
from ..errors import ApiError, UnprocessableRequest
from ..errors.handlers import error_body
from .mcp_body import ARGUMENTS, LARGE, NOT_STRICT, read_once
from .mcp_schemas import schema_of
from .request import SystemOneInvalid
from .service import SystemOneService

log = logging.getLogger("intern_decision.shim")

SERVER_NAME = "intern-decision-serve"


def tools(openapi: dict) -> list[types.Tool]:
    return [
        types.Tool(name="system_one", input_schema=schema_of(openapi, "SystemOneRequest"),
                   description="Ask the decision model typed questions (choice, score, noul) about a state: the same "
                               "request and answer as POST /v1/systemone, every probability the model's own."),
        types.Tool(name="system_one_batch", input_schema=schema_of(openapi, "SystemOneBatchRequest"),
                   description="Several System One requests in order, checked whole before any model work, failing "
                               "whole at the first model failure: the same as POST /v1/systemone/batch."),
        types.Tool(name="list_models", input_schema={"type": "object", "properties": {},
                                                     "additionalProperties": False},
                   description="The names this service answers to, its pins and limits: GET /v1/models."),
    ]


def tool_error(exc: ApiError | UnprocessableRequest) -> types.CallToolResult:
    if isinstance(exc, ApiError) and exc.status >= 500:
        log.warning("MCP tool: %s", exc)
    body = error_body(exc)
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(body))],
                                structured_content=body, is_error=True)


class SystemOneTools:
    def __init__(self, service: SystemOneService, openapi: dict):
        self._service = service
        self._tools = tools(openapi)
        self._operations = {"system_one": self._system_one, "system_one_batch": self._batch,
                            "list_models": self._models}
        self._server = Server(SERVER_NAME, on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        self._manager: StreamableHTTPSessionManager | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """A manager runs once, so each lifespan gets its own."""
        self._manager = self._new_manager()
        try:
            async with self._manager.run():
                yield
        finally:
            self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        receive = await read_once(scope, receive, send)
        if receive is None:
            return
        if self._manager is None:  # an app run without its lifespan: one per request
            manager = self._new_manager()
            async with manager.run():
                await manager.handle_request(scope, receive, send)
            return
        await self._manager.handle_request(scope, receive, send)

    def _new_manager(self) -> StreamableHTTPSessionManager:
        return StreamableHTTPSessionManager(app=self._server, json_response=True, stateless=True)

    async def _list_tools(self, ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self._tools)

    async def _call_tool(self, ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        # The SDK runs each handler outside the request's task.
        scope = ctx.request.scope if ctx.request is not None else {}
        request = cycle.of_scope(scope)
        cycle.enter(request)
        request_id = request.id if request is not None else "mcp"
        state = scope.get("state", {})
        if NOT_STRICT in state:
            return tool_error(SystemOneInvalid(["body"], state[NOT_STRICT], "json_invalid"))
        operation = self._operations.get(params.name)
        if operation is None:
            return tool_error(UnprocessableRequest(f"unknown tool {params.name!r}; this server has "
                                                   f"{', '.join(sorted(self._operations))}"))
        arguments = state[ARGUMENTS] if ARGUMENTS in state else params.arguments
        try:
            result = await operation(arguments or {}, request_id, state.get(LARGE, False))
        except (ApiError, UnprocessableRequest) as exc:
            return tool_error(exc)
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(result))],
                                    structured_content=result)

    async def _system_one(self, arguments: dict, request_id: str, large: bool) -> dict:
        return await self._service.answer(arguments, request_id, large)

    async def _batch(self, arguments: dict, request_id: str, large: bool) -> dict:
        return await self._service.batch(arguments, request_id, large)

    async def _models(self, arguments: dict, request_id: str, large: bool) -> dict:
        if arguments:
            raise UnprocessableRequest(f"list_models takes no arguments, got {', '.join(sorted(arguments))}")
        return await self._service.models()
