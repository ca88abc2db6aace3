"""What the shim and Triton add to a request over calling the fixture's predict() in-process, against the floor.

Starts one tritonserver (CPU, fixture checkpoint) holding the model and an echo model (bench/echo_model: the same
tensors, no work), the shim in front of the model, and the floor app (bench/floor_app.py: a bare Starlette route
in front of the echo model), and loads the same fixture in this process. Each round, for each shape, it times:

* in-process: predict() for each of the request's calls;
* Triton: the calls sent straight to Triton with tritonclient (as the model's protocol wants them: one request
  carrying every call, or, for a model still on protocol v1, one request per call);
* shim: the request through the shim's /decide/shared (the System One shapes: /v1/systemone or its batch);
* floor: the request's body through the floor app and the echo model.

The System One shapes (--systemone) run beside their /decide/shared twins, in the same rounds and alternating with
them: "one choice" is a System One request whose translation is the twin's predict() request exactly; the 40
questions are the same three calls of binary choices under other field names. So the two routes' added times are
comparable.

Each path's time minus the predict() forward time it reports itself (timing.inference_ms, summed over the calls)
is what that path spends outside the forward pass; the in-process figure is subtracted from the others, so what is
left is what the path adds to a caller, measured on the same request and free of the model's run-to-run noise. The
floor does no model work, so its whole time is the floor. The shim's CPU per request comes from /proc.

    .venv/bin/python bench/overhead.py [--rounds 30] [--label after] [--systemone] [--write-doc]

Results go to bench/results/<label>.json; --write-doc renders docs/benchmarks.md from every results file there.
"""
from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import platform
import sys
import tempfile
import time
from http.client import HTTPConnection
from pathlib import Path

import numpy as np
import torch
import tritonclient.http as httpclient

from acceptance.shapes import ANCHOR_QUESTIONS, ANCHOR_STATE
from acceptance.stats import percentile
from devstack.fixture import build_fixture
from devstack.process import ManagedProcess, free_port
from devstack.shim import ShimServer
from devstack.triton import MODEL_REPOSITORY, REPO_ROOT, TritonServer
from shim.port.chunking import chunks
from shim.semif.plan import plan
from shim.semif.request import shared_body
from shim.systemone.answers import call_request
from shim.systemone.request import parse_request
from wire.protocol import DATATYPE, MODEL_NAME, REQUEST, RESPONSE, predict_request

TOKEN = "benchmark-token-0123456789-abcdefghijklmnop"
BENCH = REPO_ROOT / "bench"
RESULTS = BENCH / "results"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
STATE = "The parcel arrived broken and the customer wants a refund."


def criteria(count: int, options: int = 2, orderings: str = "none") -> list[dict]:
    choices = [{"id": "yes", "description": "It holds."}, {"id": "no", "description": "It does not."}]
    if options > 2:
        choices = [{"id": f"o{k}", "description": f"Option {k} applies."} for k in range(options)]
    return [{"id": f"c{n}", "question": f"Does criterion {n} hold for this state?", "options": choices,
             "orderings": orderings} for n in range(count)]


SYSTEMONE_MODEL = "Intern-Decision-4B"


def calls_of(body: dict) -> list[dict]:
    state, decisions = shared_body(body)
    return [predict_request(state, call.request(decisions)) for call in plan(decisions, 64)]


def systemone_calls(body: dict) -> list[list[dict]]:
    """The predict() requests of a System One request (or each item of a batch), one list per inference request."""
    items = body["requests"] if "requests" in body else [body]
    requests = [parse_request(item, 64) for item in items]
    return [[predict_request(request.state, call_request(chunk)) for chunk in chunks(request.questions)]
            for request in requests]


def as_systemone(body: dict) -> dict:
    """The System One request whose calls are a /decide/shared body's own, field names included."""
    calls = calls_of(body)
    questions = {field: question for call in calls for field, question in call["questions"].items()}
    assert len(questions) == sum(len(call["questions"]) for call in calls), "the twin needs one call"
    return {"model": SYSTEMONE_MODEL, "state": body["state"], "questions": questions}


