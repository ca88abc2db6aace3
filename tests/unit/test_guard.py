"""INV-4 against a fake torch: OOM and failure handling, memory release after a burst."""
import logging

import pytest

from intern_decision_model import guard as guard_module
from intern_decision_model.guard import CallGuard, OutOfMemory, ScoringFailed

from .fake_torch import MIB, make_torch


class FakeTensor:
    def __init__(self, events):
        self.events = events

    def __del__(self):
        self.events.append("tensor freed")


@pytest.fixture
def torch():
    return make_torch()


@pytest.fixture
def guard(torch):
    return CallGuard(torch, "cuda:0", release_slack_bytes=512 * MIB)


def failing_call(torch, make_error):
    """A call that fails with make_error() while a tensor is alive in its frame, as a forward pass would."""
    def call(_):
        activations = FakeTensor(torch.events)  # noqa: F841
        raise make_error()
    return call


def test_oom_is_reraised_unchained_after_the_failed_frames_are_freed(torch, guard, monkeypatch):
    collect = guard_module.gc.collect
    monkeypatch.setattr(guard_module.gc, "collect", lambda: (torch.events.append("gc.collect"), collect())[1])
    with pytest.raises(OutOfMemory) as caught:
        guard.call(failing_call(torch,
                                lambda: torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")), {})
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert caught.value.__suppress_context__
    assert torch.events == ["tensor freed", "gc.collect", "empty_cache"]
    assert "CUDA out of memory" in str(caught.value)


def test_runtime_error_whose_first_line_says_out_of_memory_is_an_oom(torch, guard):
    with pytest.raises(OutOfMemory):
        guard.call(failing_call(torch,
                                lambda: RuntimeError("CUDA error: out of memory\nCompile with TORCH_USE_CUDA_DSA")), {})
    assert torch.events == ["tensor freed", "empty_cache"]


def test_out_of_memory_only_in_a_later_line_is_not_an_oom(torch, guard):
    with pytest.raises(ScoringFailed):
        guard.call(failing_call(torch, lambda: RuntimeError("illegal memory access\nhint: not an out of memory")), {})


def test_other_failure_becomes_scoring_failed_unchained_and_logged_with_traceback(torch, guard, caplog):
    with caplog.at_level(logging.ERROR, logger="intern_decision.guard"):
        with pytest.raises(ScoringFailed) as caught:
            guard.call(failing_call(torch,
                                    lambda: ArithmeticError("Floating-point temperature scaling changed argmax")), {})
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert str(caught.value) == "ArithmeticError: Floating-point temperature scaling changed argmax"
    assert "Traceback" in caplog.text and "raise make_error()" in caplog.text
    assert torch.events == ["tensor freed", "empty_cache"]


def test_value_error_passes_through_unchanged(torch, guard):
    with pytest.raises(ValueError) as caught:
        guard.call(failing_call(torch, lambda: ValueError("Supply 1–16 questions.")), {})
    assert str(caught.value) == "Supply 1–16 questions." and type(caught.value) is ValueError
    assert "empty_cache" not in torch.events


@pytest.mark.parametrize("burst_mib, released", [(513, True), (512, False), (0, False)])
def test_burst_over_baseline_plus_slack_is_released(torch, guard, burst_mib, released):
    torch.cuda.reserved = 9000 * MIB
    guard.mark_baseline()

    def call(_):
        torch.cuda.reserved += burst_mib * MIB
        return {"ok": True}

    assert guard.call(call, {}) == {"ok": True}
    assert (torch.events == ["empty_cache"]) is released


def test_burst_after_a_value_error_is_released_too(torch, guard):
    guard.mark_baseline()

    def call(_):
        torch.cuda.reserved += 600 * MIB
        raise ValueError("Example has 9000 tokens, above 8192; truncation is forbidden")

    with pytest.raises(ValueError):
        guard.call(call, {})
    assert torch.events == ["empty_cache"]


def test_cpu_device_never_touches_torch_cuda():
    torch = make_torch(cpu_only=True)
    guard = CallGuard(torch, "cpu", release_slack_bytes=0)
    guard.mark_baseline()
    assert guard.call(lambda request: request["x"], {"x": 3}) == 3
    with pytest.raises(OutOfMemory):
        guard.call(failing_call(torch, lambda: torch.cuda.OutOfMemoryError("CUDA out of memory")), {})
    assert guard.reserved_bytes() == 0 and guard.allocated_bytes() == 0
