"""nvidia-smi on this host, when it exists: memory used per GPU, once or sampled while a request runs."""
from __future__ import annotations

import shutil
import subprocess
import threading

from .memory import parse_nvidia_smi

QUERY = ["--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"]


def binary() -> str | None:
    return shutil.which("nvidia-smi")


def read() -> list[dict] | None:
    """Memory per GPU in MiB, or None when there is no nvidia-smi or it fails."""
    path = binary()
    if path is None:
        return None
    try:
        completed = subprocess.run([path, *QUERY], capture_output=True, text=True, timeout=10)
        if completed.returncode != 0:
            return None
        return parse_nvidia_smi(completed.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


class PeakSampler:
    """Reads nvidia-smi every interval between enter and exit and keeps the most used memory per GPU."""

    def __init__(self, interval: float = 0.1):
        self.interval = interval
        self.peak: dict[int, dict] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while True:
            gpus = read()
            if gpus is not None:
                self.samples += 1
                for gpu in gpus:
                    known = self.peak.get(gpu["index"])
                    if known is None or gpu["used_mib"] > known["used_mib"]:
                        self.peak[gpu["index"]] = gpu
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> "PeakSampler":
        if binary() is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
