"""The GPU check's memory: each shape's peak measured from an emptied allocator, the two caps chosen from those
peaks, and acceptance checks 5 and 6 played against a modelled card of the real size under each cap: where a cap
separates the normal shapes from the largest call both pass, where none does check 6 is inconclusive, never a
failure of the check's own arithmetic."""
from __future__ import annotations

import pytest

from acceptance.checks import overcap, vram
from acceptance.memory import suggest_cap_gib
from gpucheck import cap, inprocess, steps
from gpucheck.context import Context, Inconclusive, Options
from gpucheck.findings import Findings
from gpucheck.report import Report, Step
from tests.unit.scripted_service import HEALTH, context, error, reply, shared_answer

GIB = 1024 ** 3
# Intern-Decision-4B in bf16: 9.08 GB of weights, of which the vision tower (removed after the first warm-up in the
# server, kept in-process) is about 0.6 GiB.
WEIGHTS = 9.08e9
VISION = 0.6 * GIB
TOKENS = {"anchor": 289, "criteria21": 520, "long16": 3900, "probe": 7900}


class CachingAllocator:
    """torch's caching allocator as far as the peaks go: freed blocks stay reserved until empty_cache()."""

    def __init__(self, resident: float):
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = resident

    def use(self, nbytes: float) -> None:
        self.allocated += nbytes
        self.reserved = max(self.reserved, self.allocated)
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def free(self, nbytes: float) -> None:
        self.allocated -= nbytes

    # the torch.cuda functions gpucheck.inprocess.Memory calls
    def synchronize(self, device=None):
        pass

    def empty_cache(self):
        self.reserved = self.allocated

    def reset_peak_memory_stats(self, device=None):
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved

    def memory_allocated(self, device=None):
        return self.allocated

    def memory_reserved(self, device=None):
        return self.reserved

    def max_memory_allocated(self, device=None):
        return self.peak_allocated

    def max_memory_reserved(self, device=None):
        return self.peak_reserved


class Torch:
    def __init__(self, allocator):
        self.cuda = allocator


def activations(per_token: float):
    return lambda tokens: 40e6 + per_token * tokens


class Engine:
    """predict() that allocates its activations for the call's length, then frees them."""

    def __init__(self, allocator, activation):
        self.allocator, self.activation = allocator, activation

    def predict(self, request):
        tokens = request["tokens"]
        self.allocator.use(self.activation(tokens))
        self.allocator.free(self.activation(tokens))
        return {"usage": {"input_tokens": tokens}, "timing": {"inference_ms": 1.0}}


def test_a_shape_measured_after_a_larger_one_reports_its_own_peak_not_the_larger_ones():
    activation = activations(per_token=200e3)
    allocator = CachingAllocator(WEIGHTS)
    memory = inprocess.Memory(Torch(allocator), "cuda:0")
    engine = Engine(allocator, activation)
    probe = inprocess.score_probe(engine, memory, {"tokens": 7900})
    anchor = inprocess.measure_shape(engine, memory, [{"tokens": 289}], rounds=2, seconds=1.0)
    assert probe["peak"]["reserved"] == pytest.approx(WEIGHTS + activation(7900))
    assert anchor["peak"]["reserved"] == pytest.approx(WEIGHTS + activation(289))
    assert anchor["memory_start"]["reserved"] == pytest.approx(WEIGHTS)
    # Without emptying the allocator the anchor's peak would have been the probe's: the model above is faithful.
    allocator.use(activation(7900))
    allocator.free(activation(7900))
    allocator.reset_peak_memory_stats()
    engine.predict({"tokens": 289})
    assert allocator.max_memory_reserved() == pytest.approx(WEIGHTS + activation(7900))


def measured_inprocess(activation) -> dict:
    """What gpucheck.inprocess would report on this card: every peak with the tower loaded, from a clean allocator."""
    resident = WEIGHTS

    def peak(tokens):
        nbytes = resident + activation(tokens)
        return {"peak": {"reserved": nbytes, "allocated": nbytes}}

    return {"memory": {"vision_bytes": VISION, "weights_bytes": WEIGHTS},
            "shapes": {name: peak(TOKENS[name]) for name in ("anchor", "criteria21", "long16")},
            "probe": peak(TOKENS["probe"])}


# Two cards' activation profiles at the real size: a card whose long prompts need room (the chunked delta rule's
# states in float32, the MLP's intermediate) and one where they add little beside the 0.6 GiB tower.
SEPARATES = activations(per_token=250e3)  # ~1.9 GiB at 7,900 tokens, ~0.95 at 3,900
TOO_CLOSE = activations(per_token=60e3)  # ~0.5 GiB at 7,900 tokens: below the tower plus two margins


