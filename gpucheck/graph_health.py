"""What the CUDA graphs did, from the service's /health (docs/wire-protocol.md, "The graphs, live"). /health reads the
model's graph series with its background check, so a reading counts the calls the check sent only a refresh later:
each reading here waits until it does, and says when it could not."""
from __future__ import annotations

import time
from typing import Callable

from gpucheck.stack import health

HEALTH_REFRESH_SECONDS = 5.0  # shim.health.MODEL_CHECK_SECONDS; the check may run without the shim's packages
SETTLE_SECONDS = HEALTH_REFRESH_SECONDS + 1.0  # a refresh of /health, and the model's metric update before it
POLL_SECONDS = 0.25


def graphs_of(body: dict | None) -> dict | None:
    return (body or {}).get("graphs")


def forward_calls(graphs: dict | None) -> int:
    return (graphs or {}).get("calls_replayed", 0) + (graphs or {}).get("calls_eager", 0)


def running(graphs: dict | None) -> bool:
    """Whether the counts can still move: graphs on (off stays off, and off counts nothing)."""
    return graphs is not None and graphs.get("mode") not in (None, "off")


def reader(shim) -> Callable[[], dict | None]:
    return lambda: graphs_of(health(shim))


def settled(read: Callable[[], dict | None], seconds_left: float, sleep=time.sleep) -> dict:
    """The graphs once /health has refreshed after the calls already sent; `caught_up` false when less than a
    refresh was left to wait."""
    wait = min(SETTLE_SECONDS, max(0.0, seconds_left))
    sleep(wait)
    return {"graphs": read(), "caught_up": wait >= SETTLE_SECONDS}


def current(read: Callable[[], dict | None], seconds_left: float, sleep=time.sleep) -> dict:
    """The graphs now: at once when they are off (nothing moves then), else after a refresh (settled)."""
    graphs = read()
    return settled(read, seconds_left, sleep) if running(graphs) else {"graphs": graphs, "caught_up": True}


def after_calls(read: Callable[[], dict | None], at_least: int, seconds_left: float, sleep=time.sleep,
                clock=time.monotonic) -> dict:
    """The graphs once their forward calls reach `at_least` (or graphs are off), polled for at most a refresh;
    `caught_up` false when /health had not counted them by then."""
    stop = clock() + min(SETTLE_SECONDS, max(0.0, seconds_left))
    while True:
        graphs = read()
        if not running(graphs) or forward_calls(graphs) >= at_least:
            return {"graphs": graphs, "caught_up": True}
        if clock() >= stop:
            return {"graphs": graphs, "caught_up": False}
        sleep(POLL_SECONDS)


def calls_between(before: dict | None, after: dict | None) -> dict:
    """The forward calls replayed and run eager between two readings."""
    return {path: (after or {}).get(f"calls_{path}", 0) - (before or {}).get(f"calls_{path}", 0)
            for path in ("replayed", "eager")}


def describe(graphs: dict | None) -> str:
    """One line: the mode (and why off), shapes captured and refused, memory and calls."""
    if graphs is None:
        return "not published"
    mode = graphs["mode"] + (f" ({graphs['reason']})" if graphs.get("reason") else "")
    refused = ", ".join(f"{count} {why}" for why, count in graphs["shapes_refused"].items() if count) or "none"
    return (f"{mode}; {graphs['shapes_captured']} shapes captured, refused: {refused}; "
            f"{graphs['memory_bytes'] / 2 ** 20:.0f} MiB; {graphs['calls_replayed']} calls replayed, "
            f"{graphs['calls_eager']} eager")
