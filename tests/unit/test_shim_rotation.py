"""Token rotation: API_TOKEN_NEXT is accepted beside API_TOKEN, under the same rules, both compared in constant
time (shim/edge/tokens.py, shim/settings.py)."""
from __future__ import annotations

import hmac

import pytest
from starlette.datastructures import Headers

from shim.edge.tokens import AcceptedTokens, bearer_matches
from shim.settings import ShimSettings

from .fake_model import FakeModel
from .shim_helpers import TOKEN, client_for, decide_body

pytestmark = pytest.mark.anyio
NEXT = "the-next-token-for-tests-0123456789abcdef"
KEY = "triton-key-for-tests-0123456789abcd"


def settings(**env: str) -> ShimSettings:
    return ShimSettings.from_env({"INTERN_DECISION_API_TOKEN": TOKEN, "INTERN_DECISION_TRITON_API_KEY": KEY,
                                  **{f"INTERN_DECISION_{name}": value for name, value in env.items()}})


def test_no_next_token_by_default_and_one_set_is_read():
    assert settings().api_token_next is None
    assert settings(API_TOKEN_NEXT=NEXT).api_token_next == NEXT
    assert NEXT not in repr(settings(API_TOKEN_NEXT=NEXT))


@pytest.mark.parametrize("value", ["n" * 31, "n" * 31 + " ", "n" * 31 + "é", "n" * 16 + "\n" + "n" * 16])
def test_the_next_token_has_the_same_rules(value):
    with pytest.raises(ValueError, match="INTERN_DECISION_API_TOKEN_NEXT") as refused:
        settings(API_TOKEN_NEXT=value)
    assert value not in str(refused.value)


@pytest.mark.parametrize("value", [TOKEN, KEY])
def test_the_next_token_differs_from_the_token_and_tritons_key(value):
    with pytest.raises(ValueError, match="API_TOKEN_NEXT must differ"):
        settings(API_TOKEN_NEXT=value)


def test_both_tokens_match_and_nothing_else_does():
    tokens = AcceptedTokens(TOKEN, NEXT)
    assert not AcceptedTokens(TOKEN).match(NEXT.encode()) and not AcceptedTokens(TOKEN, "").match(b"")
    for token in (TOKEN, NEXT):
        assert bearer_matches(Headers(raw=[(b"authorization", b"Bearer " + token.encode())]), tokens)
    for wrong in (TOKEN[:-1], NEXT + "x", "", TOKEN + NEXT):
        assert not bearer_matches(Headers(raw=[(b"authorization", b"Bearer " + wrong.encode())]), tokens)
    assert not bearer_matches(Headers(raw=[(b"authorization", b"Bearer " + TOKEN.encode()),
                                           (b"authorization", b"Bearer " + NEXT.encode())]), tokens)


def test_both_tokens_are_compared_every_time(monkeypatch):
    compared = []
    compare = hmac.compare_digest

    def recording(a, b):
        compared.append(b)
        return compare(a, b)

    monkeypatch.setattr("shim.edge.tokens.hmac.compare_digest", recording)
    tokens = AcceptedTokens(TOKEN, NEXT)
    assert tokens.match(TOKEN.encode())  # the first matches: the second is compared all the same
    assert tokens.match(b"wrong") is False
    assert compared == [TOKEN.encode(), NEXT.encode()] * 2


async def test_the_app_accepts_either_token_and_refuses_others():
    async with client_for(FakeModel(base={"approve": 1.0}), api_token_next=NEXT) as client:
        for token in (TOKEN, NEXT):
            answer = await client.post("/decide", json=decide_body(), headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == 200, answer.text
        refused = await client.post("/decide", json=decide_body(), headers={"Authorization": "Bearer " + "x" * 40})
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"


async def test_without_a_next_token_only_the_token_is_accepted():
    async with client_for(FakeModel(base={"approve": 1.0})) as client:
        answer = await client.post("/decide", json=decide_body(), headers={"Authorization": f"Bearer {NEXT}"})
        assert answer.status_code == 401
