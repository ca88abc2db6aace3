"""Check 4, latency at our shapes: N timed requests per shape, client side and as the service reports them.

The contract's shapes: 21 binary criteria (over a state as long as the bench's, REALISTIC_STATE_CHARS) and 16
criteria over a state of about 3,900 tokens of its own. N >= MIN_LATENCY_N is this kit's rule, not the contract's.
The client-side numbers are from the host the kit runs on (meta.host, --client-host); the service's own are the
same from anywhere.
"""
from __future__ import annotations

from collections import Counter
from urllib.parse import urlsplit

from ..options import MIN_LATENCY_N
from ..shapes import (
    ANCHOR_TOKENS,
    LONG_STATE_TOKENS,
    REALISTIC_STATE_CHARS,
    binary_criteria,
    plain_body,
    realistic_state,
    shared_body,
)
from ..stats import summarize_ms
from .common import LIMIT_MARGIN, Context, ProbeFailed, Verdict

LONG_SHAPE = "16 criteria, ~3,900-token state"
REALISTIC_SHAPE = "21 binary criteria, realistic state"

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


def fitting_realistic_state(ctx: Context, decisions: list[dict]) -> str:
    """The realistic state, shortened (to 0.7 of its length, again and again) only while the service refuses it
    as too long for max_tokens; ProbeFailed when it answers anything else."""
    chars = REALISTIC_STATE_CHARS
    while True:
        state = realistic_state(chars)
        reply = ctx.service.post("/decide/shared", shared_body(state, decisions))
        if reply.status == 200 or chars < 200:
            return state
        if reply.status != 422:
            raise ProbeFailed(reply)
        chars = int(chars * 0.7)


def run(ctx: Context) -> tuple[str, str | None, dict]:
    n = ctx.options.n
    max_tokens = ctx.max_tokens()
    shapes: dict = {}
    verdict = Verdict()

    criteria21 = binary_criteria(21)
    state21 = fitting_realistic_state(ctx, criteria21)
    shapes[REALISTIC_SHAPE] = {**measure(ctx, "/decide/shared", shared_body(state21, criteria21), n),
                               "state_chars": len(state21),
                               "state": f"a support case log of about {REALISTIC_STATE_CHARS} characters, "
                                        "the length of the bench's shape777 states"}
    if len(state21) < REALISTIC_STATE_CHARS:
        verdict.unprove(f"{REALISTIC_SHAPE}: the state was shortened to {len(state21)} characters to fit "
                        f"max_tokens {max_tokens}, not about {REALISTIC_STATE_CHARS}")

    criteria16, long_state, growth, reached = ctx.long_state()
    shapes[LONG_SHAPE] = {**measure(ctx, "/decide/shared", shared_body(long_state, criteria16), n),
                          "state_tokens": growth.tokens, "growth": growth.as_numbers()}
    if not reached:
        verdict.unprove(f"{LONG_SHAPE}: the state reached {growth.tokens} tokens of its own, not about "
                        f"{LONG_STATE_TOKENS} (max_tokens {max_tokens} holds no more)")

    criteria3 = binary_criteria(3)
    anchor_state, anchor_growth = ctx.grown_state(criteria3, min(ANCHOR_TOKENS, max_tokens - LIMIT_MARGIN),
                                                  tolerance=15)
    shapes["upstream anchor: 3 questions, ~289 tokens"] = {
        **measure(ctx, "/decide/shared", shared_body(anchor_state, criteria3), n),
        "growth": anchor_growth.as_numbers(), "upstream": UPSTREAM_ANCHOR}

    shapes["one question, /decide"] = measure(ctx, "/decide", plain_body(), n)

    numbers = {"n": n, "n_required": MIN_LATENCY_N, "client_host": ctx.options.client_host,
               "service_host": urlsplit(ctx.options.url).hostname, "max_tokens": max_tokens,
               "max_p50_ms": ctx.options.max_p50_ms, "shapes": shapes}
    if n < MIN_LATENCY_N:
        verdict.unprove(f"{n} timed request(s) per shape; this kit asks at least {MIN_LATENCY_N}")
    for name, shape in shapes.items():
        if shape["non_200"]:
            verdict.fail(f"{name}: {shape['non_200']} request(s) not 200 ({shape['first_error']})")
        p50 = (shape["client_ms"] or {}).get("p50")
        if ctx.options.max_p50_ms is not None and p50 is not None and p50 > ctx.options.max_p50_ms:
            verdict.fail(f"{name}: client p50 {p50:.1f} ms is above {ctx.options.max_p50_ms} ms")
    return verdict.result(numbers)
