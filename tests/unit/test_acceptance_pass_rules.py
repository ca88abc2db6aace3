"""Checks 1-4 on rows of the bench's counts against a scripted service: the contract's rules applied and reported,
inconclusive on data that cannot decide them, and a restart that brought no new model process failing check 3."""
from __future__ import annotations

import json
import shlex

import pytest

from acceptance.checks import latency, negative, positive, stability
from acceptance.checks.common import Context
from acceptance.client import Reply
from acceptance.options import parse_options
from acceptance.pass_rules import NEGATIVE_RULE, POOLED_RULE, WYRD_RULE, standard_error

RIGHT = "the right one"
HEALTH = {"status": "ok", "model": {"device": "cuda:0", "revision": "r", "boot_id": "boot-0",
                                    "started_at": "2026-05-04T10:00:00.000+00:00"},
          "vram_cap_gib": None, "max_tokens": 8192, "max_decisions": 64, "max_questions_per_call": 16,
          "chunking": "greedy", "workloads": []}


def bench_rows(pooled=259, wyrd=84, negatives=144, wrong_pooled=19, wrong_wyrd=5) -> list[dict]:
    """Wyrd rows are the first `wyrd` pooled rows; a row is answered right unless its label is set elsewhere."""
    rows = []
    wrong_elsewhere = wrong_pooled - wrong_wyrd
    for n in range(pooled):
        suites = ["pooled", "wyrd"] if n < wyrd else ["pooled"]
        wrong = n < wrong_wyrd or wyrd <= n < wyrd + wrong_elsewhere
        rows.append(row(f"p{n}", suites, label="b" if wrong else "a"))
    rows += [row(f"n{n}", ["negative"], label="a") for n in range(negatives)]
    return rows


def row(row_id: str, suites: list[str], label: str) -> dict:
    return {"suites": suites, "set": suites[-1], "id": row_id, "state": f"state of {row_id}", "question": "Which?",
            "options": [{"id": "a", "description": RIGHT}, {"id": "b", "description": "another"},
                        {"id": "c", "description": "a third"}], "label": label}


class Model:
    """Picks the option described RIGHT (so it follows a moved description), except rows it sticks to by id."""

    def __init__(self):
        self.sticky: set[str] = set()  # rows whose top stays on the first id whatever the descriptions
        self.boot_id = "boot-0"
        self.flip_after_restart: set[str] = set()
        self.restarted = False

    def top(self, body: dict) -> str:
        ids = [option["id"] for option in body["options"]]
        if body["id"] in self.sticky:
            return ids[0]
        top = next(option["id"] for option in body["options"] if option["description"] == RIGHT)
        if self.restarted and body["id"] in self.flip_after_restart:
            return next(option_id for option_id in ids if option_id != top)
        return top

    def answer(self, path: str, body: dict, token) -> Reply:
        ids = [option["id"] for option in body["options"]]
        top = self.top(body)
        probabilities = [0.8 if option_id == top else 0.2 / (len(ids) - 1) for option_id in ids]
        return Reply(200, {"option_ids": ids, "probabilities": probabilities, "top": top}, "", 0.01)


class Service:
    def __init__(self, model: Model, restarted_flag=None):
        self.model = model
        self.restarted_flag = restarted_flag  # a file the restart command creates: the model then reboots

    def health(self) -> Reply:
        if self.restarted_flag is not None and self.restarted_flag.exists():
            self.restarted_flag.unlink()
            self.model.boot_id = f"boot-{int(self.model.boot_id.split('-')[1]) + 1}"
            self.model.restarted = True
        return Reply(200, {**HEALTH, "model": {**HEALTH["model"], "boot_id": self.model.boot_id}}, "", 0.001)

    def post(self, path, body, token=None, fresh_connection=False) -> Reply:
        return self.model.answer(path, body, token)

    def close(self) -> None:
        pass


def write_lines(path, records) -> str:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return str(path)


def bench_context(tmp_path, model: Model, rows=None, reference=True, extra=(), restart_flag=None) -> Context:
    rows = bench_rows() if rows is None else rows
    args = ["--url", "http://svc", "--token", "t" * 40, "--out", str(tmp_path / "out"),
            "--rows", write_lines(tmp_path / "rows.jsonl", rows), *extra]
    if reference:
        predictions = [{"id": r["id"], "top": "a", "probabilities": {"a": 0.8, "b": 0.1, "c": 0.1}} for r in rows]
        args += ["--reference", write_lines(tmp_path / "reference.jsonl", predictions)]
    return Context(parse_options(args), Service(model, restart_flag))


# the rules

def test_the_rules_are_the_contracts_numbers():
    assert (POOLED_RULE.lowest, POOLED_RULE.highest) == (230, 250)  # 240/259 ± 4 points
    # Wyrd: as many binomial standard errors of 79/84 as the pooled ±4 points are of 240/259
    errors = 0.04 / standard_error(240, 259)
    assert errors == pytest.approx(2.469, abs=1e-3)
    assert WYRD_RULE.resolution == pytest.approx(errors * standard_error(79, 84), abs=1e-4)
    assert (WYRD_RULE.lowest, WYRD_RULE.highest) == (74, 84)
    assert (NEGATIVE_RULE.least_follow, NEGATIVE_RULE.most_stay, NEGATIVE_RULE.floor_rows) == (117, 15, 5.76)


