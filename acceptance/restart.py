"""Restarting the service between scorings (check 3), and waiting until it answers again."""
from __future__ import annotations

import subprocess
import sys
import time

from .client import Service


def run_restart_command(command: str, timeout: float) -> dict:
    """Run the operator's command through the shell; it should return once the old process is gone."""
    started = time.monotonic()
    try:
        completed = subprocess.run(command, shell=True, timeout=timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return {"ok": False, "detail": f"the restart command ran past {timeout:.0f} s",
                "seconds": round(time.monotonic() - started, 3)}
    tail = (completed.stdout + completed.stderr).strip()[-500:]
    return {"ok": completed.returncode == 0, "detail": f"exit status {completed.returncode}; output: {tail!r}",
            "seconds": round(time.monotonic() - started, 3)}


def prompt_restart() -> dict:
    started = time.monotonic()
    print("Check 3: restart the service now, then press Enter once the old process has stopped.",
          file=sys.stderr, flush=True)
    try:
        sys.stdin.readline()
    except (OSError, KeyboardInterrupt):
        return {"ok": False, "detail": "no answer at the prompt", "seconds": round(time.monotonic() - started, 3)}
    return {"ok": True, "detail": "restarted by hand", "seconds": round(time.monotonic() - started, 3)}


def wait_healthy(service: Service, timeout: float, poll_seconds: float = 0.5):
    """Poll /health until it answers 200; returns (reply or None, seconds waited)."""
    started = time.monotonic()
    while True:
        reply = service.health()
        if reply.status == 200:
            return reply, time.monotonic() - started
        if time.monotonic() - started >= timeout:
            return None, time.monotonic() - started
        service.close()
        time.sleep(poll_seconds)


def boot_id(health: object) -> str | None:
    """The model process's boot id in a /health body, or None when the service does not report one."""
    model = health.get("model") if isinstance(health, dict) else None
    value = model.get("boot_id") if isinstance(model, dict) else None
    return value if isinstance(value, str) and value else None


def wait_new_process(service: Service, timeout: float, known: set[str], poll_seconds: float = 0.5):
    """Poll /health until it answers 200 naming a model process (boot id) not in known.

    Returns (reply or None, seconds waited, the last boot id seen). The shim re-reads the model's facts every few
    seconds, so right after a restart /health may still name the old process for a moment.
    """
    started = time.monotonic()
    last = None
    while True:
        reply = service.health()
        if reply.status == 200:
            last = boot_id(reply.body)
            if last is not None and last not in known:
                return reply, time.monotonic() - started, last
        if time.monotonic() - started >= timeout:
            return None, time.monotonic() - started, last
        service.close()
        time.sleep(poll_seconds)
