"""python -m tests.mutate_bounds: takes each bound away in turn, in a copy of the repository, and runs the tests that
should see it (the hostile matrix's cells where one attacks it); prints a table of which failed. Exits 1 when a
bound's removal leaves its tests passing: that bound is not tested."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MATRIX = "tests/unit/test_hostile_matrix.py"


@dataclass(frozen=True)
class Mutation:
    bound: str
    path: str
    old: str  # must occur exactly once
    new: str
    tests: str  # the test file
    select: str  # pytest -k

    def apply(self, root: Path) -> None:
        target = root / self.path
        text = target.read_text()
        if text.count(self.old) != 1:
            raise SystemExit(f"{self.bound}: {self.path} no longer holds the text to take away once; update it")
        target.write_text(text.replace(self.old, self.new))


MUTATIONS = (
    Mutation("100 headers per request", "shim/server/bounded_connection.py",
             "if self._header_count > MAX_HEADERS:", "if False:",
             MATRIX, "meets_its_bound and header_flood and shim"),
    Mutation("1024 chunks per body", "shim/server/bounded_connection.py",
             "if self._chunks > MAX_BODY_CHUNKS + 1:", "if False:",
             MATRIX, "meets_its_bound and chunk_flood and shim"),
    Mutation("the heaviest source's heads give way", "shim/server/roster.py",
             "others += self._heaviest_heads(connection, entry, excess - len(others), chosen)", "pass",
             MATRIX, "meets_its_bound and trickling_heads_past_the_share and shim and 16"),
    Mutation("MAX_CONNECTIONS_PER_PEER", "shim/server/roster.py",
             "        if excess <= 0:\n            return ConnectionAdmission(True)\n        mine",
             "        if True:\n            return ConnectionAdmission(True)\n        mine",
             MATRIX, "victim_at_another and trickled_head and shim"),
    Mutation("MAX_BODY_BYTES, sent or decoded", "shim/edge/body.py",
             "self._max_body = max_body_bytes", "self._max_body = 1 << 40",
             MATRIX, "meets_its_bound and bodies_past_the_size_limit and shim"),
    Mutation("5 s for a connection's first byte", "shim/server/bounded_connection.py",
             "if self._limits.silent_seconds < self._limits.header_seconds:", "if False:",
             "tests/unit/test_shim_server.py", "sends_nothing_is_closed_sooner"),
    Mutation("a source is an IPv6 /64", "shim/server/roster.py",
             "return str(ipaddress.IPv6Network((address, 64), strict=False))", "return str(address)",
             "tests/unit/test_shim_connections.py", "ipv6"),
    Mutation("2 metrics connections per address", "shim/metrics_server.py",
             "if mine >= self._max_per_peer:", "if False:",
             "tests/unit/test_shim_connections.py", "share_of_the_metrics"),
    Mutation("a full metrics server: the heaviest source's waiting connection gives way", "shim/metrics_server.py",
             "giving = self._giving_way(mine)", "giving = None",
             "tests/unit/test_shim_connections.py", "lighter_sources_scrape"),
    Mutation("the parser's 400 in the envelope", "shim/server/bounded_connection.py",
             "def send_400_response(", "def _not_send_400_response(",
             "tests/unit/test_shim_server.py", "parser"),
    Mutation("the balancer speaks HTTP/1.1 only", "docker/haproxy/haproxy.cfg.template",
             "bind ${bind} proto h1", "bind ${bind}",
             "tests/unit/test_balancer_bounds.py", "http1"),
    Mutation("the Triton request built off the loop", "shim/port/triton.py",
             "await asyncio.get_running_loop().run_in_executor(_BODY_BUILDER, request_body, state, calls,",
             "request_body(state, calls,",
             "tests/unit/test_body_off_loop.py", "triton"),
    Mutation("the shared state sent once", "shim/port/triton.py",
             "_strings(STATE, [strict_json.dumps(state)])", "_strings(STATE, [strict_json.dumps(state)] * len(calls))",
             "tests/unit/test_body_off_loop.py", "travels_once"),
    Mutation("a large System One body read off the loop", "shim/systemone/service.py",
             "request = await read_body(large, parse_request, body, self._settings.max_decisions)",
             "request = parse_request(body, self._settings.max_decisions)",
             "tests/unit/test_body_off_loop.py", "structured"),
    Mutation("a lighter source's kept-alive connection never goes for a heavier one", "shim/server/roster.py",
             "others += self._oldest_idle(connection, lambda other: self._held(other) >= mine,",
             "others += self._oldest_idle(connection, lambda other: True,",
             "tests/unit/test_shim_connections.py", "lighter_sources or kept_alive"),
    Mutation("the gateway holds each client to the balancer's rate", "deploy/k8s/base/backendtrafficpolicy.yaml",
             "  rateLimit:\n", "  rateLimitOff:\n",
             "tests/unit/test_k8s_manifests.py", "balancers_rate"),
    Mutation("131,072 values per JSON text", "wire/strict_json.py",
             "    if values_at_most(raw) > MAX_VALUES:", "    if False:",
             "tests/unit/test_wire.py", "more_values_than_the_bound"),
    Mutation("a body decodes to at most MAX_DECODE_RATIO times its bytes", "shim/edge/encoding.py",
             "return min(self._limit, max(RATIO_FLOOR, self._max_ratio * self._fed))", "return self._limit",
             "tests/unit/test_shim_encoding.py", "ratio"),
    Mutation("an MCP message, its tool's arguments aside, at most the SDK's bytes", "shim/systemone/mcp_body.py",
             'if small(message) else None\n    if handed is None or len(handed) > SDK_MESSAGE_BYTES:',
             'if True else None\n    if False:',
             "tests/unit/test_systemone.py", "mcp_message_large"),
    Mutation("a source holds at most MAX_QUEUE_PER_PEER of the queue", "shim/edge/queue_share.py",
             "if capped and mine >= self.per_source:", "if False:",
             "tests/unit/test_queue_share.py", "past_its_share"),
    Mutation("a full queue gives the heaviest source's waiting place to a lighter one", "shim/edge/queue_share.py",
             "victim = self._reclaimable(mine)", "victim = None",
             "tests/unit/test_queue_share.py", "lighter_source"),
    Mutation("a POST finding the queue full waits in line for a place", "shim/edge/admission.py",
             'if verdict.over == "total" and await self._in_line(cycle, peer):', "if False:",
             MATRIX, "meets_its_bound and balancer and chunk_flood and systemone-16"),
    Mutation("the model is given to callers in turn", "shim/port/turns.py",
             "key=lambda each: (self._last_turn.get(each, -1), self._waiting[each][0][0])",
             "key=lambda each: self._waiting[each][0][0]",
             "tests/unit/test_turns.py", "backlog or take_turns"),
    Mutation("a request whose client went away is never scored", "shim/cycle.py",
             "return [self.client_gone, *queue, self.reclaimed]", "return [*queue, self.reclaimed]",
             "tests/unit/test_shim_client_gone.py", "client_goes"),
    Mutation("the model parses a request's state once", "intern_decision_model/protocol.py",
             "request = predict_request(shared.value, request)",
             'request = predict_request(strict_json.loads(strict_json.dumps(shared.value), "the state"), request)',
             "tests/unit/test_model_state_once.py", "parsed_once"),
    Mutation("a named key's share binds while another caller waits", "shim/edge/admission.py",
             "        if self._over_key_share(caller):", "        if False:",
             "tests/unit/test_callers.py", "share_binds"),
    Mutation("the balancer holds a source to every replica's MAX_QUEUE in POSTs", "docker/multi_gpu.py",
             'posts = MAX_QUEUE * replicas', 'posts = 8',
             "tests/unit/test_fleet.py", "never_refused"),
    Mutation("the balancer names the client in X-Forwarded-For", "docker/haproxy/haproxy.cfg.template",
             "    option forwardfor\n", "",
             MATRIX, "meets_its_bound and balancer and chunk_flood and systemone-16"),
    Mutation("only a balancer's X-Forwarded-For is read", "shim/server/serve.py",
             '"forwarded_allow_ips": list(balancer_addresses) or None', '"forwarded_allow_ips": "*"',
             "tests/unit/test_shim_server.py", "source_is_the_client"),
    Mutation("MCP's check charges a float by its digits", "shim/systemone/mcp_body.py",
             "budget -= len(repr(current))", "budget -= 1",
             "tests/unit/test_body_off_loop.py", "mcp"),
)


def tracked_copy(into: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def failed(root: Path, mutation: Mutation) -> tuple[bool, float]:
    began = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", mutation.tests, "-k",
                          mutation.select], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                         capture_output=True, text=True)
    if run.returncode not in (0, 1):  # 5: nothing selected, 2 or more: an error of the run itself
        raise SystemExit(f"{mutation.bound}: pytest exited {run.returncode}\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    return run.returncode == 1, time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutate_bounds")
    parser.add_argument("-k", default="", help="only the bounds whose name holds this")
    args = parser.parse_args(argv)
    rows, survived = [], 0
    for mutation in (m for m in MUTATIONS if args.k in m.bound):
        with tempfile.TemporaryDirectory() as scratch:
            root = tracked_copy(Path(scratch))
            mutation.apply(root)
            caught, seconds = failed(root, mutation)
        survived += not caught
        rows.append(f"| {mutation.bound} | `{mutation.tests.rpartition('/')[2]}` -k `{mutation.select}` | "
                    f"{'fails' if caught else 'PASSES: not tested'} | {seconds:.0f} s |")
        print(rows[-1], flush=True)
    print("\n| bound taken away | tests run | result | time |\n|---|---|---|---|\n" + "\n".join(rows))
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