# check 1

def test_positive_control_passes_on_the_bench_counts_within_the_window(tmp_path):
    status, reason, numbers = positive.run(bench_context(tmp_path, Model()))
    assert (status, reason) == ("pass", None)
    assert numbers["pooled"]["rows"] == 259 and numbers["pooled"]["overall"]["correct"] == 240
    assert numbers["wyrd"]["rows"] == 84 and numbers["wyrd"]["overall"]["correct"] == 79
    assert numbers["pooled"]["correct_window"] == [230, 250] and numbers["wyrd"]["correct_window"] == [74, 84]
    assert numbers["row_by_row"]["tops_differ"] == 0 and numbers["row_by_row"]["compared"] == 259
    assert numbers["row_by_row"]["max_probability_gap"] == pytest.approx(0.0)


@pytest.mark.parametrize("wrong_pooled, wrong_wyrd, message", [
    (30, 5, "pooled 229/259 correct, outside 230..250"),
    (8, 0, "pooled 251/259 correct, outside 230..250"),  # the window is two-sided
    (19, 11, "wyrd 73/84 correct, outside 74..84"),
])
def test_positive_control_fails_outside_either_window(tmp_path, wrong_pooled, wrong_wyrd, message):
    rows = bench_rows(wrong_pooled=wrong_pooled, wrong_wyrd=wrong_wyrd)
    status, reason, _ = positive.run(bench_context(tmp_path, Model(), rows))
    assert status == "fail" and message in reason


def test_positive_control_on_fewer_rows_than_the_contracts_set_is_inconclusive(tmp_path):
    rows = bench_rows(pooled=258, wrong_pooled=18)
    status, reason, numbers = positive.run(bench_context(tmp_path, Model(), rows))
    assert status == "inconclusive" and "258 pooled row(s), not the contract's 259" in reason
    assert numbers["pooled"]["overall"]["total"] == 258


def test_positive_control_without_the_bench_predictions_is_inconclusive(tmp_path):
    status, reason, numbers = positive.run(bench_context(tmp_path, Model(), reference=False))
    assert status == "inconclusive" and "no --reference" in reason and numbers["row_by_row"] is None


def test_positive_control_fails_when_a_top_differs_from_the_bench_row_by_row(tmp_path):
    rows = bench_rows()
    # the service now answers p100 "b", still its label (the counts stay), where the bench's prediction is "a"
    rows[100]["options"][0]["description"], rows[100]["options"][1]["description"] = "another", RIGHT
    rows[100]["label"] = "b"
    status, reason, numbers = positive.run(bench_context(tmp_path, Model(), rows))
    assert status == "fail" and "1 top(s) differ from the bench's predictions" in reason
    assert numbers["row_by_row"]["differing_ids"] == ["p100"]
    assert numbers["row_by_row"]["max_probability_gap"] == pytest.approx(0.7)


# check 2

def test_negative_control_passes_at_the_floor_and_fails_past_it(tmp_path):
    model = Model()
    model.sticky = {f"n{n}" for n in range(15)}
    status, reason, numbers = negative.run(bench_context(tmp_path, model))
    assert (status, reason) == ("pass", None)
    assert (numbers["follow"], numbers["stay"], numbers["least_follow"], numbers["most_stay"]) == (129, 15, 117, 15)
    assert numbers["floor_rows"] == 5.76 and "floor 4 points" in numbers["rule"]
    model.sticky = {f"n{n}" for n in range(16)}
    status, reason, _ = negative.run(bench_context(tmp_path, model))
    assert status == "fail" and "16/144 keep their top, more than 15" in reason


def test_negative_control_on_fewer_rows_is_inconclusive(tmp_path):
    status, reason, numbers = negative.run(bench_context(tmp_path, Model(), bench_rows(negatives=100)))
    assert status == "inconclusive" and "100 negative row(s), not the contract's 144" in reason
    assert numbers["scored"] == 100 and numbers["follow"] == 100


# check 3

def restart_options(tmp_path, *extra: str) -> tuple[list[str], object]:
    flag = tmp_path / "restart-requested"
    return ["--restart-command", f"touch {shlex.quote(str(flag))}", "--restart-timeout", "5", *extra], flag


def test_stability_passes_across_restarts_that_each_bring_a_new_model_process(tmp_path):
    extra, flag = restart_options(tmp_path, "--restarts", "2")
    ctx = bench_context(tmp_path, Model(), extra=extra, restart_flag=flag)
    status, reason, numbers = stability.run(ctx)
    assert (status, reason) == ("pass", None)
    assert numbers["boot_id_before"] == "boot-0"
    assert [phase["boot_id"] for phase in numbers["across_restarts"]] == ["boot-1", "boot-2"]
    assert all(phase["boot_id_after_scoring"] == phase["boot_id"] for phase in numbers["across_restarts"])
    assert numbers["across_restarts_total"] == {"restarts_scored": 2, "model_processes": 3, "label_flips": 0,
                                                "max_probability_diff": 0.0}
    assert numbers["within_process"]["rows"] == 259


