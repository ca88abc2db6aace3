"""The steps on the served stack: tritonserver with the model and the shim in front (server), the shapes timed through
it (service), the acceptance kit on it (acceptance), and check 6 on an instance under a test cap (overcap)."""
from __future__ import annotations

import os
import secrets
import time

from devstack.shim import ShimServer
from gpucheck import acceptance_kit, graph_health, install, libraries
from gpucheck.context import Context, Inconclusive, ServiceFault, Skip, dtype_of, keeping
from gpucheck.environment import nvidia_smi
from gpucheck.findings import Found
from gpucheck.report import PASS
from gpucheck.service import time_shape
from gpucheck.stack import VARIANT, Stack, health, prepare_repository, start_server
from intern_decision_model.kernels import FAST

# The share of the server step's allowance an attempt that another follows may take (the production config, with
# the KIND_MODEL variant after it): a production server that hangs leaves the variant the other half, which on the
# GPU machine (150 s) is 75 s against the 60 s a start is expected to take.
FIRST_ATTEMPT_SHARE = 0.5


def attempt_timeout(ctx: Context, allowance: float, position: int, attempts: int) -> float:
    """Seconds attempt number `position` of `attempts` may take to get ready: at most FIRST_ATTEMPT_SHARE of the
    step's allowance while another attempt follows it, all that is left for the last one."""
    left = ctx.budget()
    if position < attempts - 1:
        return min(left, FIRST_ATTEMPT_SHARE * allowance)
    return left


def _serve(ctx: Context, cap_gib: float | None, attempts: list, shim_log: str) -> tuple[float, dict]:
    """tritonserver with the model (under cap_gib on CUDA, uncapped when None) and the shim in front, ready; the
    context holds the stack (ctx.stack, with its token) from the moment the server is up, so that the teardown
    stops it. Returns (seconds to ready, /health)."""
    findings = ctx.findings
    repository = prepare_repository(ctx.options.scratch)
    env = findings.pins.env()
    env.update(INTERN_DECISION_DEVICE=ctx.options.device, INTERN_DECISION_DTYPE=dtype_of(ctx),
               HF_HUB_DISABLE_PROGRESS_BARS="1", **ctx.threads(), **ctx.kernel_cache())
    if findings.slow_kernels_allowed:
        env["INTERN_DECISION_ALLOW_SLOW_KERNELS"] = "1"
    if cap_gib is not None:
        env["INTERN_DECISION_VRAM_CAP_GIB"] = f"{cap_gib:.2f}"
    if findings.libpython_dir:  # the carried libpython, for an interpreter without its own
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            part for part in (findings.libpython_dir, os.environ.get("LD_LIBRARY_PATH", "")) if part)
    started = time.monotonic()
    allowance = ctx.step_end - started
    server, label, tried = start_server(attempts, env, repository, findings.server_root, findings.python, ctx.out,
                                        lambda position: attempt_timeout(ctx, allowance, position, len(attempts)))
    ready_seconds = round(time.monotonic() - started, 1)
    token = secrets.token_urlsafe(32)
    # The carry holds the shim's packages but not mcp's (its closure would not fit): the check serves without /mcp.
    shim = ShimServer(server, {"INTERN_DECISION_API_TOKEN": token, "INTERN_DECISION_MCP": "0"}, ctx.out / shim_log,
                      python=findings.python)
    token_file = ctx.options.scratch / "api-token"
    ctx.hold_stack(Stack(server, shim, label, tried, token_file))  # from here on, the teardown stops both
    token_file.write_text(token)
    token_file.chmod(0o600)
    shim.start().wait_ready(timeout=ctx.budget())
    return ready_seconds, health(shim)


def serving_choice(ctx: Context) -> dict:
    """What the server step serves with, decided as it starts: the runner records it before the step runs, so that
    the report says it even when serving fails (gpucheck.check.StepSpec.decide)."""
    # With the carried fla and the forward-only causal-conv1d (sm_90) the path is "fast" and nothing is allowed; on a
    # card the wheel has no code for, or where a kernel does not import, the check serves knowingly on the slower
    # path, and the report says so in bold.
    return {"slow_kernels_allowed": ctx.cuda and ctx.findings.inprocess_path != FAST}


