"""Interpreters compared round by round: one in-process worker per arm (gpucheck.inprocess --serve-rounds), each
loaded and warmed, then asked for one round of a shape at a time, the arms' order rotating every round, so that
whatever drifts on the machine falls on every arm alike. Two arms run the same interpreter (the A/A control): a
difference between interpreters means something only where it stands clear of the one between those two."""
from __future__ import annotations

import subprocess
import time
from typing import Callable

from gpucheck.deadline import kill_group, start_logged
from gpucheck.stats import summary

OWN, OWN_AGAIN, SHARED = "own", "own_again", "shared"  # the interpreter's binary twice (A/A), the shared launcher


def orders(arms: list[str], rounds: int) -> list[list[str]]:
    """Each round's order: the arms rotated by one every round."""
    return [arms[index % len(arms):] + arms[:index % len(arms)] for index in range(rounds)]


def alternated(arms: dict[str, Callable[[str], float]], shapes: list[str], rounds: int, seconds: float,
               clock: Callable[[], float] = time.monotonic) -> dict[str, dict[str, list[float]]]:
    """{shape: {arm: milliseconds per round}}: up to `rounds` rounds per shape, at least one, within `seconds`
    shared out across the shapes."""
    timed: dict[str, dict[str, list[float]]] = {shape: {arm: [] for arm in arms} for shape in shapes}
    for shape in shapes:
        stop = clock() + seconds / len(shapes)
        for order in orders(list(arms), rounds):
            if timed[shape][order[0]] and clock() >= stop:
                break
            for arm in order:
                timed[shape][arm].append(arms[arm](shape))
    return timed


def percent(ms: float | None, against: float | None) -> float | None:
    return None if not ms or not against else round((ms / against - 1) * 100, 1)


def verdict(timed: dict[str, dict[str, list[float]]], own_is_static: bool) -> dict:
    """Per shape each arm's summary, the A/A control (own again against own) and the A/B (shared against own), in %
    of own's p50; void where the interpreter's own binary runs the shared libpython too (both arms are then the
    same library, and any gap is not the library's)."""
    shapes = {}
    for shape, arms in timed.items():
        stats = {arm: summary(ms) for arm, ms in arms.items()}
        own = stats[OWN].get("p50")
        shapes[shape] = {**stats, "aa_percent": percent(stats[OWN_AGAIN].get("p50"), own),
                         "ab_percent": percent(stats[SHARED].get("p50"), own)}
    void = "" if own_is_static else ("void: the interpreter's own binary runs the shared libpython as well, so both "
                                     "arms run the same library")
    return {"order": "rotated every round", "own_is_static": own_is_static, "void": void, "shapes": shapes}


class Worker:
    """One gpucheck.inprocess --serve-rounds process: ready once loaded and warmed, then one round per request."""

    def __init__(self, command: list, log, env: dict, cwd):
        self.process = start_logged(command, log, env, cwd, stdin=subprocess.PIPE)

    def wait_ready(self) -> None:
        line = self.process.stdout.readline().decode().strip()
        if line != "ready":
            raise RuntimeError(f"a worker did not get ready (said {line!r}; log: {self.process.log_path.name})")

    def round(self, shape: str) -> float:
        self.process.stdin.write(f"{shape}\n".encode())
        self.process.stdin.flush()
        return float(self.process.stdout.readline().decode())

    def close(self) -> None:
        try:
            self.process.stdin.close()
            self.process.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        kill_group(self.process)