def test_stability_fails_when_the_restart_did_not_change_the_model_process(tmp_path):
    ctx = bench_context(tmp_path, Model(), extra=["--restart-command", "true", "--restart-timeout", "1"])
    status, reason, numbers = stability.run(ctx)
    assert status == "fail" and "the restart did not change the model process" in reason and "boot-0" in reason
    assert numbers["across_restarts_total"]["restarts_scored"] == 0


def test_stability_fails_on_a_label_flip_across_a_restart(tmp_path):
    model = Model()
    model.flip_after_restart = {"p7"}
    extra, flag = restart_options(tmp_path)
    status, reason, numbers = stability.run(bench_context(tmp_path, model, extra=extra, restart_flag=flag))
    assert status == "fail" and "1 label flip(s) across a restart" in reason
    assert numbers["across_restarts"][0]["flipped_ids"] == ["p7"]
    assert numbers["across_restarts"][0]["max_probability_diff"] == pytest.approx(0.7)


def test_stability_with_a_restart_on_fewer_rows_is_still_inconclusive(tmp_path):
    extra, flag = restart_options(tmp_path)
    ctx = bench_context(tmp_path, Model(), bench_rows(pooled=100, wyrd=10, wrong_pooled=0, wrong_wyrd=0),
                        extra=extra, restart_flag=flag)
    status, reason, numbers = stability.run(ctx)
    assert status == "inconclusive" and reason == "100 pooled row(s), not the contract's 259"
    assert numbers["across_restarts"][0]["boot_id"] == "boot-1"


# check 4

class LatencyService:
    """Input tokens: 40 per question plus 1 per filler sentence of a state (and the realistic state's length / 4)."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens

    def health(self) -> Reply:
        return Reply(200, {**HEALTH, "max_tokens": self.max_tokens}, "", 0.001)

    def post(self, path, body, token=None, fresh_connection=False) -> Reply:
        if path == "/decide":
            return Reply(200, {"total_seconds": 0.01, "queue_seconds": 0.0, "forward_seconds": 0.009,
                               "input_tokens": 60}, "", 0.012)
        state = body["state"]
        state_tokens = state.count("Entry") * 10 if "Entry" in state or "Case log" in state else len(state) // 4
        calls = ([16] * (len(body["decisions"]) // 16)
                 + ([len(body["decisions"]) % 16] * bool(len(body["decisions"]) % 16)))
        tokens = [state_tokens + 40 * size for size in calls]
        if max(tokens) > self.max_tokens:
            return Reply(422, {"error": {"code": "invalid_request", "message": "too long"}}, "", 0.01)
        return Reply(200, {"results": [], "timing": {"total_seconds": 0.05, "queue_seconds": 0.0,
                                                     "inference_seconds": 0.04, "input_tokens": tokens}}, "", 0.06)

    def close(self) -> None:
        pass


def latency_context(tmp_path, max_tokens: int, *extra: str) -> Context:
    options = parse_options(["--url", "http://gpu-host:8080", "--token", "t" * 40, "--out", str(tmp_path), *extra])
    return Context(options, LatencyService(max_tokens))


def test_latency_passes_at_n_20_with_the_state_itself_about_3900_tokens(tmp_path):
    status, reason, numbers = latency.run(latency_context(tmp_path, 8192, "--client-host", "nh3-dev"))
    assert (status, reason) == ("pass", None)
    long_shape = numbers["shapes"][latency.LONG_SHAPE]
    assert 3850 <= long_shape["state_tokens"] <= 3900
    assert long_shape["input_tokens"] == [long_shape["state_tokens"] + 40 * 16]  # the call is longer than the state
    realistic = numbers["shapes"][latency.REALISTIC_SHAPE]
    assert realistic["state_chars"] >= 8000 and realistic["input_tokens"][0] >= 2000
    assert all(shape["client_ms"]["n"] == 20 for shape in numbers["shapes"].values())
    assert (numbers["client_host"], numbers["service_host"]) == ("nh3-dev", "gpu-host")


def test_a_realistic_state_too_long_for_max_tokens_is_shortened_and_inconclusive(tmp_path):
    status, reason, numbers = latency.run(latency_context(tmp_path, 2000))
    assert status == "inconclusive" and "the state was shortened to" in reason
    realistic = numbers["shapes"][latency.REALISTIC_SHAPE]
    assert realistic["non_200"] == 0 and realistic["state_chars"] < 8000 and realistic["input_tokens"][0] <= 2000


def test_latency_with_fewer_than_20_requests_or_a_short_state_is_inconclusive(tmp_path):
    status, reason, _ = latency.run(latency_context(tmp_path, 8192, "--n", "3"))
    assert status == "inconclusive" and reason == "3 timed request(s) per shape; this kit asks at least 20"
    status, reason, numbers = latency.run(latency_context(tmp_path, 4096))
    assert status == "inconclusive" and "the state reached" in reason and "not about 3900" in reason
    assert numbers["shapes"][latency.LONG_SHAPE]["input_tokens"][0] <= 4096
