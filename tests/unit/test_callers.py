"""Named callers (API_KEYS_FILE, shim/callers.py): the file read strictly at start-up, each key accepted beside
API_TOKEN and naming its caller, a key's share binding only while another caller waits, and the per-caller series."""
from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from shim.app import build_service
from shim.callers import DEFAULT_CALLER, MAX_KEYS, read_keys_file
from shim.edge.tokens import AcceptedTokens
from shim.metrics import ShimMetrics

from .asgi_exchange import RawRequest
from .fake_model import FakeModel
from .shim_helpers import AUTH, TOKEN, decide_body, make_settings

BATCH_TOKEN = "batch-token-0123456789abcdef0123456789"
WEB_TOKEN = "web-token-0123456789abcdef0123456789abc"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def keys_file(tmp_path, text: str) -> str:
    path = tmp_path / "keys.toml"
    path.write_text(text)
    return str(path)


KEYS = f"""
[[key]]
name = "batch"
sha256 = "{digest(BATCH_TOKEN)}"
share = 2

[[key]]
name = "web"
sha256 = "{digest(WEB_TOKEN)}"
"""


def test_the_keys_file_is_read_with_names_digests_and_shares(tmp_path):
    keys = read_keys_file(keys_file(tmp_path, KEYS), max_queue=32)
    assert [(key.name, key.sha256.hex(), key.share) for key in keys] == [
        ("batch", digest(BATCH_TOKEN), 2), ("web", digest(WEB_TOKEN), None)]
    assert read_keys_file("", max_queue=32) == ()


@pytest.mark.parametrize("text, says", [
    ("key = 1", "[[key]] tables"),
    ("[[key]]\nname = 'a'", "must have name and sha256"),
    (f"[[key]]\nname = 'A b'\nsha256 = '{'0' * 64}'", "name must be"),
    ("[[key]]\nname = 'a'\nsha256 = 'abc'", "64 lowercase hex"),
    (f"[[key]]\nname = 'a'\nsha256 = '{'0' * 64}'\nshare = 33", "share must be an integer from 1 to MAX_QUEUE"),
    (f"[[key]]\nname = 'a'\nsha256 = '{'0' * 64}'\nshare = true", "share must be"),
    (f"[[key]]\nname = 'a'\nsha256 = '{'0' * 64}'\nrole = 'x'", "nothing else"),
    (f"[[key]]\nname = 'a'\nsha256 = '{'0' * 64}'\n[[key]]\nname = 'a'\nsha256 = '{'1' * 64}'", "same name"),
    (f"[[key]]\nname = 'a'\nsha256 = '{'0' * 64}'\n[[key]]\nname = 'b'\nsha256 = '{'0' * 64}'", "same sha256"),
    (f"[[key]]\nname = '{DEFAULT_CALLER}'\nsha256 = '{'0' * 64}'", "API_TOKEN's"),
    ("[[key]\n", "cannot be read as TOML"),
    ("".join(f"[[key]]\nname = 'k{n}'\nsha256 = '{n:064x}'\n" for n in range(MAX_KEYS + 1)), "at most 64"),
])
def test_a_bad_keys_file_stops_the_start_naming_the_variable(tmp_path, text, says):
    with pytest.raises(ValueError, match="INTERN_DECISION_API_KEYS_FILE") as refused:
        make_settings(api_keys_file=keys_file(tmp_path, text))
    assert says in str(refused.value)


def test_a_missing_keys_file_stops_the_start(tmp_path):
    with pytest.raises(ValueError, match="API_KEYS_FILE .* cannot be read"):
        make_settings(api_keys_file=str(tmp_path / "absent.toml"))


def test_each_token_names_its_caller(tmp_path):
    tokens = AcceptedTokens(TOKEN, None, read_keys_file(keys_file(tmp_path, KEYS), max_queue=32))
    assert tokens.caller(TOKEN.encode()) == DEFAULT_CALLER
    assert tokens.caller(BATCH_TOKEN.encode()) == "batch" and tokens.caller(WEB_TOKEN.encode()) == "web"
    assert tokens.caller(BATCH_TOKEN[:-1].encode()) is None and not tokens.match(b"")


# -- a key's share, through the real app over a model held by a gate

def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def held_service(tmp_path, **env: str):
    model = FakeModel(base={"approve": 1.0})
    model.gate = asyncio.Event()
    metrics = ShimMetrics()
    service = build_service(make_settings(api_keys_file=keys_file(tmp_path, KEYS), **env), model, metrics)
    return service, model, metrics


def post(app, token: str, number: int) -> RawRequest:
    return RawRequest(app, "/decide", decide_body(id=f"d{number}", state={"n": number}), bearer(token)).start()


def queued(metrics: ShimMetrics) -> float:
    return metrics.registry.get_sample_value("intern_decision_shim_requests_queued")


async def until(condition, seconds: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


@pytest.mark.anyio
async def test_a_keys_share_binds_only_while_another_caller_waits(tmp_path):
    service, model, metrics = held_service(tmp_path, max_queue="8")
    alone = [post(service.app, BATCH_TOKEN, number) for number in range(4)]  # twice its share: nobody else waits
    await until(lambda: len(model.calls) == 1 and queued(metrics) == 3)
    web = post(service.app, WEB_TOKEN, 4)
    await until(lambda: queued(metrics) == 4)
    refused = post(service.app, BATCH_TOKEN, 5)
    await asyncio.wait_for(refused.task, 2)
    assert refused.status == 429
    message = json.loads(refused.sent[-1]["body"])["error"]["message"]
    assert "'batch'" in message and "its share" in message
    unshared = post(service.app, WEB_TOKEN, 6)  # web has no share: admitted while the queue has room
    await until(lambda: queued(metrics) == 5)
    model.gate.set()
    await asyncio.wait_for(asyncio.gather(*(request.task for request in [*alone, web, unshared])), 2)
    assert [request.status for request in [*alone, web, unshared]] == [200] * 6
    served = [call["state"]["n"] for call in model.calls]
    assert served == [0, 4, 1, 6, 2, 3]  # the callers in turn, each one's requests in order
    sample = metrics.registry.get_sample_value
    assert sample("intern_decision_shim_caller_requests_total", {"caller": "batch", "status": "200"}) == 4
    assert sample("intern_decision_shim_caller_requests_total", {"caller": "batch", "status": "429"}) == 1
    assert sample("intern_decision_shim_caller_requests_total", {"caller": "web", "status": "200"}) == 2


@pytest.mark.anyio
async def test_api_token_is_the_default_caller_beside_the_keys(tmp_path):
    service, model, metrics = held_service(tmp_path)
    model.gate.set()
    request = RawRequest(service.app, "/decide", decide_body(id="d"), AUTH).start()
    await asyncio.wait_for(request.task, 2)
    assert request.status == 200
    assert metrics.registry.get_sample_value("intern_decision_shim_caller_requests_total",
                                             {"caller": DEFAULT_CALLER, "status": "200"}) == 1
