"""The private parts of uvicorn that shim/server/bounded_connection.py relies on, checked against the uvicorn installed:
when an upgrade moves one, this fails naming it, before any bound silently stops holding. uvicorn is pinned to one
version everywhere (pyproject.toml's shim extra, constraints/cpu.txt, constraints/shim-image.txt)."""
from __future__ import annotations

import asyncio
import logging
import re
import tomllib
from collections import deque
from pathlib import Path

import pytest
import uvicorn
from uvicorn.protocols.http import httptools_impl
from uvicorn.server import ServerState

ROOT = Path(__file__).resolve().parents[2]
# The protocol's callbacks it overrides and calls up to: each must still be uvicorn's.
OVERRIDDEN = ("connection_made", "connection_lost", "data_received", "on_message_begin", "on_url", "on_header",
              "on_headers_complete", "on_body", "on_message_complete", "on_response_complete", "send_400_response")


def pins() -> dict[str, str]:
    """Where uvicorn's version is written, and what each says."""
    found = {}
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["shim"]
    found["pyproject.toml [shim]"] = next(item for item in extra if re.match(r"uvicorn\b", item))
    for name in ("constraints/cpu.txt", "constraints/shim-image.txt"):
        found[name] = next(line for line in (ROOT / name).read_text().splitlines() if re.match(r"uvicorn\b", line))
    return found


def test_uvicorn_is_pinned_to_one_version_everywhere_and_that_version_is_installed():
    written = pins()
    assert set(written.values()) == {f"uvicorn=={uvicorn.__version__}"}, (
        f"uvicorn {uvicorn.__version__} is installed; the pins say {written}: the protocol subclasses uvicorn's "
        f"private httptools internals, so move every pin together and rerun this test")


def test_the_httptools_protocol_still_has_the_callbacks_the_bounded_protocol_overrides():
    missing = [name for name in OVERRIDDEN if not callable(getattr(httptools_impl.HttpToolsProtocol, name, None))]
    assert missing == [], f"uvicorn's HttpToolsProtocol no longer has {missing}: shim/server/bounded_connection.py " \
                          f"overrides them"
    assert hasattr(ServerState(), "connections"), "uvicorn.server.ServerState moved"


class _Transport(asyncio.Transport):
    def __init__(self):
        super().__init__()
        self.closing = False

    def get_extra_info(self, name, default=None):
        return {"peername": ("10.0.0.1", 4000), "sockname": ("127.0.0.1", 8080)}.get(name, default)

    def is_closing(self):
        return self.closing

    def write(self, data):
        pass

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def close(self):
        self.closing = True


@pytest.mark.anyio
async def test_the_private_state_the_bounded_protocol_reads_is_where_it_reads_it():
    """cycle (its response_complete, response_started, disconnected, message_event), pipeline, parser
    (get_method), url, app, client and logger: read after a request's headers, as the protocol reads them."""
    async def app(scope, receive, send):
        await asyncio.Event().wait()

    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    protocol = httptools_impl.HttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    protocol.connection_made(_Transport())
    protocol.data_received(b"GET /health?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        read = {
            "client": protocol.client == ("10.0.0.1", 4000),
            "app": protocol.app is not None,
            "url": getattr(protocol, "url", None) == b"/health?x=1",
            "parser.get_method": protocol.parser.get_method() == b"GET",
            "pipeline": isinstance(protocol.pipeline, deque),
            "logger": isinstance(getattr(protocol, "logger", None), logging.Logger),
            "cycle.response_complete": getattr(protocol.cycle, "response_complete", None) is False,
            "cycle.response_started": getattr(protocol.cycle, "response_started", None) is False,
            "cycle.disconnected": getattr(protocol.cycle, "disconnected", None) is False,
            "cycle.message_event": isinstance(getattr(protocol.cycle, "message_event", None), asyncio.Event),
        }
        assert [name for name, ok in read.items() if not ok] == [], \
            "uvicorn's HttpToolsProtocol keeps these elsewhere now: shim/server/bounded_connection.py reads them"
    finally:
        protocol.connection_lost(None)
