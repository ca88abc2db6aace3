"""The reference a caller without Triton would run: the same intern_decision_model engine and the checkpoint's own
predict(), in process behind a minimal Starlette app serving /v1/systemone and /decide/shared (no Triton, no shim
server, no auth, metrics or bounds). The request is read and answered with the same pure translation the shim uses,
so both servers return the same answers; the calls run one request at a time on a worker thread, as any in-process
server must keep the event loop free while torch works.

    python bench/inprocess_app.py LISTEN_PORT    (the checkpoint's settings in the environment, as the model's)
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import torch
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from intern_decision_model.engine import ServingEngine
from intern_decision_model.settings import Settings
from shim.port.chunking import chunks
from shim.semif.plan import plan
from shim.semif.request import shared_body
from shim.semif.service import DecisionService
from shim.systemone.answers import call_request, response_body
from shim.systemone.request import parse_request
from wire.answer import CallAnswer
from wire.protocol import predict_request

MAX_DECISIONS = 64


def create_app(engine: ServingEngine) -> Starlette:
    lock = asyncio.Lock()  # one request's calls at a time, as in the stack

    async def scored(requests: list[dict]) -> tuple[list[CallAnswer], float]:
        async with lock:
            started = time.perf_counter()
            answers = await run_in_threadpool(lambda: [CallAnswer.read(answer)
                                                       for answer in engine.answer_calls(requests)])
            return answers, started

    async def decide_shared(request: Request) -> Response:
        state, decisions = shared_body(json.loads(await request.body()))
        calls = plan(decisions, MAX_DECISIONS)
        answers, started = await scored([predict_request(state, call.request(decisions)) for call in calls])
        body = {"results": DecisionService._results(decisions, calls, answers),
                "timing": {"total_seconds": time.perf_counter() - started, "queue_seconds": 0.0,
                           "calls": len(calls), "input_tokens": [answer.input_tokens for answer in answers],
                           "inference_seconds": sum(answer.inference_ms for answer in answers) / 1000}}
        return Response(json.dumps(body), media_type="application/json")

    async def systemone(request: Request) -> Response:
        parsed = parse_request(json.loads(await request.body()), MAX_DECISIONS)
        calls = chunks(parsed.questions)
        answers, _ = await scored([predict_request(parsed.state, call_request(chunk)) for chunk in calls])
        return Response(json.dumps(response_body(parsed.model, calls, answers)), media_type="application/json")

    async def health(request: Request) -> Response:
        return Response(b"ok")

    return Starlette(routes=[Route("/decide/shared", decide_shared, methods=["POST"]),
                             Route("/v1/systemone", systemone, methods=["POST"]),
                             Route("/health", health, methods=["GET"])])


if __name__ == "__main__":
    torch.set_num_threads(1)
    engine = ServingEngine.start(Settings.from_env(os.environ), "cpu")
    uvicorn.run(create_app(engine), host="127.0.0.1", port=int(sys.argv[1]), workers=1, log_level="warning")