def test_the_caps_where_a_value_separates_the_normal_shapes_from_the_largest_call():
    caps = cap.plan_caps(measured_inprocess(SEPARATES))
    assert caps["separable"]
    startup = WEIGHTS + SEPARATES(289)
    long16_served = WEIGHTS - VISION + SEPARATES(3900)
    largest_served = WEIGHTS - VISION + SEPARATES(7900)
    assert caps["test_gib"] * GIB >= max(startup, long16_served) + cap.MARGIN
    assert caps["test_gib"] * GIB <= largest_served - cap.MARGIN
    assert caps["production_gib"] == suggest_cap_gib(WEIGHTS + SEPARATES(7900))
    assert caps["production_gib"] * GIB > WEIGHTS + SEPARATES(7900)


def test_no_test_cap_where_nothing_separates_them_and_the_production_cap_still_holds_the_largest_call():
    caps = cap.plan_caps(measured_inprocess(TOO_CLOSE))
    assert not caps["separable"] and caps["test_gib"] is None
    assert caps["production_gib"] * GIB > WEIGHTS + TOO_CLOSE(7900)
    assert "largest call" in caps["why"]


def test_a_missing_peak_is_a_key_error_the_check_turns_into_unmeasured_caps():
    measured = measured_inprocess(SEPARATES)
    measured["probe"]["peak"] = None  # the CPU: no CUDA counters
    with pytest.raises(KeyError):
        cap.plan_caps(measured)
    assert cap.unmeasured()["production_gib"] is None and cap.unmeasured()["test_gib"] is None


class ServedCard:
    """The served model on a modelled card, as the kit sees it through /decide/shared and the memory gauges: the
    tower removed, the cap on reserved memory, an over-cap call answered 503 out_of_memory and its memory freed."""

    def __init__(self, activation, cap_gib: float):
        self.activation, self.cap = activation, cap_gib * GIB
        self.baseline = WEIGHTS - VISION
        self.reserved = self.peak = self.baseline

    def answer(self, path, body, token):
        if path == "/decide":
            return reply(200, {"top": "approve"})
        tokens = 300 + 10 * body["state"].count("Entry")
        if tokens > 8192:
            return error(422, "invalid_request")
        need = self.baseline + self.activation(tokens)
        if need > self.cap:
            return error(503, "out_of_memory")
        self.peak = max(self.peak, need)
        return shared_answer(body, tokens)

    def memory(self) -> dict:
        return {"reserved": self.reserved, "allocated": self.baseline, "peak_reserved": self.peak,
                "baseline": self.baseline}


def kit_context(tmp_path, card: ServedCard, cap_gib: float):
    return context(tmp_path, card.answer, health={**HEALTH, "vram_cap_gib": cap_gib}, memory=card.memory)


def test_checks_5_and_6_both_pass_on_a_correct_service_where_a_cap_separates(tmp_path):
    caps = cap.plan_caps(measured_inprocess(SEPARATES))
    production = ServedCard(SEPARATES, caps["production_gib"])
    status, reason, numbers = vram.run(kit_context(tmp_path, production, caps["production_gib"]))
    assert (status, reason) == ("pass", None)
    assert numbers["suggested_cap_gib"] <= caps["production_gib"]  # the kit's own rule agrees with the check's

    under_test_cap = ServedCard(SEPARATES, caps["test_gib"])
    status, reason, numbers = overcap.run(kit_context(tmp_path, under_test_cap, caps["test_gib"]))
    assert (status, reason) == ("pass", None)
    assert numbers["over_cap_reply"] == {"status": 503, "error_code": "out_of_memory", "envelope": True}
    assert numbers["normal_request_status"] == 200


def test_check_6_under_the_production_cap_is_inconclusive_not_a_failure(tmp_path):
    caps = cap.plan_caps(measured_inprocess(SEPARATES))
    production = ServedCard(SEPARATES, caps["production_gib"])
    status, reason, numbers = overcap.run(kit_context(tmp_path, production, caps["production_gib"]))
    assert status == "inconclusive" and "fits under the cap" in reason
    assert numbers["over_cap_reply"]["status"] == 200


def test_where_no_cap_separates_the_checks_overcap_step_is_inconclusive_with_the_numbers(tmp_path):
    caps = cap.plan_caps(measured_inprocess(TOO_CLOSE))
    options = Options(mode="gpu", device="cuda", out=tmp_path / "out", scratch=tmp_path, carry=tmp_path,
                            checkpoint="synthetic-full", rounds=1, warmup=0, kit_checks="4,5,6,7,8", kit_n=1,
                            deadline=100)
    ctx = Context(options, Report(tmp_path, "gpu", 100, []), deadline=None, findings=Findings(caps=caps))
    step = Step("overcap", "overcap")
    with pytest.raises(Inconclusive) as raised:
        steps.overcap_step(ctx, step)
    assert f"largest {caps['largest_gib']} GiB" in str(raised.value)
    assert step.data["caps"] == caps
