"""The acceptance checks' verdicts against a scripted service (no HTTP): what makes each fail or not run."""
from __future__ import annotations

import pytest

from acceptance.checks import chunking, limits, overcap, stability, vram
from acceptance.checks.common import NotRun
from acceptance.runner import run_check

from .scripted_service import HEALTH, context, error, reply, shared_answer


def test_over_cap_is_not_run_without_a_cap_or_a_body(tmp_path):
    ctx = context(tmp_path, lambda *a: pytest.fail("nothing should be sent"))
    with pytest.raises(NotRun, match="no VRAM cap"):
        overcap.run(ctx)


def test_over_cap_that_fits_is_inconclusive_and_says_how_to_make_it_not_fit(tmp_path):
    def answer(path, body, token):
        tokens = 300 + 10 * body["state"].count("Entry")
        return error(422, "invalid_request") if tokens > 8192 else shared_answer(body, tokens)

    ctx = context(tmp_path, answer, health={**HEALTH, "vram_cap_gib": 30.0}, memory=lambda: {"reserved": 1e9})
    status, reason, numbers = overcap.run(ctx)
    assert status == "inconclusive" and "fits under the cap of 30.0 GiB" in reason
    assert numbers["over_cap_reply"]["status"] == 200


def over_cap_context(tmp_path, readings, baseline=4.9e9, health=None):
    readings = iter(readings)
    body_file = tmp_path / "body.json"
    body_file.write_text('{"id": "x", "state": "s", "question": "q", "options": []}')

    def answer(path, body, token):
        return error(503, "out_of_memory") if body["id"] == "x" else reply(200, {"top": "approve"})

    def memory():
        reserved = next(readings)
        return {"reserved": reserved} if baseline is None else {"reserved": reserved, "baseline": baseline}

    return context(tmp_path, answer, extra=["--over-cap-body", str(body_file)], memory=memory, health=health)


def test_over_cap_passes_when_memory_returns_to_the_post_warm_up_baseline_and_the_service_answers(tmp_path):
    # the reading just before the request (5.3e9) is above the baseline: the check compares with the baseline
    ctx = over_cap_context(tmp_path, [5.3e9, 5.2e9, 5.1e9])
    status, reason, numbers = overcap.run(ctx)
    assert (status, reason) == ("pass", None)
    assert numbers["baseline_gib"] == pytest.approx(4.9e9 / 2 ** 30, abs=1e-3)
    assert numbers["above_baseline_mib"] == pytest.approx(0.3e9 / 2 ** 20, abs=0.1)


def test_over_cap_fails_when_memory_stays_above_the_baseline_plus_the_slack(tmp_path, monkeypatch):
    monkeypatch.setattr(overcap, "SETTLE_SECONDS", 0.0)
    ctx = over_cap_context(tmp_path, [5.0e9, 6.0e9, 6.0e9], baseline=5.0e9)
    status, reason, numbers = overcap.run(ctx)
    assert status == "fail" and "above the post-warm-up baseline (release slack 512 MiB)" in reason
    assert numbers["normal_request_status"] == 200


def test_over_cap_without_the_models_baseline_gauge_or_on_the_cpu_is_inconclusive(tmp_path):
    status, reason, _ = overcap.run(over_cap_context(tmp_path, [5e9, 5e9, 5e9], baseline=None))
    assert status == "inconclusive" and "exports no post-warm-up baseline" in reason
    cpu = over_cap_context(tmp_path, [0.0, 0.0, 0.0], baseline=0.0, health={**HEALTH, "model": {"device": "cpu"}})
    status, reason, numbers = overcap.run(cpu)
    assert status == "inconclusive" and "read 0" in reason
    assert numbers["over_cap_reply"]["status"] == 503 and numbers["normal_request_status"] == 200


def test_chunking_fails_when_a_chunked_answer_differs(tmp_path):
    def answer(path, body, token):
        alone = len(body["decisions"]) < 21
        return shared_answer(body, probabilities=(0.4, 0.6) if not alone else (0.41, 0.59))

    status, reason, numbers = chunking.run(context(tmp_path, answer))
    assert status == "fail" and "21 answer(s) differ" in reason
    assert numbers["mismatches"]["c0"] == ["probabilities", "confidence"]


def test_auth_and_queue_fail_without_a_429(tmp_path):
    def answer(path, body, token):
        if token is not None:
            return error(401, "unauthorized")
        return reply(200, {})

    flood_file = tmp_path / "flood.json"
    flood_file.write_text('{"id": "slow", "state": "s", "question": "q", "options": []}')
    status, reason, numbers = limits.run(context(tmp_path, answer, extra=["--flood", "4", "--flood-body",
                                                                          str(flood_file)]))
    assert status == "fail" and "no 429 among 4" in reason
    assert numbers["flood"]["statuses"] == {"200": 4}


def test_auth_and_queue_pass_with_busy_envelopes_and_otherwise_200(tmp_path):
    answers = iter([error(429, "busy")] * 3 + [reply(200, {})] * 2)

    def answer(path, body, token):
        return error(401, "unauthorized") if token is not None else next(answers)

    flood_file = tmp_path / "flood.json"
    flood_file.write_text('{"id": "slow", "state": "s", "question": "q", "options": []}')
    status, reason, numbers = limits.run(context(tmp_path, answer, extra=["--flood", "5", "--flood-body",
                                                                          str(flood_file)]))
    assert (status, reason) == ("pass", None)
    assert numbers["flood"]["busy_envelopes"] == 3


def test_a_401_without_the_envelope_fails(tmp_path):
    def answer(path, body, token):
        return reply(401, {"detail": "nope"}) if token is not None else error(429, "busy")

    flood_file = tmp_path / "flood.json"
    flood_file.write_text('{"id": "slow", "state": "s", "question": "q", "options": []}')
    status, reason, _ = limits.run(context(tmp_path, answer, extra=["--flood", "2", "--flood-body", str(flood_file)]))
    assert status == "fail" and "not 401 unauthorized" in reason


def test_stability_on_the_smoke_rows_without_a_restart_is_inconclusive_never_pass(tmp_path):
    def answer(path, body, token):
        ids = [option["id"] for option in body["options"]]
        return reply(200, {"option_ids": ids, "probabilities": [1 / len(ids)] * len(ids), "top": ids[0]})

    status, reason, numbers = stability.run(context(tmp_path, answer))
    assert status == "inconclusive"
    assert "row(s), not the contract's 259" in reason and "no restart" in reason
    assert numbers["within_process"]["label_flips"] == 0 and numbers["across_restarts"] == []


def test_vram_is_not_run_on_the_cpu_and_when_memory_reads_zero(tmp_path):
    cpu = context(tmp_path, None, health={**HEALTH, "model": {"device": "cpu"}})
    with pytest.raises(NotRun, match="CPU"):
        vram.run(cpu)
    zero = context(tmp_path, None, memory=lambda: {"reserved": 0.0, "allocated": 0.0})
    with pytest.raises(NotRun, match="read 0"):
        vram.run(zero)


def test_a_check_that_breaks_is_a_failure_with_the_error(tmp_path):
    ctx = context(tmp_path, lambda *a: reply(200, {"results": []}))  # no timing: the check cannot read it
    result = run_check(ctx, 7)
    assert result.status == "fail" and result.reason.startswith("the check itself failed: KeyError")
