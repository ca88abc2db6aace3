"""HTTP to the service and its metrics endpoint (standard library only)."""
from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

# Sent in place of a token to check that a wrong one is refused.
WRONG_TOKEN = "wrong-token-" + "x" * 40
NO_TOKEN = object()


@dataclass
class Reply:
    status: int | None  # None when no HTTP answer came back
    body: Any  # the parsed JSON, or None
    text: str
    seconds: float  # from sending the request to the end of the answer
    error: str | None = None  # the transport error, when status is None

    @property
    def error_code(self) -> str | None:
        """The envelope's error.code, when the body is {error: {code, message}}."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            code = self.body["error"].get("code")
            return code if isinstance(code, str) else None
        return None

    @property
    def is_envelope(self) -> bool:
        """The body is the error envelope {error: {code, message}} with both strings."""
        error = self.body.get("error") if isinstance(self.body, dict) else None
        return (isinstance(error, dict) and isinstance(error.get("code"), str)
                and isinstance(error.get("message"), str))

    def describe(self) -> str:
        if self.status is None:
            return f"no answer ({self.error})"
        detail = self.error_code or self.text[:200]
        return f"HTTP {self.status} {detail}".rstrip()


def _decode(raw: bytes) -> tuple[Any, str]:
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text), text
    except ValueError:
        return None, text


class Service:
    """The service at a base URL. Each thread keeps one keep-alive connection."""

    def __init__(self, url: str, token: str, timeout: float):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._token = token
        self.timeout = timeout
        self._local = threading.local()

    def _connect(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return kind(self._host, self._port, timeout=self.timeout)

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    def request(self, method: str, path: str, body: Any = None, token: Any = None,
                fresh_connection: bool = False) -> Reply:
        """token: None sends the configured bearer, NO_TOKEN sends none, a string sends that string."""
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        bearer = self._token if token is None else token
        if bearer is not NO_TOKEN:
            headers["Authorization"] = f"Bearer {bearer}"
        if fresh_connection:
            connection = self._connect()
            try:
                return self._exchange(connection, method, path, payload, headers)[0]
            finally:
                connection.close()
        connection = getattr(self._local, "connection", None)
        reused = connection is not None
        if connection is None:
            connection = self._local.connection = self._connect()
        reply, closing = self._exchange(connection, method, path, payload, headers)
        if reply.status is None and reused:
            # The server may have closed an idle keep-alive connection: one more try on a new one.
            self.close()
            connection = self._local.connection = self._connect()
            reply, closing = self._exchange(connection, method, path, payload, headers)
        if closing:
            self.close()
        return reply

    def _exchange(self, connection, method, path, payload, headers) -> tuple[Reply, bool]:
        """The reply, and whether this connection cannot be used again."""
        started = time.perf_counter()
        try:
            connection.request(method, self._prefix + path, body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            return Reply(None, None, "", time.perf_counter() - started, f"{type(exc).__name__}: {exc}"), True
        seconds = time.perf_counter() - started
        parsed, text = _decode(raw)
        return Reply(response.status, parsed, text, seconds), response.will_close

    def health(self) -> Reply:
        return self.request("GET", "/health", token=NO_TOKEN)

    def post(self, path: str, body: Any, **kwargs) -> Reply:
        return self.request("POST", path, body, **kwargs)


def fetch_text(url: str, timeout: float) -> str:
    """A GET that must answer 200, e.g. the metrics endpoint; raises OSError otherwise."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        raise OSError(f"{url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, http.client.HTTPException) as exc:
        raise OSError(f"{url}: {getattr(exc, 'reason', exc)}") from None
