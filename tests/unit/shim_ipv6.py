"""python -m tests.unit.shim_ipv6: run in a network namespace of its own (`unshare -rn`), whose loopback holds the
documentation addresses below. The shim's bounded server listens on one of them with a share of SHARE connections per
source; one address holds SHARE heads still arriving, then another address of the same /64 and an address of another
/64 each send a request. Prints, as JSON, the status each got."""
from __future__ import annotations

import json
import socket
import subprocess
import threading
import time

import uvicorn

from shim import server
from tests.raw_http import read_until_closed_or

SHARE = 2
LISTEN = "2001:db8::1"
HOLDER, SAME_64, OTHER_64 = "2001:db8::10", "2001:db8::11", "2001:db8:0:1::10"


async def ok(scope, receive, send):
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


def connect(source: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.bind((source, 0))
    sock.connect((LISTEN, port))
    return sock


def status(source: str, port: int) -> int:
    with connect(source, port) as sock:
        sock.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        return int(read_until_closed_or(sock, 12, seconds=3).split(b" ")[1])


def main() -> None:
    for address in (LISTEN, HOLDER, SAME_64, OTHER_64):
        subprocess.run(["ip", "-6", "addr", "add", f"{address}/128", "dev", "lo", "nodad"], check=True)
    port = 8443
    limits = server.ConnectionLimits(header_seconds=10, max_connections=16, max_per_peer=SHARE)
    instance = server.BoundedServer(uvicorn.Config(ok, host=LISTEN, port=port, lifespan="off", log_level="warning"),
                                    limits)
    threading.Thread(target=instance.run, daemon=True).start()
    while not instance.started:
        time.sleep(0.02)
    held = [connect(HOLDER, port) for _ in range(SHARE)]
    for sock in held:
        sock.sendall(b"GET /x HTTP/1.1\r\n")  # a head still arriving: busy
    time.sleep(0.1)
    print(json.dumps({"same_64": status(SAME_64, port), "other_64": status(OTHER_64, port)}))
    instance.should_exit = True


if __name__ == "__main__":
    main()
