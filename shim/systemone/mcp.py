"""System One's operations as Model Context Protocol tools at /mcp (the official `mcp` SDK: Streamable HTTP,
stateless, JSON responses, so that any replica can answer any call). The tools and their schemas: docs/systemone.md.

Each tool runs its route's operation on the same SystemOneService, behind the same edge. Why the body is read here
and not by the SDK: the SDK's reader takes NaN, Infinity and repeated keys and parses on the event loop, so the
endpoint parses each body once with the routes' strict reader (shim/json_body.py) and hands the SDK only the small
message around a tool's arguments (413 past SDK_MESSAGE_BYTES); a large body that is not strict JSON is 422 before
the SDK reads it. The SDK runs each handler outside the request's context, so the handler takes the request id and
the usage from the request's scope first.
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
from ..errors.answer import refuse
from ..errors.codes import INVALID, TOO_LARGE
from ..errors import ApiError, UnprocessableRequest
from ..errors.handlers import as_api_error, error_body
from ..json_body import ON_LOOP_BYTES, strict_body
from ..port.waiting import QueueStopped
from .request import SystemOneInvalid
from .service import SystemOneService

log = logging.getLogger("intern_decision.shim")

SERVER_NAME = "intern-decision-serve"
COMPONENTS = "#/components/schemas/"
NOT_STRICT = "mcp_body_not_strict"  # the key, in the request's scope state, of why its body is not strict JSON
ARGUMENTS = "mcp_tool_arguments"  # the key, in the request's scope state, of a tools/call's arguments, parsed once
LARGE = "mcp_large_body"  # the key of whether the body was over ON_LOOP_BYTES (its arguments are read off the loop)
SDK_MESSAGE_BYTES = ON_LOOP_BYTES  # what the SDK may parse on the loop: a message without its tool arguments


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
        self._manager = self._new_manager()
        try:
            async with self._manager.run():
                yield
        finally:
            self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        receive = await _read_once(scope, receive, send)
        if receive is None:
            return
        if self._manager is None:  # an app run without its lifespan (unit tests' ASGI transport): one per request
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
        arguments = state[ARGUMENTS] if ARGUMENTS in state else params.arguments
        try:
            result = await operation(arguments or {}, request_id, state.get(LARGE, False))
        except (ApiError, UnprocessableRequest) as exc:
            return tool_error(exc)
        except (QueueStopped, ClientGone) as exc:
            return tool_error(as_api_error(exc))
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


async def _read_once(scope: Scope, receive: Receive, send: Send) -> Receive | None:
    """Reads the whole body (the edge has, within its limits) once, with the routes' strict reader; returns a receive
    that hands the SDK what it may still parse on the loop, or None when the body was refused here."""
    body = await Request(scope, receive).body()
    state = scope.setdefault("state", {})
    try:
        message = await strict_body(body)
    except strict_json.NotStrictJson as exc:
        if len(body) > SDK_MESSAGE_BYTES:
            await refuse(scope, receive, send, INVALID, str(exc))
            return None
        state[NOT_STRICT] = str(exc)
        return _replay(body, receive)
    arguments = _tool_arguments(message)
    if arguments is not None:
        state[ARGUMENTS] = arguments
        state[LARGE] = len(body) > ON_LOOP_BYTES
        message = {**message, "params": {**message["params"], "arguments": {}}}
    handed = json.dumps(message, ensure_ascii=False).encode("utf-8") if _small(message) else None
    if handed is None or len(handed) > SDK_MESSAGE_BYTES:
        await refuse(scope, receive, send, TOO_LARGE, f"an MCP message, a tool's arguments aside, may be at most "
                                                      f"{SDK_MESSAGE_BYTES} bytes")
        return None
    return _replay(handed, receive)


def _small(value: Any) -> bool:
    """Whether `value` may serialize within SDK_MESSAGE_BYTES, read without serializing it (which would hold the loop
    for a large one): counted as json.dumps writes it, at least, each separator, quote, digit and character; a float
    by its repr, so that a few thousand of them cost the loop nothing before the 413."""
    budget, pending = SDK_MESSAGE_BYTES, [value]
    while pending:
        current = pending.pop()
        if isinstance(current, str):
            budget -= 2 + len(current)
        elif isinstance(current, bool) or current is None:
            budget -= 4
        elif isinstance(current, int):
            budget -= 1 + current.bit_length() // 4  # at least one decimal digit per 4 bits
        elif isinstance(current, float):
            budget -= len(repr(current))
        elif isinstance(current, dict):
            budget -= 2 + 4 * len(current)  # braces, and ": " and ", " per member
        elif isinstance(current, list):
            budget -= 2 + 2 * len(current)  # brackets, and ", " per element
        else:
            budget -= 1
        if budget < 0:  # before a large container's members are looked at
            return False
        if isinstance(current, dict):
            pending.extend(current.keys())
            pending.extend(current.values())
        elif isinstance(current, list):
            pending.extend(current)
    return True


def _tool_arguments(message: Any) -> dict | None:
    """A tools/call's arguments object, or None for any other message (the SDK reads and answers those)."""
    if not (isinstance(message, dict) and message.get("method") == "tools/call"):
        return None
    params = message.get("params")
    arguments = params.get("arguments") if isinstance(params, dict) else None
    return arguments if isinstance(arguments, dict) else None


def _replay(body: bytes, receive: Receive) -> Receive:
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
