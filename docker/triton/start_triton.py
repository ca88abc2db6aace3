"""Start tritonserver in the Triton image: the image's CMD, run under NVIDIA's entrypoint.

    python start_triton.py [extra tritonserver arguments ...]

Reads Triton's API key from INTERN_DECISION_TRITON_API_KEY_FILE (default /run/secrets/triton_api_key, the compose
secret the shim reads too) and puts it on tritonserver's command line, which is the only way Triton takes it
(--http-restricted-api has no file or environment form): every HTTP call to the restricted APIs must then carry the
header `triton-api-key: <key>`. Health and metadata stay open, for the healthcheck and the shim's readiness probe.
The key never enters the environment.

Triton's HTTP API listens on 127.0.0.1 only: its one client, the shim, shares its network namespace (the pod; in
Compose the shim runs in Triton's namespace), so the key on the command line, which anyone who can list the node's
processes can read, opens nothing that they can reach. gRPC is off: nothing uses it. The metrics port listens on
every address (METRICS_ADDRESS), for Prometheus; it is read-only and needs no key.

tritonserver runs under watchdog.py, which ends it with a non-zero status when the model stays unreachable, so
that the container's restart policy brings a new one (the heal by restart).

tritonserver waits at most EXIT_TIMEOUT_SECONDS for inferences in flight when it is stopped (a dead python stub
holds it that long; Triton's default is 30 s). The python backend's shared-memory regions carry SHM_PREFIX, and
regions of that prefix left in /dev/shm by an earlier run (a stub that died) are removed before tritonserver starts.

Fails closed, exit 2 with one line on stderr, before tritonserver starts, when:
* the key file is missing, empty, shorter than 32 characters or holds anything but A-Z a-z 0-9 _ -
  (Triton splits the flag at ':' ',' and '=');
* an INTERN_DECISION_API_TOKEN* variable is set: the shim's API token must never reach tritonserver;
* an extra argument tries to replace the model repository, the restricted APIs or the ports;
* INTERN_DECISION_OTLP_ENDPOINT is set but is not an http(s) URL (wire/tracing.py). Set, Triton traces every
  inference in OpenTelemetry mode and exports the spans there; a request with a traceparent joins its caller's trace.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Mapping

KEY_FILE_VARIABLE = "INTERN_DECISION_TRITON_API_KEY_FILE"
DEFAULT_KEY_FILE = "/run/secrets/triton_api_key"
# HTTP header name of the key; Triton's gRPC endpoint expects it prefixed with triton-grpc-protocol-.
HEADER = "triton-api-key"
RESTRICTED = ("inference", "model-repository", "model-config", "shared-memory", "logging", "statistics", "trace")
MODEL = "intern_decision"
EXIT_TIMEOUT_SECONDS = 10
HTTP_ADDRESS = "127.0.0.1"
METRICS_ADDRESS = "0.0.0.0"
# The watchdog's ping timeout: one call's time (docker/multi_gpu.py, ping_timeout_seconds; a ping that times out
# behind a long request while calls keep ending is busy, wire/liveness.py), set by the deployment; else the
# watchdog's own default.
PING_TIMEOUT_VARIABLE = "INTERN_DECISION_PING_TIMEOUT_SECONDS"
SHM_PREFIX = "intern_decision_"
SHARED_MEMORY = Path("/dev/shm")
_KEY = re.compile(r"[A-Za-z0-9_-]{32,512}")
_OWNED = ("--model-repository", "--model-store", "--http-restricted-api", "--grpc-restricted-protocol",
          "--http-port", "--grpc-port", "--metrics-port", "--model-control-mode", "--load-model",
          "--http-address", "--grpc-address", "--metrics-address", "--allow-grpc", "--allow-http")


class Refused(Exception):
    """A reason not to start."""


def key_path(env: Mapping[str, str]) -> Path:
    return Path(env.get(KEY_FILE_VARIABLE) or DEFAULT_KEY_FILE)


def read_key(env: Mapping[str, str]) -> str:
    path = key_path(env)
    try:
        key = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise Refused(f"Triton's API key cannot be read from {path} ({KEY_FILE_VARIABLE}): "
                      f"{type(exc).__name__}: {exc}") from None
    key = key.removesuffix("\n").removesuffix("\r")
    if not _KEY.fullmatch(key):
        raise Refused(f"Triton's API key in {path} must be 32 to 512 characters of A-Z a-z 0-9 _ - "
                      f"(e.g. `openssl rand -hex 32`), got {len(key)} characters")
    return key


def check_environment(env: Mapping[str, str]) -> None:
    leaked = sorted(name for name in env if name.startswith("INTERN_DECISION_API_TOKEN"))
    if leaked:
        raise Refused(f"{', '.join(leaked)} must not reach tritonserver: the API token belongs to the shim alone")


def tracing_flags(env: Mapping[str, str]) -> list[str]:
    """OpenTelemetry tracing to INTERN_DECISION_OTLP_ENDPOINT when it is set (wire/tracing.py); none otherwise."""
    if not env.get("INTERN_DECISION_OTLP_ENDPOINT"):
        return []
    from wire.tracing import otlp_endpoint, triton_trace_flags  # the image's site-packages, as the model's

    try:
        endpoint = otlp_endpoint(env)
    except ValueError as exc:
        raise Refused(str(exc)) from None
    return triton_trace_flags(endpoint)


def command(key: str, extra: list[str]) -> list[str]:
    for argument in extra:
        if argument.split("=", 1)[0] in _OWNED:
            raise Refused(f"{argument.split('=', 1)[0]} is set by start_triton.py and cannot be overridden")
    apis = ",".join(RESTRICTED)
    return [
        "tritonserver",
        "--model-repository=/models",
        "--model-control-mode=explicit",
        f"--load-model={MODEL}",
        "--exit-on-error=true",
        "--strict-readiness=true",
        f"--http-address={HTTP_ADDRESS}",
        "--http-port=8000",
        "--allow-grpc=false",
        f"--metrics-address={METRICS_ADDRESS}",
        "--metrics-port=8002",
        f"--http-restricted-api={apis}:{HEADER}={key}",
        f"--exit-timeout-secs={EXIT_TIMEOUT_SECONDS}",
        f"--backend-config=python,shm-region-prefix-name={SHM_PREFIX}",
        *extra,
    ]


def watchdog_arguments(env: Mapping[str, str], command_line: list[str]) -> list[str]:
    """watchdog.py's argv: the key file, the exit timeout, the shared-memory prefix, the ping timeout when the
    deployment sets one (a positive number of seconds), then tritonserver's command."""
    arguments = ["--key-file", str(key_path(env)), "--exit-timeout", str(EXIT_TIMEOUT_SECONDS + 5),
                 "--shm-prefix", SHM_PREFIX]
    raw = env.get(PING_TIMEOUT_VARIABLE, "")
    if raw:
        try:
            seconds = float(raw)
        except ValueError:
            seconds = 0.0
        if not seconds > 0:
            raise Refused(f"{PING_TIMEOUT_VARIABLE} must be a positive number of seconds, got {raw!r}")
        arguments += ["--ping-timeout", f"{seconds:g}"]
    return [*arguments, "--", *command_line]


def remove_stale_regions(shared_memory: Path = SHARED_MEMORY) -> list[Path]:
    """Remove the python backend regions an earlier tritonserver left behind; call before this one starts."""
    stale = sorted(shared_memory.glob(SHM_PREFIX + "*"))
    for region in stale:
        region.unlink(missing_ok=True)
    return stale


def main(argv: list[str], env: Mapping[str, str]) -> list[str]:
    """The tritonserver argv to exec; raises Refused."""
    check_environment(env)
    return command(read_key(env), [*tracing_flags(env), *argv])


if __name__ == "__main__":
    try:
        supervised = watchdog_arguments(os.environ, main(sys.argv[1:], os.environ))
    except Refused as exc:
        print(f"refusing to start: {exc}", file=sys.stderr)
        sys.exit(2)
    for region in remove_stale_regions():
        print(f"removed a stale shared-memory region: {region}", file=sys.stderr)
    import watchdog  # beside this script in the image

    sys.exit(watchdog.main(supervised))
