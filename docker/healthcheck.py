"""Container healthchecks of the compose stack (docker/compose.yaml). Standard library only; both images ship it.

    python healthcheck.py triton         # in the Triton container: ready, and a ping through the model
    python healthcheck.py triton-ready   # in the Triton container: ready (Kubernetes' startup probe)
    python healthcheck.py shim           # in the shim container

Exit 0 when healthy, 1 with one line on stderr when not.

triton: Triton and the model are ready (GET /v2/models/<model>/ready, an open API), then `ping_model`: one ping
through the model (wire/ping.py, from the Triton image's venv) with Triton's API key, judged as the watchdog judges
it (wire/liveness.py). Readiness alone is not enough: when the python backend's stub process dies, Triton keeps
answering ready while every inference fails ("Stub process ... is not healthy"); the ping fails. The ping is allowed
one call's time (PING_TIMEOUT_SECONDS, or INTERN_DECISION_PING_TIMEOUT_SECONDS, which the deployments set to
CALL_TIMEOUT_SECONDS and a margin: docker/multi_gpu.py, ping_timeout_seconds). It waits behind the inference in
progress: when it times out while the model's count of ended calls on Triton's metrics port (TRITON_METRICS_URL)
moved, the model is busy with a long request, which is healthy (one line on stdout); when no call ended, it hangs.

triton-ready: readiness alone, from inside the container: Triton's API listens on 127.0.0.1 only, where a probe of
the kubelet's own cannot reach it.

shim: GET /health answers 200, which the shim gives only while Triton and the model are ready.
"""
from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from typing import Mapping
from urllib.parse import urlsplit

TIMEOUT_SECONDS = 4.0
PING_TIMEOUT_SECONDS = 5.0  # INTERN_DECISION_PING_TIMEOUT_SECONDS overrides it (Kubernetes: above one call)
TRITON_URL = "http://127.0.0.1:8000"
TRITON_METRICS_URL = "http://127.0.0.1:8002/metrics"  # the model's count of ended calls
KEY_FILE_VARIABLE = "INTERN_DECISION_TRITON_API_KEY_FILE"
DEFAULT_KEY_FILE = "/run/secrets/triton_api_key"


class Unhealthy(Exception):
    """Why the service is not healthy, in one line."""


def get(url: str, headers: dict[str, str] | None = None) -> None:
    """Raises unless url answers 2xx within the timeout."""
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 - fixed local URLs
        response.read()


def ping_model(base_url: str, model: str, env: Mapping[str, str]) -> None:
    """One ping through the model, with the key from INTERN_DECISION_TRITON_API_KEY_FILE (default
    /run/secrets/triton_api_key); raises Unhealthy unless the model answers it or is busy (wire/liveness.py)."""
    from wire.env import positive_number  # the Triton image's venv holds wire; the shim's check never pings
    from wire.liveness import liveness
    from wire.ping import api_key_from

    timeout = positive_number(env, "PING_TIMEOUT_SECONDS", "of seconds > 0") or PING_TIMEOUT_SECONDS
    key = api_key_from({KEY_FILE_VARIABLE: DEFAULT_KEY_FILE, **env})
    verdict = liveness(urlsplit(base_url).netloc, TRITON_METRICS_URL, model, key, timeout)
    if not verdict.alive:
        raise Unhealthy(verdict.detail)
    if verdict.detail:
        print(f"busy: {verdict.detail}")


def check_triton_ready(env: dict[str, str]) -> None:
    model = env.get("INTERN_DECISION_MODEL_NAME") or "intern_decision"
    get(f"{TRITON_URL}/v2/models/{model}/ready")


def check_triton(env: dict[str, str]) -> None:
    check_triton_ready(env)
    ping_model(TRITON_URL, env.get("INTERN_DECISION_MODEL_NAME") or "intern_decision", env)


def check_shim(env: dict[str, str]) -> None:
    port = env.get("INTERN_DECISION_PORT") or "8080"
    get(f"http://127.0.0.1:{port}/health")


CHECKS = {"triton": check_triton, "triton-ready": check_triton_ready, "shim": check_shim}


def main(argv: list[str], env: dict[str, str]) -> int:
    if len(argv) != 1 or argv[0] not in CHECKS:
        print(f"usage: healthcheck.py {'|'.join(CHECKS)}", file=sys.stderr)
        return 2
    try:
        CHECKS[argv[0]](env)
    except urllib.error.HTTPError as exc:
        print(f"unhealthy: {exc.filename} answered {exc.code}", file=sys.stderr)
        return 1
    except Unhealthy as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"unhealthy: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], dict(os.environ)))
