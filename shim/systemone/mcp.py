"""System One's operations as Model Context Protocol tools at /mcp, for agent hosts (the official `mcp` SDK:
Streamable HTTP, stateless, JSON responses, so that any replica behind the balancer can answer any call).

| tool | the route it is | input schema |
|---|---|---|
| `system_one` | POST /v1/systemone | the System One request's |
| `system_one_batch` | POST /v1/systemone/batch | the batch request's |
| `list_models` | GET /v1/models | no arguments |

A tool runs the route's own operation on the same SystemOneService; its result is the JSON the route answers (as
structured content, and as text for hosts that read only text), and its failure is a tool error carrying the same
`{error: {code, message}}` (a 422's `detail` too). /mcp sits behind the same edge as every route, so every MCP
method needs the bearer token and passes the same admission, body limit, request id, access line and metrics; the
model calls run under the same process-wide lock.

The SDK runs each call's handler in a task of its own, outside the HTTP request's context: the handler takes the
request id and the access line's usage from the request's scope (set there by the edge) before any work.

The SDK's own JSON reader takes NaN, Infinity and repeated keys, which the routes refuse: so the endpoint first reads
the body with the routes' strict reader (shim/json_body.py, off the event loop when it is large) and notes a
refusal in the request's scope, and a tool called by such a body answers the routes' 422 as its tool error.
"""
from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from wire import strict_json

from .. import context
from ..client_gone import ClientGone
from ..json_body import strict_body
from ..errors import ApiError, UnprocessableRequest
from ..exception_handlers import as_api_error, error_body
from ..port.waiting import QueueStopped
from .request import SystemOneInvalid
from .service import SystemOneService

log = logging.getLogger("intern_decision.shim")

SERVER_NAME = "intern-decision-serve"
COMPONENTS = "#/components/schemas/"
NOT_STRICT = "mcp_body_not_strict"  # the key, in the request's scope state, of why its body is not strict JSON


def schema_of(openapi: dict, name: str) -> dict:
    """A component of the OpenAPI document as a self-contained JSON Schema: the components it refers to, however
    deeply, under $defs."""
    components = openapi["components"]["schemas"]
    needed, pending = {}, [name]
    while pending:
        current = pending.pop()
        if current in needed:
            continue
        needed[current] = _local_refs(components[current])
        pending.extend(_referenced(components[current]))
    root = dict(needed.pop(name))
    if needed:
        root["$defs"] = needed
    return root


def _referenced(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"][len(COMPONENTS):]] if str(node.get("$ref", "")).startswith(COMPONENTS) else []
        return found + [name for value in node.values() for name in _referenced(value)]
    if isinstance(node, list):
        return [name for value in node for name in _referenced(value)]
    return []


def _local_refs(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: ("#/$defs/" + value[len(COMPONENTS):] if key == "$ref" and value.startswith(COMPONENTS)
                      else _local_refs(value)) for key, value in node.items()}
    if isinstance(node, list):
        return [_local_refs(value) for value in node]
    return node


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
        log.warning("MCP tool: %s", exc)  # the detail; the caller gets the public words
    body = error_body(exc)
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(body))],
                                structured_content=body, is_error=True)


class SystemOneTools:
    """The MCP server over a SystemOneService, and the ASGI endpoint that serves it."""

    def __init__(self, service: SystemOneService, openapi: dict):
        self._service = service
        self._tools = tools(openapi)
        self._operations = {"system_one": self._system_one, "system_one_batch": self._batch,
                            "list_models": self._models}
        self._server = Server(SERVER_NAME, on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        self._manager: StreamableHTTPSessionManager | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """For the app's lifespan: the SDK's task group, in which every call's handler runs (a manager runs once,
        so each lifespan gets its own)."""
        self._manager = StreamableHTTPSessionManager(app=self._server, json_response=True, stateless=True)
        try:
            async with self._manager.run():
                yield
        finally:
            self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        receive = await _read_strictly(scope, receive)
        if self._manager is None:  # an app run without its lifespan (unit tests' ASGI transport)
            async with self.running():
                await self._manager.handle_request(scope, receive, send)
            return
        await self._manager.handle_request(scope, receive, send)

    async def _list_tools(self, ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self._tools)

    async def _call_tool(self, ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        state = ctx.request.scope.get("state", {}) if ctx.request is not None else {}
        request_id = state.get("request_id") or "mcp"
        context.request_id.set(request_id)
        context.usage.set(state.get("usage"))
        if NOT_STRICT in state:
            return tool_error(SystemOneInvalid(["body"], state[NOT_STRICT], "json_invalid"))
        operation = self._operations.get(params.name)
        if operation is None:
            return tool_error(UnprocessableRequest(f"unknown tool {params.name!r}; this server has "
                                                   f"{', '.join(sorted(self._operations))}"))
        try:
            result = await operation(params.arguments or {}, request_id)
        except (ApiError, UnprocessableRequest) as exc:
            return tool_error(exc)
        except (QueueStopped, ClientGone) as exc:
            return tool_error(as_api_error(exc))
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(result))],
                                    structured_content=result)

    async def _system_one(self, arguments: dict, request_id: str) -> dict:
        return await self._service.answer(arguments, request_id)

    async def _batch(self, arguments: dict, request_id: str) -> dict:
        return await self._service.batch(arguments, request_id)

    async def _models(self, arguments: dict, request_id: str) -> dict:
        if arguments:
            raise UnprocessableRequest(f"list_models takes no arguments, got {', '.join(sorted(arguments))}")
        return await self._service.models()


async def _read_strictly(scope: Scope, receive: Receive) -> Receive:
    """Reads the whole body (the edge has, within its limits) with the routes' strict reader, notes in the scope's
    state why it is not strict JSON, and returns a receive that hands the SDK the same body."""
    body = await Request(scope, receive).body()
    try:
        await strict_body(body)
    except strict_json.NotStrictJson as exc:
        scope.setdefault("state", {})[NOT_STRICT] = str(exc)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
