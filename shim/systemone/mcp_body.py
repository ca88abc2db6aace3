"""An MCP request's body read once with the routes' strict reader and replayed to the SDK without a tool's
arguments, kept parsed in the scope's state: the SDK parses on the loop and takes NaN and repeated keys."""
from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from wire import strict_json

from ..errors.answer import refuse
from ..errors.codes import INVALID, TOO_LARGE
from ..json_body import ON_LOOP_BYTES, strict_body

NOT_STRICT = "mcp_body_not_strict"
ARGUMENTS = "mcp_tool_arguments"
LARGE = "mcp_large_body"  # its arguments are read off the loop
SDK_MESSAGE_BYTES = ON_LOOP_BYTES  # what the SDK may parse on the loop


async def read_once(scope: Scope, receive: Receive, send: Send) -> Receive | None:
    """A receive that hands the SDK what it may still parse on the loop, or None when the body was refused."""
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
    handed = json.dumps(message, ensure_ascii=False).encode("utf-8") if small(message) else None
    if handed is None or len(handed) > SDK_MESSAGE_BYTES:
        await refuse(scope, receive, send, TOO_LARGE, f"an MCP message, a tool's arguments aside, may be at most "
                                                      f"{SDK_MESSAGE_BYTES} bytes")
        return None
    return _replay(handed, receive)


def small(value: Any) -> bool:
    """A lower bound of json.dumps's size, counted without serializing, which would hold the loop."""
    budget, pending = SDK_MESSAGE_BYTES, [value]
    while pending:
        current = pending.pop()
        if isinstance(current, str):
            budget -= 2 + len(current)
        elif isinstance(current, bool) or current is None:
            budget -= 4
        elif isinstance(current, int):
            budget -= 1 + current.bit_length() // 4
        elif isinstance(current, float):
            budget -= len(repr(current))
        elif isinstance(current, dict):
            budget -= 2 + 4 * len(current)
        elif isinstance(current, list):
            budget -= 2 + 2 * len(current)
        else:
            budget -= 1
        if budget < 0:
            return False
        if isinstance(current, dict):
            pending.extend(current.keys())
            pending.extend(current.values())
        elif isinstance(current, list):
            pending.extend(current)
    return True


def _tool_arguments(message: Any) -> dict | None:
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
