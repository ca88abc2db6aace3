"""The model watch over a fake model: down at once after Triton's own failure, refusing while down, reloads with a
bound and a backoff, waiting (never reloading) for a Triton that does not answer, and /health saying why."""
from __future__ import annotations

import asyncio
import logging
import time

import httpx
import pytest

from shim.app import create_app
from shim.errors import ApiError, Failure, ModelFailure
from shim.metrics import ShimMetrics
from shim.model import Probe
from shim.watch import ModelWatch

from .fake_model import FakeModel
from .test_shim_app import AUTH, decide_body, make_settings

pytestmark = pytest.mark.anyio
STUB_DEAD = "the model does not answer a ping: Triton answered 500: Stub process 'intern_decision_0_0' is not healthy."
UNREACHABLE = "Triton did not answer: ConnectionRefusedError: [Errno 111] Connection refused"
REQUEST = [{"state": "s", "questions": {"q": {"type": "choice", "criteria": {"a": "A", "b": "B"}}}}]


@pytest.fixture
def anyio_backend():
    return "asyncio"


def watch_over(model: FakeModel, **options) -> ModelWatch:
    options.setdefault("reload_delays", (0.0, 0.0, 0.0))
    return ModelWatch(model, asyncio.Lock(), probe_seconds=options.pop("probe_seconds", 60.0), **options)


async def test_the_first_step_pings_at_once_and_an_answer_keeps_the_model_up():
    model = FakeModel()
    watch = watch_over(model)
    started = time.monotonic()
    await watch.step()
    assert (model.pings, watch.down) == (1, None)
    assert time.monotonic() - started < 1


async def test_tritons_own_failure_marks_the_model_down_at_once_and_later_requests_never_reach_it():
    model = FakeModel()
    watch = watch_over(model)
    model.fail_with = ModelFailure(Failure.TRITON, "Triton answered 500: Stub process 'x' is not healthy.")
    with pytest.raises(ApiError):
        await watch.predict_calls(REQUEST, "r1")
    assert watch.down == ("an inference failed (Triton answered 500: Stub process 'x' is not healthy.); "
                          "checking the model")
    model.fail_with = None
    with pytest.raises(ApiError) as refused:
        await watch.predict_calls(REQUEST, "r2")
    assert (refused.value.status, refused.value.code, refused.value.message) == (502, "model_unavailable", watch.down)
    assert model.request_ids == ["r1"]
    await watch.step()  # woken by the failure: the ping answers
    assert watch.down is None
    assert await watch.predict_calls(REQUEST, "r3")


@pytest.mark.parametrize("error", [ModelFailure(Failure.INVALID, "bad"), ModelFailure(Failure.OUT_OF_MEMORY, "oom"),
                                   ModelFailure(Failure.FAILED, "boom")])
async def test_the_models_own_errors_leave_it_up(error):
    model = FakeModel()
    watch = watch_over(model)
    model.fail_with = error
    with pytest.raises(ApiError):
        await watch.predict_calls(REQUEST, "r1")
    assert watch.down is None


async def test_a_ping_triton_answers_with_an_error_reloads_the_model_then_checks_it(caplog):
    model = FakeModel()
    watch = watch_over(model)
    model.probes = [Probe(False, STUB_DEAD, reloadable=True)]
    with caplog.at_level(logging.WARNING, logger="intern_decision.shim.watch"):
        await watch.step()
        assert model.reloads == 1
        assert watch.down == f"{STUB_DEAD}; reloading it (reload 1 of 3)"
        await watch.step()  # the reload wakes the watch: the new stub answers
    assert (model.pings, watch.down) == (2, None)
    logged = [record.getMessage() for record in caplog.records]
    assert logged == [f"the model is down: {STUB_DEAD}; reloading it (reload 1 of 3)",
                      "reloading the model (reload 1 of 3)", logged[2], "the model answers again"]
    assert logged[2].startswith("the model was reloaded in ")


async def test_a_triton_that_does_not_answer_is_waited_for_never_reloaded():
    model = FakeModel()
    watch = watch_over(model, retry_seconds=0.01)
    model.probes = [Probe(False, UNREACHABLE)] * 3
    for _ in range(3):
        await watch.step()
        assert watch.down == UNREACHABLE
    await watch.step()
    assert (watch.down, model.reloads, model.pings) == (None, 0, 4)