def systemone_shapes() -> dict[str, dict]:
    anchor = {"model": SYSTEMONE_MODEL, "state": ANCHOR_STATE, "questions": ANCHOR_QUESTIONS}
    forty = {"model": SYSTEMONE_MODEL, "state": STATE, "questions": {
        f"c{n}": {"type": "choice", "instructions": f"Does criterion {n} hold for this state?",
                  "criteria": {"yes": "It holds.", "no": "It does not."}} for n in range(40)}}
    return {
        "System One: one choice (the twin of one question)": as_systemone({"state": STATE, "decisions": criteria(1)}),
        **{f"System One: one {name}": {"model": SYSTEMONE_MODEL, "state": STATE, "questions": {name: question}}
           for name, question in (("score", ANCHOR_QUESTIONS["urgency"]),
                                  ("noul", ANCHOR_QUESTIONS["refund_requested"]))},
        "System One: 3 mixed questions, the anchor state": anchor,
        "System One: 40 questions, chunked": forty,
        "System One: a batch of 8 anchors": {"requests": [anchor] * 8},
    }


def twins(engine) -> dict[str, tuple[str, dict]]:
    """System One shape -> (its /decide/shared twin's name, the twin's body): the same calls, choice questions only."""
    return {"System One: one choice (the twin of one question)":
            ("/decide/shared: one question (the twin of one choice)", shapes(engine)["one question"]),
            "System One: 40 questions, chunked":
            ("/decide/shared: 40 binary criteria (the twin of 40 questions)",
             {"state": STATE, "decisions": criteria(40)})}


def long_state(engine, target_tokens: int) -> str:
    """A state text that makes the 16-criteria call about target_tokens long in the fixture's tokenizer."""
    sentence = "The shipment left the depot on Monday, was delayed by weather, and the customer asked twice. "
    repeats = 1
    while engine.predict(calls_of({"state": sentence * repeats, "decisions": criteria(16)})[0])["usage"][
            "input_tokens"] < target_tokens:
        repeats += 2
    return sentence * repeats


def shapes(engine) -> dict[str, dict]:
    return {
        "one question": {"state": STATE, "decisions": criteria(1)},
        "21 binary criteria, one state": {"state": STATE, "decisions": criteria(21)},
        "16 criteria, ~3,900-token state": {"state": long_state(engine, 3900), "decisions": criteria(16)},
        "orderings all, 4 options": {"state": STATE, "decisions": criteria(1, options=4, orderings="all")},
        "64 decisions with rotations": {"state": STATE, "decisions": criteria(8, options=8, orderings="rotations")},
    }


def load_fixture_engine(checkpoint: Path):
    spec = importlib.util.spec_from_file_location("fixture_inference_bench", checkpoint / "inference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.DecisionEngine(checkpoint=str(checkpoint), device="cpu", dtype="float32")


def bench_model_repository() -> Path:
    """The model repository plus the echo model, side by side in one tree Triton can load."""
    root = Path(tempfile.mkdtemp(prefix="bench-models-"))
    (root / "intern_decision").symlink_to(MODEL_REPOSITORY / "intern_decision")
    (root / "echo").symlink_to(BENCH / "echo_model")
    return root


def key_header(triton: TritonServer) -> dict[str, str]:
    """The header Triton's restricted APIs want (none for a tree from before they were locked)."""
    return getattr(triton, "key_header", {})


def start_triton(env: dict[str, str], log_path: Path) -> TritonServer:
    options = {"model_repository": bench_model_repository()}
    if "models" in inspect.signature(TritonServer).parameters:  # explicit model control: name both models
        options["models"] = ("intern_decision", "echo")
    return TritonServer(env, log_path, **options).start().wait_ready(300)


class FloorApp(ManagedProcess):
    def __init__(self, triton: TritonServer, log_path: Path):
        self.port = free_port()
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "FLOOR_TRITON_HEADERS": json.dumps(key_header(triton))}
        super().__init__("floor", [sys.executable, str(BENCH / "floor_app.py"), triton.http_url, str(self.port)],
                         env, log_path, f"http://127.0.0.1:{self.port}/health")


