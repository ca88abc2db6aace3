"""The architecture's floor: a bare Starlette route that sends its body to the echo model as one inference request
over the shim's own HTTP/1.1 connection and answers what comes back; no auth, validation, planning or results.

    python bench/floor_app.py TRITON_HOST:PORT LISTEN_PORT    (Triton's key in INTERN_DECISION_TRITON_API_KEY)
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from tritonclient.http import InferenceServerClient, InferInput

from shim.port.http1 import Http1Connection
from wire.env import host_port


def create_app(triton_address: str) -> Starlette:
    connection = Http1Connection(*host_port(triton_address))
    headers = json.loads(os.environ.get("FLOOR_TRITON_HEADERS") or "{}")  # Triton's API key header, if locked

    async def floor(request: Request) -> Response:
        tensor = InferInput("REQUEST", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([await request.body()], dtype=np.object_))
        body, json_size = InferenceServerClient.generate_request_body([tensor])
        answer = await connection.request("POST", "/v2/models/echo/infer", 30.0, body,
                                          {"Inference-Header-Content-Length": str(json_size), **headers})
        return Response(answer.body, status_code=answer.status, media_type="application/octet-stream")

    async def ready(request: Request) -> Response:
        return Response(b"ok")

    return Starlette(routes=[Route("/floor", floor, methods=["POST"]), Route("/health", ready, methods=["GET"])])


if __name__ == "__main__":
    uvicorn.run(create_app(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]), workers=1, log_level="warning")
