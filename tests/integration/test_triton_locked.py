"""Triton's ports, locked: its restricted APIs refuse a call without this run's key, over HTTP and gRPC, and take
it with the key; health, metadata and metrics stay open; every port listens on loopback only."""
from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from wire.ping import BODY, infer_path, pong_error
from wire.protocol import MODEL_NAME

pytestmark = pytest.mark.triton
ABSENT = "no_such_model"


@pytest.fixture(scope="module")
def triton_http(triton):
    with httpx.Client(base_url=f"http://{triton.http_url}", timeout=30) as client:
        yield client


def refused(response: httpx.Response) -> bool:
    return response.status_code == 403 and "This API is restricted" in response.text


@pytest.mark.parametrize("call", [
    ("POST", infer_path(MODEL_NAME), BODY),                       # inference
    ("POST", "/v2/repository/index", b"{}"),                     # model repository
    ("POST", f"/v2/repository/models/{ABSENT}/load", b"{}"),
    ("POST", f"/v2/repository/models/{MODEL_NAME}/unload", b"{}"),
    ("GET", "/v2/logging", b""),                                  # logging settings
    ("POST", "/v2/logging", b'{"log_verbose_level": 1}'),
    ("GET", f"/v2/models/{MODEL_NAME}/config", b""),               # model config
    ("GET", "/v2/models/stats", b""),                             # statistics
    ("GET", "/v2/systemsharedmemory/status", b""),                # shared memory
    ("GET", "/v2/trace/setting", b""),                            # trace
])
@pytest.mark.parametrize("key", [None, "wrong-key-0123456789abcdefghijklmnop"])
def test_restricted_apis_refuse_a_call_without_the_key(triton, triton_http, call, key):
    method, path, body = call
    headers = {} if key is None else {"triton-api-key": key}
    assert refused(triton_http.request(method, path, content=body, headers=headers))


def test_with_the_key_inference_logging_and_the_repository_answer(triton, triton_http):
    key = triton.key_header
    ping = triton_http.post(infer_path(MODEL_NAME), content=BODY, headers=key)
    assert pong_error(ping.status_code, ping.content) is None
    settings = triton_http.get("/v2/logging", headers=key)
    assert settings.status_code == 200 and "log_verbose_level" in settings.json()
    index = triton_http.post("/v2/repository/index", content=b"{}", headers=key)
    assert index.status_code == 200 and {"name": MODEL_NAME, "version": "1", "state": "READY"} in index.json()
    # Past the key, a load is Triton's to judge (a model it does not have), not refused for want of it.
    load = triton_http.post(f"/v2/repository/models/{ABSENT}/load", content=b"{}", headers=key)
    assert load.status_code != 200 and not refused(load)
    assert f"failed to load '{ABSENT}'" in load.json()["error"]


def test_health_metadata_and_metrics_stay_open(triton, triton_http):
    for path in ("/v2/health/live", "/v2/health/ready", f"/v2/models/{MODEL_NAME}/ready", f"/v2/models/{MODEL_NAME}",
                 "/v2"):
        assert triton_http.get(path).status_code == 200, path
    assert httpx.get(triton.metrics_url, timeout=10).status_code == 200


def test_grpc_refuses_without_the_key_and_answers_with_it(triton):
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{triton.ports.grpc}")
    try:
        for call in (lambda headers: client.get_model_repository_index(headers=headers),
                     lambda headers: client.get_log_settings(headers=headers),
                     lambda headers: client.unload_model(ABSENT, headers=headers)):
            with pytest.raises(InferenceServerException, match="This protocol is restricted"):
                call({})
            with pytest.raises(InferenceServerException, match="This protocol is restricted"):
                call({"triton-api-key": triton.api_key})  # gRPC wants the header under its own prefix
        grpc_key = {"triton-grpc-protocol-triton-api-key": triton.api_key}
        assert any(model.name == MODEL_NAME for model in client.get_model_repository_index(headers=grpc_key).models)
        assert client.is_model_ready(MODEL_NAME)  # health: open
    finally:
        client.close()


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a TCP socket listening on port (IPv4 and IPv6), from /proc/net."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


# 127.0.0.1, as the kernel writes it in /proc/net/tcp and, mapped into IPv6, in /proc/net/tcp6
LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F"}


def test_every_triton_port_listens_on_loopback_only(triton):
    for port in (triton.ports.http, triton.ports.grpc, triton.ports.metrics):
        addresses = listening_addresses(port)
        assert addresses and addresses <= LOOPBACK, (port, addresses)


def test_the_shim_scores_through_the_locked_triton(shim):
    body = {"id": "locked", "state": "A short state.", "question": "Proceed?",
            "options": [{"id": "yes", "description": "Do it."}, {"id": "no", "description": "Do not."}]}
    response = httpx.post(f"{shim.url}/decide", json=body, timeout=120,
                          headers={"Authorization": "Bearer integration-token-0123456789-abcdefghij"})
    assert response.status_code == 200, response.text
