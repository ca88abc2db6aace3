"""The request's framing (shim/edge/framing.py), in process: a response before the body was read closes the
connection, one after it does not; a Transfer-Encoding other than chunked alone is 501 in the envelope."""
from __future__ import annotations

import httpx
import pytest
from starlette.datastructures import Headers

from shim.app import create_app
from shim.edge.framing import has_body, transfer_codings

from .fake_model import FakeModel
from .shim_helpers import AUTH, decide_body, make_settings

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client():
    app = create_app(make_settings(max_queue="1"), FakeModel(base={"approve": 1.0}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim") as client:
        yield client


@pytest.mark.parametrize("headers, status", [({}, 401), ({**AUTH, "Content-Encoding": "br"}, 415)])
async def test_a_refusal_before_the_body_is_read_closes_the_connection(client, headers, status):
    response = await client.post("/decide", json=decide_body(), headers=headers)
    assert response.status_code == status and response.headers["connection"] == "close"
    assert "x-request-id" in response.headers


async def test_an_answer_after_the_whole_body_keeps_the_connection(client):
    response = await client.post("/decide", json=decide_body(), headers=AUTH)
    assert response.status_code == 200 and "connection" not in response.headers
    assert "connection" not in (await client.get("/health")).headers


@pytest.mark.parametrize("coding", ["gzip, chunked", "chunked, chunked", "deflate"])
async def test_a_transfer_encoding_other_than_chunked_alone_is_501(client, coding):
    response = await client.post("/decide", content=b"{}", headers={**AUTH, "Transfer-Encoding": coding})
    assert response.status_code == 501 and response.headers["connection"] == "close"
    assert response.json()["error"]["code"] == "unsupported_transfer_encoding"


def test_codings_and_bodies_read_from_the_headers():
    assert transfer_codings(Headers(raw=[(b"transfer-encoding", b"GZIP , chunked"), (b"x", b"y")])) == ["gzip",
                                                                                                        "chunked"]
    assert has_body(Headers(raw=[(b"content-length", b"12")])) and has_body(Headers(raw=[(b"transfer-encoding",
                                                                                          b"chunked")]))
    assert not has_body(Headers(raw=[(b"content-length", b"0")])) and not has_body(Headers(raw=[]))
