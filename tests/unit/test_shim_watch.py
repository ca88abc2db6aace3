"""The model watch over a fake model: down at once after Triton's own failure, refusing while down, never healing
the model in place (tritonserver is restarted by what runs it), up again once the model answers, and /health
saying why."""
from __future__ import annotations

import asyncio
import logging
import time

import httpx
import pytest

from shim.app import build_service, create_app
from shim.errors import (
    MODEL_NOT_ANSWERING,
    TRITON_ERROR,
    TRITON_UNREACHABLE,
    ApiError,
    Failure,
    ModelFailure,
    Problem,
    from_triton,
    model_unavailable,
    unreachable,
)
from shim.metrics import ShimMetrics
from shim.port.model import Probe
from shim.port.watch import RESTART_HINT, ModelWatch

from .fake_model import FakeModel
from .shim_helpers import AUTH, decide_body, make_settings

pytestmark = pytest.mark.anyio
STUB_DEAD = "the model does not answer a ping: Triton answered 500: Stub process 'intern_decision_0_0' is not healthy."
UNREACHABLE = "Triton did not answer: ConnectionRefusedError: [Errno 111] Connection refused"
CALLS = [{"questions": {"q": {"type": "choice", "criteria": {"a": "A", "b": "B"}}}}]


def watch_over(model: FakeModel, **options) -> ModelWatch:
    return ModelWatch(model, asyncio.Lock(), probe_seconds=options.pop("probe_seconds", 60.0), **options)


async def test_the_first_step_pings_at_once_and_an_answer_keeps_the_model_up():
    model = FakeModel()
    watch = watch_over(model, probe_seconds=3600.0)
    async with asyncio.timeout(60):  # only a guard against a hang: waiting for probe_seconds would take an hour
        await watch.step()
    assert (model.pings, watch.down) == (1, None)


async def test_tritons_own_failure_marks_the_model_down_at_once_and_later_requests_never_reach_it():
    model = FakeModel()
    watch = watch_over(model)
    model.fail_with = from_triton(500, "Stub process 'x' is not healthy.")
    with pytest.raises(ApiError):
        await watch.predict_calls("s", CALLS, "r1")
    assert watch.down == Problem(TRITON_ERROR, "an inference failed (Triton answered 500: Stub process 'x' is not "
                                               "healthy.); checking the model")
    model.fail_with = None
    with pytest.raises(ApiError) as refused:
        await watch.predict_calls("s", CALLS, "r2")
    assert (refused.value.status, refused.value.code) == (502, "model_unavailable")
    assert refused.value.message == watch.down.detail
    assert model.request_ids == ["r1"]
    await watch.step()  # woken by the failure: the ping answers
    assert watch.down is None
    assert await watch.predict_calls("s", CALLS, "r3")


@pytest.mark.parametrize("error", [ModelFailure(Failure.INVALID, "bad"), ModelFailure(Failure.OUT_OF_MEMORY, "oom"),
                                   ModelFailure(Failure.FAILED, "boom")])
async def test_the_models_own_errors_leave_it_up(error):
    model = FakeModel()
    watch = watch_over(model)
    model.fail_with = error
    with pytest.raises(ApiError):
        await watch.predict_calls("s", CALLS, "r1")
    assert watch.down is None


async def test_a_ping_triton_answers_with_an_error_keeps_the_model_down_until_a_restarted_triton_answers(caplog):
    model = FakeModel()
    watch = watch_over(model, retry_seconds=0.01)
    dead = Probe(False, Problem(MODEL_NOT_ANSWERING, STUB_DEAD), triton_answered=True)
    model.probes = [dead, dead, Probe(False, Problem(TRITON_UNREACHABLE, UNREACHABLE)), Probe(True)]
    with caplog.at_level(logging.WARNING, logger="intern_decision.shim.watch"):
        await watch.step()
        assert watch.down == Problem(MODEL_NOT_ANSWERING, f"{STUB_DEAD}; {RESTART_HINT}")
        await watch.step()  # the same reason again: logged once
        await watch.step()  # tritonserver is being restarted
        assert watch.down == Problem(TRITON_UNREACHABLE, UNREACHABLE)
        await watch.step()  # the new one loaded the model
    assert watch.down is None
    logged = [record.getMessage() for record in caplog.records]
    assert logged == [f"the model is down: {STUB_DEAD}; {RESTART_HINT}", f"the model is down: {UNREACHABLE}",
                      "the model answers again"]


async def test_a_triton_that_does_not_answer_is_waited_for():
    model = FakeModel()
    watch = watch_over(model, retry_seconds=0.01)
    model.probes = [Probe(False, Problem(TRITON_UNREACHABLE, UNREACHABLE))] * 3
    for _ in range(3):
        await watch.step()
        assert watch.down == Problem(TRITON_UNREACHABLE, UNREACHABLE)
    await watch.step()
    assert (watch.down, model.pings) == (None, 4)


async def test_idle_pings_are_periodic_and_skipped_while_an_inference_holds_the_lock():
    model = FakeModel()
    lock = asyncio.Lock()
    watch = ModelWatch(model, lock, probe_seconds=0.02)
    await watch.step()
    started = time.monotonic()
    await watch.step()
    assert model.pings == 2 and time.monotonic() - started >= 0.02
    async with lock:
        await watch.step()
    assert model.pings == 2


