"""A stand-in for torch with just the surface the engine touches, recording what is called in order."""
from __future__ import annotations

from types import SimpleNamespace

GIB = 1024 ** 3
MIB = 1024 ** 2


class FakeModule:
    """torch.nn.Module enough for attribute assignment of a submodule."""


class FakeCuda:
    def __init__(self, events: list, available: bool, capability: tuple[int, int], arch_list: list[str],
                 total_memory: int):
        self.events = events
        self.available = available
        self.capability = capability
        self.arch_list = arch_list
        self.total_memory = total_memory
        self.reserved = 0
        self.allocated = 0
        self.peak_reserved = 0
        self.OutOfMemoryError = type("OutOfMemoryError", (RuntimeError,), {})

    def is_available(self) -> bool:
        return self.available

    def get_device_capability(self, device):
        return self.capability

    def get_arch_list(self):
        return list(self.arch_list)

    def get_device_properties(self, device):
        return SimpleNamespace(total_memory=self.total_memory)

    def set_per_process_memory_fraction(self, fraction, device):
        self.events.append(("memory_fraction", fraction, device))

    def memory_reserved(self, device):
        return self.reserved

    def memory_allocated(self, device):
        return self.allocated

    def max_memory_reserved(self, device):
        return self.peak_reserved

    def empty_cache(self):
        self.events.append("empty_cache")


class CpuOnlyCuda(FakeCuda):
    """Like a CPU build of torch: every memory call other than the harmless ones raises."""

    def _no_cuda(self, *args, **kwargs):
        raise AssertionError("Torch not compiled with CUDA enabled")

    set_per_process_memory_fraction = memory_reserved = memory_allocated = max_memory_reserved = _no_cuda
    get_device_capability = _no_cuda
    get_device_properties = _no_cuda

    def empty_cache(self):
        raise AssertionError("empty_cache must not be called for a CPU device by this code")


def make_torch(*, available: bool = True, capability=(9, 0), arch_list=("sm_80", "sm_90"),
               total_memory: int = 140 * GIB, cpu_only: bool = False) -> SimpleNamespace:
    events: list = []
    cuda_type = CpuOnlyCuda if cpu_only else FakeCuda
    cuda = cuda_type(events, available and not cpu_only, capability, list(arch_list), total_memory)
    return SimpleNamespace(cuda=cuda, nn=SimpleNamespace(Module=FakeModule), events=events)
