"""System One's operations as MCP tools through the real CPU stack (uvicorn shim, tritonserver, fixture checkpoint),
called by the official MCP client (`mcp`'s Streamable HTTP client and ClientSession): every number compared with
the fixture's predict() in this process, the token, the queue, a bad argument, arguments that are not strict JSON, and
the lock shared with HTTP."""
from __future__ import annotations

import json
import threading
import time
from contextlib import asynccontextmanager

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .helpers import AUTH, NAME, SHIM_TOKEN, assert_equals_predict, held_queue, slow
from .sdk_program import STATE

pytestmark = pytest.mark.triton

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this request?",
             "criteria": {"billing": "Payments and refunds", "delivery": "Shipping and returns"}},
    "urgency": {"type": "score", "instructions": "Rate the priority.", "criteria": ["Low", "Medium", "High"]},
    "refund_requested": {"type": "noul", "instructions": "Is the customer asking for a refund?"},
}


class Rewriting(httpx2.AsyncHTTPTransport):
    """Replaces bytes in what the client sends: the text a host whose JSON writer emits NaN or a key twice sends."""

    def __init__(self, replacements: dict[bytes, bytes]):
        super().__init__()
        self._replacements = replacements

    async def handle_async_request(self, request):
        content = await request.aread()
        for old, new in self._replacements.items():
            content = content.replace(old, new)
        headers = {key: value for key, value in request.headers.items() if key.lower() != "content-length"}
        rewritten = httpx2.Request(request.method, request.url, headers=headers, content=content,
                                   extensions=request.extensions)
        return await super().handle_async_request(rewritten)


@asynccontextmanager
async def mcp_session(shim, token: str | None = SHIM_TOKEN, request_id: str | None = None,
                      statuses: list | None = None, replacements: dict[bytes, bytes] | None = None):
    """The official client's session; statuses, when given, collects the HTTP status of every answer it gets;
    replacements, when given, are made in every body it sends."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if request_id:
        headers["X-Request-Id"] = request_id

    async def note(response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    transport = Rewriting(replacements) if replacements else None
    async with httpx2.AsyncClient(headers=headers, timeout=120, event_hooks={"response": [note]},
                                  transport=transport) as http, \
            streamable_http_client(f"{shim.url}/mcp", http_client=http) as streams, \
            ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


def run(coroutine_function, *args):
    return anyio.run(coroutine_function, *args)


def test_the_official_client_lists_the_tools_and_each_answers_predicts_numbers(shim, in_process, canonical):
    _, engine = in_process
    request = {"model": NAME, "state": STATE, "questions": QUESTIONS}

    async def session_work():
        async with mcp_session(shim, request_id="mcp-three-types") as session:
            tools = await session.list_tools()
            one = await session.call_tool("system_one", request)
            batch = await session.call_tool("system_one_batch", {"requests": [request, request]})
            models = await session.call_tool("list_models", {})
            return tools, one, batch, models

    tools, one, batch, models = run(session_work)
    assert {tool.name for tool in tools.tools} == {"system_one", "system_one_batch", "list_models"}
    assert not one.is_error and not batch.is_error and not models.is_error
    local = engine.predict({"state": STATE, "questions": QUESTIONS})
    assert one.structured_content["model"] == canonical
    assert_equals_predict(one.structured_content["answers"], local)
    assert one.structured_content["usage"] == {key: local["usage"][key] for key in ("input_tokens", "output_tokens")}
    for result in batch.structured_content["results"]:
        assert_equals_predict(result["answers"], local)
    with httpx.Client(base_url=shim.url, timeout=60) as http:
        assert models.structured_content == http.get("/v1/models", headers=AUTH).json()


def test_without_the_token_no_mcp_method_answers(shim):
    statuses: list[int] = []

    async def unauthenticated():
        async with mcp_session(shim, token=None, statuses=statuses):
            pass

    with pytest.raises(BaseException, match="unhandled errors"):  # the client's MCPError, in its task groups
        run(unauthenticated)
    assert statuses == [401]  # initialize itself is refused
    with httpx.Client(base_url=shim.url, timeout=30) as http:
        refused = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                            headers={"Accept": "application/json, text/event-stream"})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"


def test_a_bad_argument_is_a_tool_error_with_the_routes_code_and_message(shim):
    bad = {"model": "nobody", "state": STATE, "questions": QUESTIONS}

    async def ask():
        async with mcp_session(shim) as session:
            return await session.call_tool("system_one", bad)

    result = run(ask)
    assert result.is_error
    with httpx.Client(base_url=shim.url, timeout=60) as http:
        routed = http.post("/v1/systemone", json=bad, headers=AUTH).json()
    assert result.structured_content == {"error": routed["error"], "detail": routed["detail"]}
    assert result.structured_content["error"]["code"] == "invalid_request"


@pytest.mark.parametrize("fault, replacements", [
    ("NaN", {b'"__number__"': b"NaN"}),
    ("Infinity", {b'"__number__"': b"-Infinity"}),
    ("repeated key", {b'"__twice__":"x"': b'"model":"nobody","model":"' + NAME.encode() + b'"'}),
])
def test_arguments_that_are_not_strict_json_are_the_routes_422_as_a_tool_error(shim, fault, replacements):
    """What /v1/systemone refuses as not strict JSON, a tool refuses the same way, inside the tool's error path."""
    arguments = {"model": NAME, "state": {"n": "__number__", "__twice__": "x"}, "questions": QUESTIONS}

    async def ask():
        async with mcp_session(shim, replacements=replacements) as session:
            return await session.call_tool("system_one", arguments)

    result = run(ask)
    assert result.is_error, result
    sent = json.dumps(arguments, separators=(",", ":")).encode()
    for old, new in replacements.items():
        sent = sent.replace(old, new)
    with httpx.Client(base_url=shim.url, timeout=60) as http:
        routed = http.post("/v1/systemone", content=sent, headers={**AUTH, "Content-Type": "application/json"})
    assert routed.status_code == 422
    assert result.structured_content == {"error": routed.json()["error"], "detail": routed.json()["detail"]}
    assert result.structured_content["error"]["code"] == "invalid_request"
    assert {"NaN": "not finite", "Infinity": "not finite", "repeated key": "appears twice"}[fault] in \
        result.structured_content["error"]["message"]