class DirectTriton:
    """The calls straight to the model with tritonclient, as the model's protocol version wants them."""

    def __init__(self, url: str, headers: dict[str, str]):
        self.client = httpclient.InferenceServerClient(url)
        self.headers = headers
        dims = self.client.get_model_config("intern_decision", headers=headers)["input"][0]["dims"]
        self.one_request_per_http_request = [int(d) for d in dims] == [-1]

    def forward_ms(self, requests: list[dict], groups: list[list[dict]] | None = None) -> tuple[float, float]:
        """(elapsed ms, the model's reported forward ms); groups: the calls of each inference request, when the
        HTTP request sends several (a System One batch)."""
        groups = groups or [requests]
        if self.one_request_per_http_request:
            batches = [[json.dumps(request).encode() for request in group] for group in groups]
        else:
            batches = [[json.dumps(request).encode()] for request in requests]
        started = time.perf_counter()
        answers = []
        for batch in batches:
            tensor = httpclient.InferInput(REQUEST, [len(batch)], DATATYPE)
            tensor.set_data_from_numpy(np.array(batch, dtype=np.object_))
            result = self.client.infer(MODEL_NAME, [tensor], headers=self.headers)
            answers += [json.loads(answer) for answer in result.as_numpy(RESPONSE)]
        elapsed = (time.perf_counter() - started) * 1000
        return elapsed, sum(answer["timing"]["inference_ms"] for answer in answers)


class Sampler:
    """One shape's samples: its calls in process, straight to Triton, through the shim and through the floor."""

    def __init__(self, body: dict, engine, direct: DirectTriton):
        self.path = route_of(body)
        self.groups = [calls_of(body)] if self.path == "/decide/shared" else systemone_calls(body)
        self.requests = [request for group in self.groups for request in group]
        self.payload = json.dumps(body).encode()
        self.engine, self.direct = engine, direct
        self.local, self.through_triton, self.through_shim, self.floor_ms = [], [], [], []
        self.tokens, self.shim_cpu = 0, 0.0

    def sample(self, shim: ShimServer, shim_http: HTTPConnection, floor_http: HTTPConnection, headers: dict,
               keep: bool) -> None:
        outside = 0.0
        for request in self.requests:
            started = time.perf_counter()
            answer = self.engine.predict(request)
            outside += (time.perf_counter() - started) * 1000 - answer["timing"]["inference_ms"]
            self.tokens = max(self.tokens, answer["usage"]["input_tokens"])
        elapsed, forward = self.direct.forward_ms(self.requests, self.groups)
        triton_outside = elapsed - forward
        cpu_before = cpu_seconds(shim.pid)
        elapsed, text = post(shim_http, self.path, self.payload, headers)
        cpu_used = cpu_seconds(shim.pid) - cpu_before
        shim_outside = elapsed - forward_seconds(self.path, json.loads(text)) * 1000
        floor_elapsed, _ = post(floor_http, "/floor", self.payload, {"Content-Type": "application/json"})
        if keep:
            self.local.append(outside)
            self.through_triton.append(triton_outside - outside)
            self.through_shim.append(shim_outside - outside)
            self.floor_ms.append(floor_elapsed)
            self.shim_cpu += cpu_used

    def figures(self, rounds: int) -> dict:
        calls = len(self.requests)
        return {
            "route": self.path, "calls": calls, "input_tokens": self.tokens,
            "predict_outside_forward_ms": summary(self.local),
            "triton_adds_ms": summary(self.through_triton),
            "stack_adds_ms": summary(self.through_shim),
            "stack_adds_per_call_ms": summary([value / calls for value in self.through_shim]),
            "floor_ms": summary(self.floor_ms),
            "shim_cpu_ms_per_request": self.shim_cpu * 1000 / rounds,
        }


def post(http: HTTPConnection, path: str, payload: bytes, headers: dict) -> tuple[float, bytes]:
    started = time.perf_counter()
    http.request("POST", path, body=payload, headers=headers)
    response = http.getresponse()
    text = response.read()
    elapsed = (time.perf_counter() - started) * 1000
    assert response.status == 200, text
    return elapsed, text


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def forward_seconds(path: str, answer: dict) -> float:
    """The model's forward time the route reports for the request."""
    if path == "/decide/shared":
        return answer["timing"]["inference_seconds"]
    results = answer["results"] if "results" in answer else [answer]
    return sum(call["inference_ms"] for result in results for call in result["x_calls"]) / 1000