async def test_reloads_are_bounded_then_the_watch_says_a_person_must_look(caplog):
    model = FakeModel()
    watch = watch_over(model, retry_seconds=0.01)
    model.probes = [Probe(False, STUB_DEAD, reloadable=True)] * 5
    model.reload_problems = ["load: Triton answered 400: failed to load 'intern_decision'"] * 3
    with caplog.at_level(logging.ERROR, logger="intern_decision.shim.watch"):
        for _ in range(3):
            await watch.step()
        assert watch.down == (f"{STUB_DEAD}; reload 3 of 3 failed: "
                              "load: Triton answered 400: failed to load 'intern_decision'")
        await watch.step()
        await watch.step()
    assert model.reloads == 3
    assert watch.down == (f"{STUB_DEAD}; 3 reloads did not heal it: a person must look "
                          "(docs/operations.md, \"When the model process dies\")")
    assert sum("3 reloads did not heal it" in record.getMessage() for record in caplog.records) == 1
    await watch.step()  # healed by hand: the watch sees it
    assert watch.down is None


async def test_reloads_back_off():
    model = FakeModel()
    watch = watch_over(model, retry_seconds=0.01, reload_delays=(0.0, 0.3))
    model.probes = [Probe(False, STUB_DEAD, reloadable=True)] * 2
    model.reload_problems = ["load failed"]
    started = time.monotonic()
    await watch.step()
    assert time.monotonic() - started < 0.25
    started = time.monotonic()
    await watch.step()
    assert time.monotonic() - started >= 0.3
    assert model.reloads == 2


async def test_the_reload_count_starts_over_once_the_model_stayed_up():
    now = [0.0]
    model = FakeModel()
    watch = watch_over(model, probe_seconds=0.01, retry_seconds=0.01, reload_delays=(0.0,), stable_seconds=60.0,
                       clock=lambda: now[0])
    dead = Probe(False, STUB_DEAD, reloadable=True)
    model.probes = [dead, Probe(True), dead]
    await watch.step()
    await watch.step()
    await watch.step()  # died again 0 s after its reload: the one reload is spent
    assert (model.reloads, watch.down.endswith("1 reloads did not heal it: a person must look "
                                               "(docs/operations.md, \"When the model process dies\")")) == (1, True)
    now[0] = 61.0
    model.probes = [Probe(True), dead]
    await watch.step()
    await watch.step()  # up for over a minute after its reload: a new death gets a reload again
    assert model.reloads == 2


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


async def test_health_is_503_at_once_after_tritons_own_failure_and_200_once_the_watch_healed_it():
    model = FakeModel(base={"approve": 1.0})
    model.probes = [Probe(True), Probe(False, STUB_DEAD, reloadable=True)]
    app = create_app(make_settings(probe_seconds="60"), model)
    async with app.router.lifespan_context(app), \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim") as client:
        await until(lambda: model.pings == 1)
        assert (await client.get("/health")).status_code == 200
        model.fail_with = ModelFailure(Failure.TRITON, "Triton answered 500: Stub process is not healthy.")
        assert (await client.post("/decide", json=decide_body(), headers=AUTH)).status_code == 502
        model.fail_with = None
        health = await client.get("/health")
        assert health.status_code == 503
        assert health.json()["error"]["code"] == "model_unavailable"
        assert health.json()["error"]["message"].startswith(("an inference failed (Triton answered 500: Stub "
                                                             "process is not healthy.)", STUB_DEAD))
        await until(lambda: model.reloads == 1 and model.pings == 3)
        await until(lambda: app.state.watch.down is None)
        assert (await client.get("/health")).status_code == 200
        assert (await client.post("/decide", json=decide_body(), headers=AUTH)).status_code == 200


async def test_while_down_posts_are_refused_uncounted_as_triton_errors_and_model_up_is_0():
    model = FakeModel(base={"approve": 1.0})
    model.probes = [Probe(True)] + [Probe(False, UNREACHABLE)] * 1000
    metrics = ShimMetrics()
    app = create_app(make_settings(probe_seconds="60"), model, metrics)
    errors = lambda: metrics.registry.get_sample_value(  # noqa: E731
        "intern_decision_shim_triton_errors_total", {"kind": "model_unavailable"}) or 0.0
    async with app.router.lifespan_context(app), \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim") as client:
        await until(lambda: model.pings == 1)
        model.fail_with = ModelFailure(Failure.TRITON, "Triton answered 500: Stub process is not healthy.")
        assert (await client.post("/decide", json=decide_body(), headers=AUTH)).status_code == 502
        assert errors() == 1
        await until(lambda: app.state.watch.down == UNREACHABLE)
        refused = await client.post("/decide", json=decide_body(), headers=AUTH)
        assert refused.status_code == 502 and refused.json()["error"]["message"] == UNREACHABLE
        assert errors() == 1 and len(model.request_ids) == 1
        assert (await client.get("/health")).status_code == 503
        assert metrics.registry.get_sample_value("intern_decision_shim_model_up") == 0


async def until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)
