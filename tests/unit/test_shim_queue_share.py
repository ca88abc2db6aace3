"""The opt-in share of the queue per source (MAX_QUEUE_PER_PEER) through the real app over a fake model held by a
gate: one address holding its share leaves room for another, a balancer's address is exempt, and a full queue gives a
lighter source's POST the place of the heaviest source's newest waiting request (429 busy), never scored."""
from __future__ import annotations

import asyncio
import json

import pytest

from shim.app import build_service
from shim.cycle import Cycle
from shim.drain import Drain
from shim.edge.admission import LINE_SECONDS, Admission
from shim.edge.queue_share import QueueShare
from shim.metrics import ShimMetrics

from .asgi_exchange import RawRequest
from .fake_model import FakeModel
from .shim_helpers import AUTH, decide_body, make_settings

pytestmark = pytest.mark.anyio

ATTACKER, VICTIM, BALANCER = "10.0.0.1", "10.0.0.2", "10.9.0.7"


async def until(condition, seconds: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


def held_service(**env: str):
    """The app over a model whose calls wait for a gate, its drain, the model and its metrics."""
    model = FakeModel(base={"approve": 1.0})
    model.gate = asyncio.Event()
    metrics = ShimMetrics()
    service = build_service(make_settings(**env), model, metrics)
    return service, model, metrics


def queued(metrics: ShimMetrics) -> float:
    return metrics.registry.get_sample_value("intern_decision_shim_requests_queued")


def post(app, client: str, number: int) -> RawRequest:
    return RawRequest(app, "/decide", decide_body(id=f"d{number}"), AUTH, client=client).start()


def error_of(request: RawRequest) -> tuple[int, str, dict]:
    start = next(message for message in request.sent if message["type"] == "http.response.start")
    body = b"".join(message.get("body", b"") for message in request.sent if message["type"] == "http.response.body")
    headers = {name.decode(): value.decode() for name, value in start["headers"]}
    return start["status"], json.loads(body)["error"]["code"], headers


def assert_busy(request: RawRequest) -> None:
    status, code, headers = error_of(request)
    assert (status, code, headers["retry-after"]) == (429, "busy", "1")


async def attacker_scoring_and_waiting(service, model, metrics) -> tuple[RawRequest, RawRequest]:
    """The attacker's first POST scoring (held by the gate), its second waiting for the lock."""
    scoring = post(service.app, ATTACKER, 0)
    await until(lambda: len(model.calls) == 1)
    waiting = post(service.app, ATTACKER, 1)
    await until(lambda: queued(metrics) == 1)
    return scoring, waiting


async def test_another_address_is_served_while_one_holds_its_share():
    service, model, metrics = held_service(max_queue="8", max_queue_per_peer="2")
    scoring, waiting = await attacker_scoring_and_waiting(service, model, metrics)
    refused = post(service.app, ATTACKER, 2)
    await asyncio.wait_for(refused.task, 2)
    assert_busy(refused)
    assert "MAX_QUEUE_PER_PEER" in json.loads(refused.sent[-1]["body"])["error"]["message"]
    victim = post(service.app, VICTIM, 3)
    await until(lambda: queued(metrics) == 2)
    model.gate.set()
    await asyncio.wait_for(asyncio.gather(scoring.task, waiting.task, victim.task), 2)
    assert (scoring.status, waiting.status, victim.status) == (200, 200, 200)
    assert service.drain.admitted == 0


async def test_a_full_queue_gives_the_heaviest_sources_waiting_place_to_a_lighter_source():
    service, model, metrics = held_service(max_queue="2", max_queue_per_peer="2")
    scoring, waiting = await attacker_scoring_and_waiting(service, model, metrics)
    victim = post(service.app, VICTIM, 2)
    await asyncio.wait_for(waiting.task, 2)
    assert_busy(waiting)
    await until(lambda: queued(metrics) == 1)  # the victim waits in its place
    # The attacker holds 1, as many as the victim: it takes nothing, waits in line and no place frees in time.
    refused = post(service.app, ATTACKER, 3)
    await asyncio.wait_for(refused.task, 2 + LINE_SECONDS)
    assert_busy(refused)
    model.gate.set()
    await asyncio.wait_for(asyncio.gather(scoring.task, victim.task), 2)
    assert (scoring.status, victim.status) == (200, 200)
    assert len(model.calls) == 2  # the reclaimed request was never scored
    assert service.drain.admitted == 0 and queued(metrics) == 0


async def test_a_balancers_address_is_exempt_from_the_share_but_not_from_the_queue():
    service, model, metrics = held_service(max_queue="4", max_queue_per_peer="1", balancer_addresses=BALANCER)
    requests = [post(service.app, BALANCER, number) for number in range(4)]
    await until(lambda: len(model.calls) == 1 and queued(metrics) == 3)
    refused = post(service.app, BALANCER, 4)
    await asyncio.wait_for(refused.task, 2)
    assert error_of(refused)[:2] == (429, "busy")
    model.gate.set()
    await asyncio.wait_for(asyncio.gather(*(request.task for request in requests)), 2)
    assert [request.status for request in requests] == [200] * 4


async def test_a_place_is_free_once_its_answer_is_sent():
    """A client's next request may arrive before the app's task for the last one returns: the place is already free,
    so a source holding a share of one is not refused for its own finished request."""
    finishing = asyncio.Event()

    async def answered_then_slow(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        await finishing.wait()

    share = QueueShare(total=4, per_source=1)
    admission = Admission(answered_then_slow, share, Drain(announce_seconds=0))
    scope = {"type": "http", "method": "POST", "path": "/decide", "headers": [], "client": (ATTACKER, 1),
             "state": {"cycle": Cycle("first")}}
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    first = asyncio.create_task(admission(scope, receive, send))
    await until(lambda: len(sent) == 2)
    assert share.held_by(ATTACKER) == 0
    finishing.set()
    await asyncio.wait_for(first, 2)


async def test_a_post_finding_the_queue_full_of_others_waits_in_line_for_the_next_place():
    """Four sources hold one place each, all the queue: a fifth source's POST is neither refused nor takes a place
    from an equal; it waits in line and is scored once a place is freed."""
    service, model, metrics = held_service(max_queue="4", max_queue_per_peer="1")
    holders = [post(service.app, f"10.0.1.{n}", n) for n in range(4)]
    await until(lambda: len(model.calls) == 1 and queued(metrics) == 3)
    victim = post(service.app, VICTIM, 9)
    await asyncio.sleep(0.2)
    assert not victim.task.done()
    model.gate.set()
    await asyncio.wait_for(asyncio.gather(victim.task, *(holder.task for holder in holders)), 2)
    assert [request.status for request in [*holders, victim]] == [200] * 5
    assert service.drain.admitted == 0


async def test_a_post_in_line_is_refused_when_no_place_frees_in_time():
    service, model, metrics = held_service(max_queue="4", max_queue_per_peer="1")
    holders = [post(service.app, f"10.0.1.{n}", n) for n in range(4)]
    await until(lambda: len(model.calls) == 1 and queued(metrics) == 3)
    began = asyncio.get_running_loop().time()
    victim = post(service.app, VICTIM, 9)
    await asyncio.wait_for(victim.task, 3)
    assert error_of(victim)[:2] == (429, "busy")
    assert asyncio.get_running_loop().time() - began >= LINE_SECONDS
    model.gate.set()
    await asyncio.wait_for(asyncio.gather(*(holder.task for holder in holders)), 2)
    assert service.drain.admitted == 0
