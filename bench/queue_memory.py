"""The shim's memory with a full queue (MAX_QUEUE, 32) of the largest bodies its bounds allow: 1 MiB
(MAX_BODY_BYTES) of System One request each, its state built to cost the most memory per byte within
strict_json.MAX_VALUES.

One process per shape runs the shim's app in process over a model that holds its first call (the fake of the unit
tests), sends MAX_QUEUE requests at once (one scoring, the rest parsed and waiting for the lock), and reads the
process's resident memory (VmRSS) before and once all are queued, then its peak (VmHWM). The app runs on httpx's
ASGI transport, so the client's one copy of the body is counted too (1 MiB).

    .venv/bin/python bench/queue_memory.py

Prints a JSON summary and writes bench/results/queue_memory.json.
"""
from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wire import strict_json  # noqa: E402

RESULTS = ROOT / "bench" / "results"
BODY_BYTES = 1024 * 1024  # the default MAX_BODY_BYTES
QUEUE = 32  # the default MAX_QUEUE


def request_around(state: bytes) -> bytes:
    question = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
    return json.dumps({"model": "Intern-Decision-4B", "state": "STATE", "questions": question}).encode().replace(
        b'"STATE"', state)


def largest(unit) -> bytes:
    """The most units `unit(i)` in one array that keep the request within the body and values bounds."""
    low, high = 1, BODY_BYTES
    while low < high:
        middle = (low + high + 1) // 2
        body = request_around(b"[" + b",".join(unit(i) for i in range(middle)) + b"]")
        if len(body) <= BODY_BYTES and strict_json.values_at_most(body) <= strict_json.MAX_VALUES:
            low = middle
        else:
            high = middle - 1
    return request_around(b"[" + b",".join(unit(i) for i in range(low)) + b"]")


SHAPES = {
    "objects of one distinct key": lambda: largest(lambda i: b'{"k%07d":%d}' % (i, i)),
    "objects of one key": lambda: largest(lambda i: b'{"a":1}'),
    "arrays of one number": lambda: largest(lambda i: b"[0]"),
    "distinct short strings": lambda: largest(lambda i: b'"s%07d"' % i),
    "one 1 MiB string": lambda: request_around(b'"' + b"x" * (BODY_BYTES - 200) + b'"'),
    "56-deep nested arrays (refused: values)": lambda: request_around(
        b"[" + b",".join([b"[" * 56 + b"]" * 56] * 9000) + b"]"),
}


def memory_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


async def measure(shape: str) -> dict:
    import httpx

    from shim.app import build_service
    from shim.metrics import ShimMetrics
    from tests.unit.fake_model import FakeModel
    from tests.unit.shim_helpers import AUTH, make_settings

    body = SHAPES[shape]()
    model = FakeModel()
    model.gate = asyncio.Event()
    metrics = ShimMetrics()
    service = build_service(make_settings(max_queue=str(QUEUE)), model, metrics)
    headers = {**AUTH, "Content-Type": "application/json"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=service.app), base_url="http://shim",
                                 timeout=120) as client:
        await client.get("/health")
        gc.collect()
        idle = memory_kib("VmRSS")
        sent = [asyncio.create_task(client.post("/v1/systemone", content=body, headers=headers))
                for _ in range(QUEUE)]
        for _ in range(6000):
            await asyncio.sleep(0.01)
            if all(task.done() for task in sent) or (model.active == 1 and queued(metrics) == QUEUE - 1):
                break
        full = memory_kib("VmRSS")
        held = model.active + queued(metrics)
        model.gate.set()
        answers = await asyncio.gather(*sent)
    return {"shape": shape, "body_bytes": len(body), "values_at_most": strict_json.values_at_most(body),
            "held": held, "statuses": sorted({answer.status_code for answer in answers}),
            "rss_idle_mib": round(idle / 1024, 1), "rss_full_queue_mib": round(full / 1024, 1),
            "rss_peak_mib": round(memory_kib("VmHWM") / 1024, 1)}


def queued(metrics) -> int:
    return int(metrics.registry.get_sample_value("intern_decision_shim_requests_queued") or 0)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--shape":
        print(json.dumps(asyncio.run(measure(sys.argv[2]))))
        return
    runs = []
    for shape in SHAPES:
        done = subprocess.run([sys.executable, __file__, "--shape", shape], capture_output=True, text=True,
                              check=True, cwd=ROOT)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    summary = {"max_queue": QUEUE, "max_body_bytes": BODY_BYTES, "max_values": strict_json.MAX_VALUES,
               "shapes": runs}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "queue_memory.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
