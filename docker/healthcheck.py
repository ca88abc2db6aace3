"""Container healthchecks of the compose stack (docker/compose.yaml). Standard library only; both images ship it.

    python healthcheck.py triton   # in the Triton container
    python healthcheck.py shim     # in the shim container

Exit 0 when healthy, 1 with one line on stderr when not.

triton: Triton and the model are ready (GET /v2/models/<model>/ready, an open API), then `ping_model`. Readiness
alone is not enough: when the python backend's stub process dies, Triton keeps answering ready while every
inference fails ("Stub process ... is not healthy"). `ping_model` is the hook for a real call through the model;
it does nothing until the model side has a cheap ping on the wire protocol.

shim: GET /health answers 200, which the shim gives only while Triton and the model are ready.
"""
from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

TIMEOUT_SECONDS = 4.0
TRITON_URL = "http://127.0.0.1:8000"


def get(url: str, headers: dict[str, str] | None = None) -> None:
    """Raises unless url answers 2xx within the timeout."""
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 - fixed local URLs
        response.read()


def ping_model(base_url: str, model: str) -> None:
    """HOOK: score one tiny request through the model (not yet: the wire protocol has no ping).

    When it exists: POST {base_url}/v2/models/{model}/infer with the ping request and the header
    `triton-api-key` read from INTERN_DECISION_TRITON_API_KEY_FILE (default /run/secrets/triton_api_key, mounted
    in this container), and raise unless the answer is the ping's. Keep it cheap and bounded: it runs every
    healthcheck interval and queues behind real inferences.
    """
    return None


def check_triton(env: dict[str, str]) -> None:
    model = env.get("INTERN_DECISION_MODEL_NAME") or "intern_decision"
    get(f"{TRITON_URL}/v2/models/{model}/ready")
    ping_model(TRITON_URL, model)


def check_shim(env: dict[str, str]) -> None:
    port = env.get("INTERN_DECISION_PORT") or "8080"
    get(f"http://127.0.0.1:{port}/health")


CHECKS = {"triton": check_triton, "shim": check_shim}


def main(argv: list[str], env: dict[str, str]) -> int:
    if len(argv) != 1 or argv[0] not in CHECKS:
        print(f"usage: healthcheck.py {'|'.join(CHECKS)}", file=sys.stderr)
        return 2
    try:
        CHECKS[argv[0]](env)
    except urllib.error.HTTPError as exc:
        print(f"unhealthy: {exc.filename} answered {exc.code}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"unhealthy: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], dict(os.environ)))
