"""One raw ASGI request against an app, with a client that can go away: for what httpx's ASGI transport cannot do
(a disconnect while the request waits)."""
from __future__ import annotations

import asyncio
import json


class RawRequest:
    def __init__(self, app, path: str, body: dict, headers: dict[str, str], client: str = "127.0.0.1"):
        self.app = app
        self.scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                      "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
                      "root_path": "", "client": (client, 1), "server": ("shim", 80),
                      "headers": [(k.lower().encode(), v.encode()) for k, v in
                                  {"content-type": "application/json", **headers}.items()]}
        self._body = json.dumps(body).encode()
        self._sent_body = False
        self.leave = asyncio.Event()  # set: the client closes the connection
        self.sent: list[dict] = []
        self.task: asyncio.Task | None = None

    async def receive(self) -> dict:
        if not self._sent_body:
            self._sent_body = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    def start(self) -> "RawRequest":
        self.task = asyncio.create_task(self.app(self.scope, self.receive, self.send))
        return self

    @property
    def status(self) -> int | None:
        return next((m["status"] for m in self.sent if m["type"] == "http.response.start"), None)