def test_an_mcp_call_past_the_queue_is_429_busy(shim):
    statuses: list[int] = []

    async def initialized_then_call():
        async with mcp_session(shim, statuses=statuses) as session:
            with held_queue(shim, 2.0):
                await session.call_tool("list_models", {})

    with pytest.raises(BaseException, match="unhandled errors"):
        run(initialized_then_call)
    assert statuses[-1] == 429 and 200 in statuses[:-1]  # initialize answered, the call past the queue refused
    with held_queue(shim, 2.0), httpx.Client(base_url=shim.url, timeout=30) as http:
        refused = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                            headers={**AUTH, "Accept": "application/json, text/event-stream"})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "busy"
    assert refused.headers["retry-after"] == "1"


def test_mcp_calls_and_http_requests_never_overlap_inside_the_model(shim):
    """A 1.5 s HTTP request holds the lock; an MCP call of 1 s sent 0.3 s later ends only after both ran in turn."""
    started = time.monotonic()
    ended = {}

    def http_request() -> None:
        with httpx.Client(base_url=shim.url, timeout=60) as client:
            answer = client.post("/decide", json=slow(1.5), headers=AUTH)
        ended["http"] = (time.monotonic() - started, answer.status_code)

    holder = threading.Thread(target=http_request)
    holder.start()
    time.sleep(0.3)

    async def slow_tool_call():
        async with mcp_session(shim) as session:
            return await session.call_tool("system_one", {
                "model": NAME, "state": {"__fixture_fault__": {"sleep_seconds": 1.0}},
                "questions": {"q": QUESTIONS["refund_requested"]}})

    result = run(slow_tool_call)
    ended["mcp"] = time.monotonic() - started
    holder.join()
    assert ended["http"][1] == 200 and not result.is_error
    assert ended["http"][0] < ended["mcp"]
    assert ended["mcp"] >= 1.5 + 1.0 - 0.05  # in turn, never together
