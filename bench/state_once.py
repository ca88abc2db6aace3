"""What handing the state over once saves: a request of N calls sharing one state, decoded by the model side
(intern_decision_model/protocol.py) with the state in STATE, parsed once, against each call carrying its own copy,
parsed once per call (a request without STATE, still accepted); and the shim's body for the same calls."""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from bench.report import save
from intern_decision_model import protocol
from shim.port.triton import request_body
from wire import strict_json
from wire.protocol import predict_request


def a_state(size_bytes: int) -> dict:
    notes = [{"day": day, "note": "the customer wrote again about the parcel " * 4} for day in range(size_bytes // 200)]
    return {"order": "lost", "history": notes}


def calls(count: int) -> list[dict]:
    return [{"questions": {"q": {"type": "noul", "instructions": f"question {n}?"}}} for n in range(count)]


def once(state_text: bytes, call_texts: list[bytes]) -> float:
    started = time.perf_counter()
    shared = protocol.decode_state(state_text)
    for text in call_texts:
        protocol.decode_call(text, shared)
    return time.perf_counter() - started


def per_call(texts: list[bytes]) -> float:
    started = time.perf_counter()
    for text in texts:
        protocol.decode_call(text)
    return time.perf_counter() - started


def body(state: object, each: list[dict]) -> float:
    started = time.perf_counter()
    request_body(state, each, "bench")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--state-bytes", type=int, default=1 << 20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--render", action="store_true", help="write docs/benchmarks.md again")
    args = parser.parse_args()
    state, each = a_state(args.state_bytes), calls(args.calls)
    state_text = strict_json.dumps(state)
    call_texts = [strict_json.dumps(call) for call in each]
    carried = [strict_json.dumps(predict_request(state, call)) for call in each]
    timings: dict[str, list[float]] = {"state once": [], "state in every call": [], "shim body": []}
    for _ in range(args.rounds):  # alternating, so that the machine's noise falls on both alike
        timings["state once"].append(once(state_text, call_texts))
        timings["state in every call"].append(per_call(carried))
        timings["shim body"].append(body(state, each))
    run = {"machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}",
           "calls": args.calls, "state_bytes": len(state_text), "rounds": args.rounds,
           "median_ms": {name: round(1000 * statistics.median(values), 2) for name, values in timings.items()}}
    save("state_once", run, args.render)
    print(json.dumps(run, indent=2))


if __name__ == "__main__":
    main()
