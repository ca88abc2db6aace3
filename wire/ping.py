"""The ping: an inference request with no calls, answered with an empty RESPONSE; it proves the stub and execute
alive, which Triton's readiness does not (docs/wire-protocol.md, "Ping").
    python -m wire.ping [--url HOST:PORT] [--model NAME] [--timeout SECONDS]    # exit 0 answered, 1 not"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
from pathlib import Path
from typing import Mapping

from wire.env import host_port
from wire.protocol import DATATYPE, MODEL_NAME, REQUEST, RESPONSE

# The header Triton's restricted APIs (--http-restricted-api) expect; its value is INTERN_DECISION_TRITON_API_KEY.
API_KEY_HEADER = "triton-api-key"
KEY_VARIABLE = "INTERN_DECISION_TRITON_API_KEY"
BODY = json.dumps({"inputs": [{"name": REQUEST, "datatype": DATATYPE, "shape": [0], "data": []}]}).encode()


def infer_path(model: str) -> str:
    return f"/v2/models/{model}/infer"


def headers(api_key: str) -> dict[str, str]:
    return {"Content-Type": "application/json", API_KEY_HEADER: api_key}


def pong_error(status: int, body: bytes) -> str | None:
    """None when the answer is the ping's (200 and an empty RESPONSE), else what is wrong with it."""
    text = body.decode("utf-8", "replace")
    if status != 200:
        try:
            text = json.loads(text)["error"]
        except (ValueError, KeyError, TypeError):
            pass
        return f"Triton answered {status}: {text}"
    try:
        outputs = {output["name"]: output for output in json.loads(text)["outputs"]}
        answered = outputs[RESPONSE]["shape"] == [0]
    except (ValueError, KeyError, TypeError):
        answered = False
    return None if answered else f"the answer is not an empty {RESPONSE}: {text[:200]}"


def attempt(address: str, model: str, api_key: str, timeout: float) -> tuple[str | None, bool]:
    """(None when the model answers, else why not; whether it timed out: wire/liveness.py tells if it only waited)."""
    connection = http.client.HTTPConnection(*host_port(address), timeout=timeout)
    try:
        connection.request("POST", infer_path(model), body=BODY, headers=headers(api_key))
        response = connection.getresponse()
        return pong_error(response.status, response.read()), False
    except TimeoutError as exc:
        return f"Triton did not answer within {timeout:g} s: {type(exc).__name__}: {exc}", True
    except (OSError, http.client.HTTPException) as exc:
        return f"Triton did not answer: {type(exc).__name__}: {exc}", False
    finally:
        connection.close()


def ping(address: str, model: str, api_key: str, timeout: float) -> str | None:
    """None when the model answers the ping, else why not (standard library only, for healthchecks)."""
    return attempt(address, model, api_key, timeout)[0]


def api_key_from(env: Mapping[str, str]) -> str:
    if env.get(KEY_VARIABLE):
        return env[KEY_VARIABLE]
    path = env.get(KEY_VARIABLE + "_FILE")
    if not path:
        raise ValueError(f"{KEY_VARIABLE} (or {KEY_VARIABLE}_FILE) is required")
    return Path(path).read_text(encoding="ascii").removesuffix("\n").removesuffix("\r")


def main(argv: list[str] | None = None, env: Mapping[str, str] = os.environ) -> int:
    parser = argparse.ArgumentParser(prog="python -m wire.ping")
    parser.add_argument("--url", default=env.get("INTERN_DECISION_TRITON_URL") or "127.0.0.1:8000",
                        help="host:port of Triton's HTTP endpoint")
    parser.add_argument("--model", default=MODEL_NAME)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args(argv)
    try:
        problem = ping(args.url, args.model, api_key_from(env), args.timeout)
    except (OSError, ValueError) as exc:
        problem = f"cannot ping: {exc}"
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