def route_of(body: dict) -> str:
    if "decisions" in body:
        return "/decide/shared"
    return "/v1/systemone/batch" if "requests" in body else "/v1/systemone"


def summary(values: list[float]) -> dict:
    return {"p50": percentile(values, 50), "p99": percentile(values, 99)}


def measure(args) -> dict:
    pins = build_fixture()
    env = pins.env()
    # One torch thread on each side, so that the model in Triton's stub and in this process do the same work.
    env.update({"INTERN_DECISION_DEVICE": "cpu", "INTERN_DECISION_DTYPE": "float32", "OMP_NUM_THREADS": "1"})
    torch.set_num_threads(1)
    logs = REPO_ROOT / ".cache" / "bench"
    triton = start_triton(env, logs / "tritonserver.log")
    shim = ShimServer(triton, {"INTERN_DECISION_API_TOKEN": TOKEN}, logs / "shim.log").start()
    floor = FloorApp(triton, logs / "floor.log").start()
    results = {}
    try:
        shim.wait_ready(60)
        floor.wait_ready(60)
        engine = load_fixture_engine(pins.checkpoint)
        direct = DirectTriton(triton.http_url, key_header(triton))
        # The stdlib client with a kept-alive connection, so that the caller's own HTTP library is not measured.
        shim_http = HTTPConnection("127.0.0.1", shim.port, timeout=300)
        floor_http = HTTPConnection("127.0.0.1", floor.port, timeout=300)
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        if args.systemone:
            # Each System One shape that has a /decide/shared twin is measured in the same rounds as its twin,
            # the two alternating, so that the machine's drift falls on both alike.
            measured = systemone_shapes()
            twin_bodies = twins(engine)
            sessions = []
            for name, body in measured.items():
                if name in twin_bodies:
                    twin_name, twin_body = twin_bodies[name]
                    sessions.append({twin_name: twin_body, name: body})
                else:
                    sessions.append({name: body})
        else:
            sessions = [{name: body} for name, body in shapes(engine).items()]
        for session in sessions:
            samplers = {name: Sampler(body, engine, direct) for name, body in session.items()}
            for round_ in range(args.rounds + 2):
                order = list(samplers.values())
                for sampler in order if round_ % 2 == 0 else order[::-1]:
                    sampler.sample(shim, shim_http, floor_http, headers, keep=round_ >= 2)  # two warm-up rounds
            for name, sampler in samplers.items():
                results[name] = sampler.figures(args.rounds)
                print(name, json.dumps(results[name]), flush=True)
        if not args.systemone:
            results["one question"]["shim_cpu_ms_per_request"] = shim_cpu_burst(
                shim, shapes(engine)["one question"], headers, args.cpu_requests)
    finally:
        floor.stop()
        shim.stop()
        triton.stop()
    return results


def shim_cpu_burst(shim: ShimServer, body: dict, headers: dict, count: int) -> float:
    """The shim's CPU per one-question request over many requests (the clock ticks are too coarse for one)."""
    http = HTTPConnection("127.0.0.1", shim.port, timeout=60)
    payload = json.dumps(body).encode()
    before = cpu_seconds(shim.pid)
    for _ in range(count):
        post(http, "/decide/shared", payload, headers)
    return (cpu_seconds(shim.pid) - before) * 1000 / count


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return (f"{cpu} ({os.cpu_count()} cores), Python {platform.python_version()}, torch {torch.__version__} with "
            "one thread on each side, the fixture checkpoint in float32 on the CPU")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--cpu-requests", type=int, default=200)
    parser.add_argument("--label", default="after", help="the name of this run's results file")
    parser.add_argument("--write-doc", action="store_true", help="render docs/benchmarks.md from bench/results/")
    parser.add_argument("--systemone", action="store_true",
                        help="the System One shapes beside their /decide/shared twins (label it e.g. systemone)")
    args = parser.parse_args()
    run = {"label": args.label, "rounds": args.rounds, "machine": machine(), "shapes": measure(args)}
    from report import save
    save(args.label, run, args.write_doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
