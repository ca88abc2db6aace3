"""python -m tests.unit.balancer_ipv6: run in a network namespace of its own (`unshare -rn`), whose loopback holds
the documentation addresses below. HAProxy rendered from the production template listens on one of them with a share
of CONNECTIONS connections per source, in front of a stand-in server that answers 200; one address holds CONNECTIONS
kept-alive connections (each answered once, so HAProxy has counted it), then another address of the same /64 and an
address of another /64 connect once each. Prints, as JSON, which of the two were refused as they connected (closed
without an answer)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from devstack.haproxy import haproxy_binary, renderer
from tests.raw_http import HEALTH, read_response

CONNECTIONS = 4
LISTEN = "2001:db8::1"
PORT = 8443
HOLDER, SAME_64, OTHER_64, READINESS = "2001:db8::10", "2001:db8::11", "2001:db8:0:1::10", "2001:db8:0:2::10"
ADDRESSES = (LISTEN, HOLDER, SAME_64, OTHER_64, READINESS)


class Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (the standard library's name)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def connect(source: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.bind((source, 0))
    sock.connect((LISTEN, PORT))
    return sock


def refused_as_it_connects(source: str) -> bool:
    try:
        sock = connect(source)
    except ConnectionResetError:
        return True
    with sock:
        received = b""
        try:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: balancer\r\nConnection: close\r\n\r\n")
            while chunk := sock.recv(65536):
                received += chunk
        except (BrokenPipeError, ConnectionResetError):
            pass
        return received == b""


def held(source: str) -> socket.socket:
    """A kept-alive connection HAProxy has answered once, so surely counted."""
    sock = connect(source)
    sock.sendall(HEALTH)
    if not read_response(sock).startswith(b"HTTP/1.1 200"):
        raise RuntimeError("the stand-in server was not reached")
    return sock


def wait_serving(deadline: float) -> None:
    while True:
        try:
            held(READINESS).close()
            return
        except (OSError, RuntimeError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main() -> int:
    for address in ADDRESSES:
        subprocess.run(["ip", "-6", "addr", "add", f"{address}/64", "dev", "lo", "nodad"], check=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    folder = Path(tempfile.mkdtemp())
    config = folder / "haproxy.cfg"
    config.write_text(renderer().haproxy_config([("shim", f"127.0.0.1:{server.server_address[1]}")],
                                                f"{LISTEN}:{PORT}", per_source_connections=CONNECTIONS,
                                                log_to_stdout=False))
    haproxy = subprocess.Popen([haproxy_binary(), "-db", "-f", str(config)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    holders: list[socket.socket] = []
    try:
        wait_serving(time.monotonic() + 20)
        holders = [held(HOLDER) for _ in range(CONNECTIONS)]
        result = {"same_64_refused": refused_as_it_connects(SAME_64),
                  "other_64_refused": refused_as_it_connects(OTHER_64)}
    finally:
        for sock in holders:
            sock.close()
        haproxy.terminate()
        haproxy.wait(10)
        server.shutdown()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