def server_step(ctx: Context) -> Found:
    findings = ctx.findings
    conv_hidden = bool((findings.inprocess or {}).get("conv_blocked"))
    if findings.kernels_bound and findings.kernels is not None:  # the path the in-process figures proved, no faster
        install.expose_kernels(findings.python, findings.kernels, ctx.out / "install.log",
                               hidden=("causal_conv1d",) if conv_hidden else ())
    attempts = [("production", None), ("variant", VARIANT)] if ctx.gpu else [("cpu", "cpu")]
    cap = findings.caps["production_gib"] if ctx.cuda else None
    ready_seconds, facts = _serve(ctx, cap, attempts, "shim.log")
    if ctx.cuda:
        nvidia_smi(ctx.out / "nvidia-smi.txt", "serving (after startup)")
    served = (facts.get("model") or {}).get("linear_attention")
    server, shim = ctx.stack.server, ctx.stack.shim
    loaded = _libraries_compared(server.pid, (findings.inprocess or {}).get("libraries") or {})
    data = {"config": ctx.stack.config, "attempts": ctx.stack.attempts, "ready_seconds": ready_seconds,
            "vram_cap_gib": cap, "caps": findings.caps,
            "kernels_exposed": bool(findings.kernels_bound and findings.kernels), "conv_hidden": conv_hidden,
            "health": facts,
            "linear_attention": served, "slow_kernels_allowed": findings.slow_kernels_allowed,
            "triton": server.http_url, "metrics": server.metrics_url, "shim": shim.url, "libraries": loaded}
    capped = f", production VRAM cap {cap} GiB" if cap else (", uncapped" if ctx.cuda else "")
    slow = ", INTERN_DECISION_ALLOW_SLOW_KERNELS=1 set by the check" if findings.slow_kernels_allowed else ""
    differ = "; ".join(f"{name}: stub {files[0]}, in-process {files[1]}" for name, files in loaded["differ"].items())
    return Found(f"config {ctx.stack.config} ready after {ready_seconds} s{capped}; linear attention {served}{slow}; "
                 f"shim on {shim.url}; /health {facts.get('status')}; "
                 + (f"libraries NOT the in-process run's: {differ}" if differ else
                    f"{len(loaded['stub'])} watched libraries, the same files as in-process where both loaded them"),
                 data)


def _libraries_compared(server_pid: int | None, inprocess: dict) -> dict:
    """The watched libraries the model's stub loaded (gpucheck.libraries), against the in-process run's."""
    stub_libraries: dict = {}
    for pid in libraries.children(server_pid) if server_pid else []:
        stub_libraries.update(libraries.loaded(pid))
    return {"stub": stub_libraries, "inprocess": inprocess,
            "differ": libraries.differences(stub_libraries, inprocess)}


SERVICE_LAST_ROUND_SECONDS = 5  # a shape's last request may start just before its slice ends


def service_step(ctx: Context) -> Found:
    fitted = ctx.findings.fitted
    timed = [name for name, shape in fitted.items() if shape["timed"]]
    deadline = time.monotonic() + ctx.budget()
    results, mismatched = {}, []
    token = ctx.stack.token_file.read_text()
    read_graphs = graph_health.reader(ctx.stack.shim)
    with keeping({"shapes": results}) as data:  # the shapes timed so far, if the step is cut
        graphs = data["graphs_before"] = graph_health.current(read_graphs, ctx.budget())["graphs"]
        for position, name in enumerate(timed):
            seconds = max(1.0, (deadline - time.monotonic()) / (len(timed) - position) - SERVICE_LAST_ROUND_SECONDS)
            entry = time_shape(ctx.stack.shim.url, token, fitted[name]["body"], ctx.options.rounds, seconds,
                               ctx.options.warmup)
            requests = ctx.options.warmup + len(entry["client_ms"])
            entry["graphs"], graphs = graphs_of_shape(read_graphs, graphs, requests * len(fitted[name]["tokens"]),
                                                      ctx.budget())
            entry["tokens_match"] = entry["tokens"] == fitted[name]["tokens"]
            if not entry["tokens_match"]:
                mismatched.append(f"{name}: service {entry['tokens']}, fitted {fitted[name]['tokens']}")
            results[name] = entry
        data["graphs_after"] = {"graphs": graphs,
                                "caught_up": all(entry["graphs"]["caught_up"] for entry in results.values())}
        if mismatched:
            raise ServiceFault("the service scored other prompts than predict() in-process: " + "; ".join(mismatched))
    return Found("; ".join(f"{name} p50 {entry['client'].get('p50')} ms (n={entry['client'].get('count')})"
                           for name, entry in results.items()) + f"; graphs after: {graph_health.describe(graphs)}",
                 data)


def graphs_of_shape(read_graphs, before: dict | None, calls: int, seconds_left: float) -> tuple[dict, dict | None]:
    """The forward calls a shape's `calls` predict() calls (one forward each) ran replayed and eager, from /health
    once it counts them all, and the reading the next shape starts from."""
    reading = graph_health.after_calls(read_graphs, graph_health.forward_calls(before) + calls, seconds_left)
    after = reading["graphs"]
    return {**graph_health.calls_between(before, after), "mode": (after or {}).get("mode"),
            "caught_up": reading["caught_up"]}, after


