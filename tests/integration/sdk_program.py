"""A caller of the official SDK, run by the tests in an interpreter that sees another version of it (the oldest the
README supports): `python sdk_program.py URL TOKEN MODEL ACTION`, printing one JSON object. Its state and questions
are also the newest SDK's tests' (tests/integration/test_systemone.py).

Actions: models, sync, async (the three question types, sync or async), retry (a held queue answers 429 first),
wrong_key (the typed 401)."""
from __future__ import annotations

import asyncio
import json
import sys

import httpx2
from typesafe_sdk import (
    AsyncTypeSafeClient,
    Choice,
    Noul,
    RetryPolicy,
    Score,
    TypeSafeAuthenticationError,
    TypeSafeClient,
    __version__,
)

STATE = "The customer was charged twice and asks for the extra payment back."
QUESTIONS = {
    "team": Choice(instructions="Which team should handle this request?",
                   criteria={"billing": "Payments and refunds", "delivery": {"handles": ["shipping", "returns"]}}),
    "urgency": Score(instructions="Rate the priority.", criteria=["Low", "Medium", "High"]),
    "refund_requested": Noul(instructions="Is the customer asking for a refund?",
                             criteria={"true": "A refund is asked for"}),
}


def answered(result) -> dict:
    return {"version": __version__, "model": result.model, "request_id": result.request_id,
            "body": result.raw_http_response.json(),
            "typed": {"team": result.choices["team"].choice, "urgency": result.scores["urgency"].score,
                      "refund_requested": result.nouls["refund_requested"].noul}}


def main(url: str, token: str, model: str, action: str) -> dict:
    if action == "models":
        with TypeSafeClient(api_key=token, base_url=url, timeout=120) as client:
            return {"version": __version__, "names": [entry.name for entry in client.models.list().models]}
    if action == "sync":
        with TypeSafeClient(api_key=token, base_url=url, model=model, timeout=120) as client:
            return answered(client.system_one(STATE, QUESTIONS))
    if action == "async":
        async def ask():
            async with AsyncTypeSafeClient(api_key=token, base_url=url, model=model, timeout=120) as client:
                return await client.system_one(STATE, QUESTIONS)
        return answered(asyncio.run(ask()))
    if action == "retry":
        statuses: list[int] = []
        http = httpx2.Client(event_hooks={"response": [lambda response: statuses.append(response.status_code)]},
                             timeout=120)
        retry = RetryPolicy(max_retries=8, backoff_initial=0.1, timeout=30)
        with TypeSafeClient(api_key=token, base_url=url, model=model, http_client=http, retry=retry) as client:
            result = client.system_one(STATE, {"team": QUESTIONS["team"]})
        return {"version": __version__, "statuses": statuses, "choice": result.choices["team"].choice}
    if action == "wrong_key":
        with TypeSafeClient(api_key="wrong-key", base_url=url, timeout=30) as client:
            try:
                client.models.list()
            except TypeSafeAuthenticationError as exc:
                return {"version": __version__, "status": exc.status, "body": exc.body}
        return {"version": __version__, "status": None}
    raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:5])))
