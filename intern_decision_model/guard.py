"""One predict() call with the contract's failure handling and memory release (INV-4); the same code on the CPU."""
from __future__ import annotations

import gc
import logging
import traceback
from typing import Any, Callable, TypeVar

log = logging.getLogger("intern_decision.guard")

Result = TypeVar("Result")


class OutOfMemory(Exception):
    """Raised once the failed call's memory is released; the process keeps serving."""


class ScoringFailed(Exception):
    """Any other failure but ValueError, which passes through."""


def is_out_of_memory(exc: BaseException, torch: Any) -> bool:
    oom_type = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).split("\n", 1)[0]


def _first_line(exc: BaseException) -> str:
    text = str(exc).split("\n", 1)[0].strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class CallGuard:
    def __init__(self, torch: Any, device: str, release_slack_bytes: int):
        self._torch = torch
        self._device = device
        self._slack = release_slack_bytes
        self._baseline: int | None = None

    @property
    def on_cuda(self) -> bool:
        return self._device.startswith("cuda")

    @property
    def baseline(self) -> int | None:
        return self._baseline

    def reserved_bytes(self) -> int:
        return int(self._torch.cuda.memory_reserved(self._device)) if self.on_cuda else 0

    def allocated_bytes(self) -> int:
        return int(self._torch.cuda.memory_allocated(self._device)) if self.on_cuda else 0

    def peak_reserved_bytes(self) -> int:
        return int(self._torch.cuda.max_memory_reserved(self._device)) if self.on_cuda else 0

    def mark_baseline(self) -> None:
        self._baseline = self.reserved_bytes()

    def release(self) -> None:
        gc.collect()
        if self.on_cuda:
            self._torch.cuda.empty_cache()

    def trim(self) -> None:
        if self.on_cuda and self._baseline is not None:
            if self.reserved_bytes() - self._baseline > self._slack:
                self._torch.cuda.empty_cache()

    def call(self, fn: Callable[..., Result], *args: Any) -> Result:
        try:
            result = fn(*args)
        except ValueError:
            self.trim()
            raise
        except Exception as exc:
            failure = self._translate(exc)
        else:
            self.trim()
            return result
        # Only once the except clause dropped the traceback (the failed call's frames and tensors) can the
        # allocator give their memory back.
        self.release()
        raise failure from None

    def _translate(self, exc: Exception) -> Exception:
        if is_out_of_memory(exc, self._torch):
            log.warning("out of memory: %s", _first_line(exc))
            return OutOfMemory(_first_line(exc))
        log.error("scoring failed:\n%s", "".join(traceback.format_exception(exc)))
        return ScoringFailed(_first_line(exc))