OVER_CAP_CHECK = "6"  # needs an instance under a cap the largest legal call exceeds: the overcap step


def _kit_checks(ctx: Context) -> list[str]:
    return [check.strip() for check in ctx.options.kit_checks.split(",") if check.strip()]


def _run_kit(ctx: Context, data: dict, checks: list[str], name: str) -> dict:
    """The kit's checks against the stack being served, their statuses into data["checks"] (the calling step's
    data); ServiceFault when one failed."""
    if not acceptance_kit.present():
        raise Skip("acceptance kit not present (no acceptance/ package in this checkout)", data)
    server, shim = ctx.stack.server, ctx.stack.shim
    data.update(checks_requested=",".join(checks))
    try:
        report = acceptance_kit.run(ctx.findings.python, shim.url, ctx.stack.token_file, server.metrics_url,
                                    ",".join(checks), ctx.options.kit_n, ctx.out / name, ctx.out / f"{name}.log",
                                    ctx.budget())
    except acceptance_kit.KitFailed as exc:
        data.update(checks=acceptance_kit.check_statuses(exc.report), kit=exc.report.get("checks"))
        raise ServiceFault(f"the kit failed: {data['checks']}") from None
    data.update(checks=acceptance_kit.check_statuses(report), kit=report.get("checks"))
    return report


def acceptance_step(ctx: Context) -> Found:
    checks = [check for check in _kit_checks(ctx) if check != OVER_CAP_CHECK]
    if not checks:
        raise Skip("no acceptance check but check 6 selected")
    with keeping({"vram_cap_gib": ctx.findings.caps["production_gib"] if ctx.cuda else None}) as data:
        _run_kit(ctx, data, checks, "acceptance")
        data["graphs_after"] = graph_health.current(graph_health.reader(ctx.stack.shim), ctx.budget())
    unproven = [check for check in checks if data["checks"].get(check) in ("inconclusive", "not_run")]
    return Found("checks " + ", ".join(f"{check} {status}" for check, status in data["checks"].items())
                 + (f"; unproven, not deciding: {', '.join(unproven)} (the kit's report says why)" if unproven else "")
                 + f"; graphs after: {graph_health.describe(data['graphs_after']['graphs'])}", data)


SERVED_CONFIGS = {"production": None, "variant": VARIANT, "cpu": "cpu"}


def overcap_step(ctx: Context) -> Found:
    if OVER_CAP_CHECK not in _kit_checks(ctx):
        raise Skip("acceptance check 6 not selected")
    caps = ctx.findings.caps
    with keeping({"caps": caps}) as data:
        return _check_over_cap(ctx, caps, data)


def _check_over_cap(ctx: Context, caps: dict, data: dict) -> Found:
    if not caps.get("separable"):
        raise Inconclusive(f"cannot separate on this card: no VRAM cap lets the model start and serve the normal "
                           f"shapes yet stops the largest legal call (normal {caps['normal_gib']} GiB reserved, "
                           f"largest {caps['largest_gib']} GiB allocated, a margin of {caps['margin_mib']} MiB "
                           f"each side): {caps['why']}")
    config = ctx.stack.config if ctx.stack else "production"
    ctx.stop_stack()
    ready_seconds, facts = _serve(ctx, caps["test_gib"], [("test-cap", SERVED_CONFIGS[config])],
                                  "shim-test-cap.log")
    data.update(test_cap_gib=caps["test_gib"], config=config, ready_seconds=ready_seconds, health=facts)
    try:
        report = _run_kit(ctx, data, [OVER_CAP_CHECK], "acceptance-check6")
    except ServiceFault:  # a finding: what the card's memory looked like goes with the kit's report
        if ctx.cuda:
            data["nvidia_smi_after"] = nvidia_smi(ctx.out / "nvidia-smi.txt", "after check 6 failed")
        raise
    result = (report.get("checks") or {}).get(OVER_CAP_CHECK) or {}
    detail = (f"an instance under the test cap of {caps['test_gib']} GiB (normal shapes {caps['normal_gib']} GiB, "
              f"largest call {caps['largest_gib']} GiB), ready after {ready_seconds} s: check 6 "
              f"{data['checks'].get(OVER_CAP_CHECK)}")
    if data["checks"].get(OVER_CAP_CHECK) != PASS:
        raise Inconclusive(f"{detail}: {result.get('reason')}")
    return Found(detail, data)
