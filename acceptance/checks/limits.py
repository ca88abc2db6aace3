"""Check 8, auth and admission: 401 without the token or with a wrong one, 429 busy past the queue."""
from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from ..client import NO_TOKEN, WRONG_TOKEN, Reply, Service
from ..report import FAIL, PASS
from ..shapes import binary_criteria, path_for, plain_body, shared_body
from .common import CheckFailed, Context, ProbeFailed


def unauthorized(ctx: Context) -> tuple[dict, list[str]]:
    cases = {"no token, /decide": ("/decide", plain_body("auth"), NO_TOKEN),
             "wrong token, /decide": ("/decide", plain_body("auth"), WRONG_TOKEN),
             "no token, /decide/shared": ("/decide/shared", shared_body("s", binary_criteria(1)), NO_TOKEN)}
    seen, reasons = {}, []
    for name, (path, body, token) in cases.items():
        reply = ctx.service.post(path, body, token=token)
        seen[name] = {"status": reply.status, "error_code": reply.error_code}
        if reply.status != 401 or reply.error_code != "unauthorized" or not reply.is_envelope:
            reasons.append(f"{name}: {reply.describe()}, not 401 unauthorized")
    return seen, reasons


def flood_body(ctx: Context) -> tuple[str, dict, str]:
    """The operator's body, or the slowest shape check 4 measures (16 questions over the long state)."""
    if ctx.options.flood_body is not None:
        body = ctx.body_from_file(ctx.options.flood_body)
        return path_for(body), body, str(ctx.options.flood_body)
    criteria16, state, growth, _ = ctx.long_state()
    return "/decide/shared", shared_body(state, criteria16), f"16 questions over a state of ~{growth.tokens} tokens"


def flood(service: Service, path: str, body: dict, count: int) -> list[Reply]:
    """count requests released together, each on its own connection."""
    gate = threading.Barrier(count)

    def one(_: int) -> Reply:
        gate.wait()
        return service.post(path, body, fresh_connection=True)

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(one, range(count)))


def run(ctx: Context) -> tuple[str, str | None, dict]:
    numbers: dict = {}
    numbers["unauthorized"], reasons = unauthorized(ctx)

    try:
        path, body, described = flood_body(ctx)
    except (CheckFailed, ProbeFailed) as exc:
        raise CheckFailed("; ".join([*reasons, f"building the flood request: {exc}"]), numbers) from None
    started = time.monotonic()
    replies = flood(ctx.service, path, body, ctx.options.flood)
    statuses = Counter(str(reply.status) for reply in replies)
    busy = [reply for reply in replies if reply.status == 429]
    busy_envelopes = sum(1 for reply in busy if reply.is_envelope and reply.error_code == "busy")
    others = [reply for reply in replies if reply.status not in (200, 429)]
    numbers["flood"] = {"requests": ctx.options.flood, "body": described, "statuses": dict(statuses),
                        "busy_envelopes": busy_envelopes, "seconds": round(time.monotonic() - started, 3),
                        "first_other": others[0].describe() if others else None}
    if not busy:
        reasons.append(f"no 429 among {ctx.options.flood} concurrent requests (raise --flood above the queue limit)")
    elif busy_envelopes != len(busy):
        reasons.append(f"{len(busy) - busy_envelopes} 429 answer(s) without the busy envelope")
    if others:
        reasons.append(f"{len(others)} answer(s) neither 200 nor 429, e.g. {others[0].describe()}")
    return (FAIL, "; ".join(reasons), numbers) if reasons else (PASS, None, numbers)