async def test_health_is_503_at_once_after_tritons_own_failure_and_200_once_the_model_answers_again():
    model = FakeModel(base={"approve": 1.0})
    model.probes = [Probe(True), Probe(False, Problem(MODEL_NOT_ANSWERING, STUB_DEAD), triton_answered=True),
                    Probe(False, Problem(TRITON_UNREACHABLE, UNREACHABLE))]
    service = build_service(make_settings(probe_seconds="60"), model)
    app = service.app
    async with app.router.lifespan_context(app), \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim") as client:
        await until(lambda: model.pings == 1)
        assert (await client.get("/health")).status_code == 200
        model.fail_with = from_triton(500, "Stub process is not healthy.")
        assert (await client.post("/decide", json=decide_body(), headers=AUTH)).status_code == 502
        model.fail_with = None
        health = await client.get("/health")
        assert health.status_code == 503
        assert health.json()["error"]["code"] == "model_unavailable"
        # the watch's first word (the failed inference) or the ping's, never Triton's own text
        assert health.json()["error"]["message"] in ("triton answered an error", "model not answering")
        assert "Stub" not in health.text
        await until(lambda: model.pings == 4, timeout=10)  # a ping a second while down
        await until(lambda: service.watch.down is None)
        assert (await client.get("/health")).status_code == 200
        assert (await client.post("/decide", json=decide_body(), headers=AUTH)).status_code == 200


async def test_while_down_posts_are_refused_uncounted_as_triton_errors_and_model_up_is_0():
    model = FakeModel(base={"approve": 1.0})
    model.probes = [Probe(True)] + [Probe(False, Problem(TRITON_UNREACHABLE, UNREACHABLE))] * 1000
    metrics = ShimMetrics()
    service = build_service(make_settings(probe_seconds="60"), model, metrics)
    app = service.app
    errors = lambda: metrics.registry.get_sample_value(  # noqa: E731
        "intern_decision_shim_triton_errors_total", {"kind": "model_unavailable"}) or 0.0
    async with app.router.lifespan_context(app), \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim") as client:
        await until(lambda: model.pings == 1)
        model.fail_with = from_triton(500, "Stub process is not healthy.")
        assert (await client.post("/decide", json=decide_body(), headers=AUTH)).status_code == 502
        assert errors() == 1
        await until(lambda: service.watch.down == Problem(TRITON_UNREACHABLE, UNREACHABLE))
        refused = await client.post("/decide", json=decide_body(), headers=AUTH)
        assert refused.status_code == 502
        assert refused.json()["error"]["message"] == "triton unreachable"
        assert errors() == 1 and len(model.request_ids) == 1
        assert (await client.get("/health")).status_code == 503
        assert metrics.registry.get_sample_value("intern_decision_shim_model_up") == 0


async def until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def test_health_answers_from_what_is_known_without_a_call_to_triton_of_its_own():
    model = FakeModel(base={"approve": 1.0})
    asked = {"ready": 0, "facts": 0}
    ready, facts = model.ready, model.facts

    async def counted_ready():
        asked["ready"] += 1
        return await ready()

    async def counted_facts():
        asked["facts"] += 1
        return await facts()

    model.ready, model.facts = counted_ready, counted_facts
    model.probes = [Probe(True)] + [Probe(False, Problem(MODEL_NOT_ANSWERING, STUB_DEAD), triton_answered=True)] * 100
    app = create_app(make_settings(probe_seconds="60"), model)
    async with app.router.lifespan_context(app), \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim") as client:
        await until(lambda: model.pings == 1 and asked["facts"] == 1)  # the background check done
        answers = [await client.get("/health") for _ in range(20)]
        assert {answer.status_code for answer in answers} == {200}
        assert asked == {"ready": 1, "facts": 1}  # the background check's, none of /health's own
        model.fail_with = from_triton(500, "Stub process is not healthy.")
        assert (await client.post("/decide", json=decide_body(), headers=AUTH)).status_code == 502
        assert (await client.get("/health")).status_code == 503  # at once, from the watch
        assert asked["ready"] == 1


async def test_health_says_no_address_nor_exception_text_when_triton_is_unreachable(caplog):
    from devstack.process import free_ports

    triton, metrics = free_ports(2)
    settings = make_settings(triton_url=f"127.0.0.1:{triton}", triton_metrics_url=f"http://127.0.0.1:{metrics}/metrics",
                             probe_seconds="60", health_timeout_seconds="1")
    service = build_service(settings)  # the real Triton adapter, nothing listening
    app = service.app
    with caplog.at_level(logging.WARNING, logger="intern_decision.shim"):
        async with app.router.lifespan_context(app), \
                httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim") as client:
            await until(lambda: service.watch.down is not None)
            health = await client.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "unavailable"
    message = health.json()["error"]["message"]
    assert message == "triton unreachable"
    for secret in ("127.0.0.1", str(triton), "Error", "Errno", "refused"):
        assert secret not in health.text
    assert str(triton) in caplog.text  # the details go to the log


@pytest.mark.parametrize("failure, words", [
    (from_triton(500, "Stub process is not healthy."), "triton answered an error"),
    (unreachable("Triton did not answer: OSError: [Errno 101] Connect call failed ('10.11.12.13', 39999)"),
     "triton unreachable"),
    (model_unavailable("anything else, from anywhere ('10.1.2.3', 1)"), "model unavailable"),
])
def test_a_model_failure_is_told_in_the_fixed_words_of_its_kind(failure, words):
    assert failure.public_message == words and failure.message not in words


async def test_the_watch_keeps_the_words_of_what_failed_and_the_detail_for_the_log():
    model = FakeModel()
    watch = watch_over(model)
    model.fail_with = unreachable("Triton did not answer: OSError: x ('10.1.2.3', 1)")
    with pytest.raises(ApiError):
        await watch.predict_calls("s", CALLS, "r1")
    with pytest.raises(ModelFailure) as refused:
        await watch.predict_calls("s", CALLS, "r2")
    assert refused.value.public_message == "triton unreachable"
    assert "10.1.2.3" in refused.value.message
