"""Time the fitted shapes through the service: POST /decide/shared from a kept-alive stdlib HTTP connection (so that
no client library is measured), warm-up requests, then up to N within the budget. The response's own timing
says how much of each request was the model's forward; the token counts it reports are compared with the
in-process ones, so that both sides are known to have scored the same prompts."""
from __future__ import annotations

import json
import time
from http.client import HTTPConnection
from urllib.parse import urlsplit

from gpucheck.stats import summary


class ServiceError(RuntimeError):
    pass


def post(connection: HTTPConnection, token: str, body: dict) -> tuple:
    payload = json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    started = time.perf_counter()
    connection.request("POST", "/decide/shared", body=payload, headers=headers)
    response = connection.getresponse()
    text = response.read()
    elapsed = time.perf_counter() - started
    if response.status != 200:
        raise ServiceError(f"/decide/shared answered {response.status}: {text[:500]!r}")
    return elapsed, json.loads(text)


def time_shape(url: str, token: str, body: dict, rounds: int, seconds: float, warmup: int = 2) -> dict:
    parts = urlsplit(url)
    connection = HTTPConnection(parts.hostname, parts.port, timeout=300)
    try:
        for _ in range(warmup):
            post(connection, token, body)
        client_ms, server_ms, forward_ms, tokens = [], [], [], []
        stop = time.monotonic() + seconds
        while len(client_ms) < rounds and (not client_ms or time.monotonic() < stop):
            elapsed, answer = post(connection, token, body)
            timing = answer.get("timing") or {}
            client_ms.append(elapsed * 1000)
            if isinstance(timing.get("total_seconds"), (int, float)):
                server_ms.append(timing["total_seconds"] * 1000)
            if isinstance(timing.get("inference_seconds"), (int, float)):
                forward_ms.append(timing["inference_seconds"] * 1000)
            tokens = timing.get("input_tokens") or tokens
    finally:
        connection.close()
    return {"client": summary(client_ms), "server": summary(server_ms), "forward": summary(forward_ms),
            "tokens": tokens, "client_ms": [round(ms, 3) for ms in client_ms]}
