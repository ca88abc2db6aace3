"""Check 4, latency at our shapes: N timed requests per shape, client side and as the service reports them."""
from __future__ import annotations

from collections import Counter

from ..report import FAIL, PASS
from ..shapes import (ANCHOR_TOKENS, LONG_STATE_TOKENS, SHORT_STATE, binary_criteria, plain_body, shared_body)
from ..stats import summarize_ms
from .common import LIMIT_MARGIN, Context

# The upstream figure the anchor shape is compared with (the model's own server, RTX 4090, in-process timing).
UPSTREAM_ANCHOR = {"mean_ms": 44.16, "p50_ms": 44.03, "p95_ms": 44.60, "prompt_tokens": 289, "questions": 3,
                   "where": "upstream reference server, RTX 4090"}


def server_seconds(path: str, body: dict) -> tuple[float | None, float | None, object]:
    """(total, inference, input tokens) as the service reports them for one answer."""
    if path == "/decide":
        return body.get("total_seconds"), body.get("forward_seconds"), body.get("input_tokens")
    timing = body.get("timing", {})
    return timing.get("total_seconds"), timing.get("inference_seconds"), timing.get("input_tokens")


def measure(ctx: Context, path: str, body: dict, n: int) -> dict:
    """One untimed warm-up request, then n timed ones, one after another."""
    statuses: Counter = Counter()
    client, total, inference = [], [], []
    input_tokens = None
    first_error = None
    for index in range(n + 1):
        reply = ctx.service.post(path, body)
        statuses[str(reply.status)] += 1
        if reply.status != 200:
            first_error = first_error or reply.describe()
            continue
        server_total, server_inference, input_tokens = server_seconds(path, reply.body)
        if index == 0:
            continue
        client.append(reply.seconds)
        if server_total is not None:
            total.append(server_total)
        if server_inference is not None:
            inference.append(server_inference)
    return {"path": path, "input_tokens": input_tokens, "requests": n + 1, "warm_up": 1,
            "non_200": sum(count for status, count in statuses.items() if status != "200"),
            "statuses": dict(statuses), "first_error": first_error, "client_ms": summarize_ms(client),
            "server_total_ms": summarize_ms(total), "server_inference_ms": summarize_ms(inference)}


def run(ctx: Context) -> tuple[str, str | None, dict]:
    n = ctx.options.n
    max_tokens = ctx.max_tokens()
    long_target = min(LONG_STATE_TOKENS, max_tokens - LIMIT_MARGIN)
    shapes: dict = {}

    criteria21 = binary_criteria(21)
    shapes["21 binary criteria, one state"] = measure(ctx, "/decide/shared", shared_body(SHORT_STATE, criteria21), n)

    criteria16 = binary_criteria(16)
    long_state, growth = ctx.grown_state(criteria16, long_target, tolerance=50)
    shapes["16 criteria, ~3,900-token state"] = {
        **measure(ctx, "/decide/shared", shared_body(long_state, criteria16), n), "growth": growth.as_numbers()}

    criteria3 = binary_criteria(3)
    anchor_state, anchor_growth = ctx.grown_state(criteria3, min(ANCHOR_TOKENS, max_tokens - LIMIT_MARGIN),
                                                  tolerance=15)
    shapes["upstream anchor: 3 questions, ~289 tokens"] = {
        **measure(ctx, "/decide/shared", shared_body(anchor_state, criteria3), n),
        "growth": anchor_growth.as_numbers(), "upstream": UPSTREAM_ANCHOR}

    shapes["one question, /decide"] = measure(ctx, "/decide", plain_body(), n)

    numbers = {"n": n, "max_tokens": max_tokens, "max_p50_ms": ctx.options.max_p50_ms, "shapes": shapes}
    reasons = [f"{name}: {shape['non_200']} request(s) not 200 ({shape['first_error']})"
               for name, shape in shapes.items() if shape["non_200"]]
    if ctx.options.max_p50_ms is not None:
        reasons += [f"{name}: client p50 {shape['client_ms']['p50']:.1f} ms is above {ctx.options.max_p50_ms} ms"
                    for name, shape in shapes.items()
                    if shape["client_ms"] and shape["client_ms"]["p50"] > ctx.options.max_p50_ms]
    return (FAIL, "; ".join(reasons), numbers) if reasons else (PASS, None, numbers)
