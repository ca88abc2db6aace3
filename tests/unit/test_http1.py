"""The shim's HTTP/1.1 connection to Triton, against small asyncio servers."""
import asyncio

import pytest

from shim.port.http1 import Http1Connection


async def serve(handler):
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    return head, await reader.readexactly(length)


def answer(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body


def test_requests_reuse_one_kept_alive_connection_and_ask_for_no_compression():
    async def scenario():
        connections, heads = [], []

        async def handler(reader, writer):
            connections.append(writer)
            while True:
                try:
                    head, body = await read_request(reader)
                except asyncio.IncompleteReadError:
                    return
                heads.append(head)
                writer.write(answer(b"echo:" + body))
                await writer.drain()

        server, port = await serve(handler)
        connection = Http1Connection("127.0.0.1", port)
        first = await connection.request("POST", "/a", 5, b"one", {"X-Test": "1"})
        second = await connection.request("POST", "/b", 5, b"two")
        await connection.close()
        server.close()
        return first, second, connections, heads

    first, second, connections, heads = asyncio.run(scenario())
    assert (first.status, first.body, second.body) == (200, b"echo:one", b"echo:two")
    assert len(connections) == 1
    assert heads[0].startswith(b"POST /a HTTP/1.1\r\n") and b"X-Test: 1" in heads[0]
    assert not any(b"accept-encoding" in head.lower() for head in heads)


def test_an_idle_connection_the_server_closed_is_replaced_without_losing_the_request():
    async def scenario():
        served = []

        async def handler(reader, writer):
            head, body = await read_request(reader)
            served.append(body)
            writer.write(answer(body))
            await writer.drain()
            writer.close()  # the server closes after one answer without saying so

        server, port = await serve(handler)
        connection = Http1Connection("127.0.0.1", port)
        first = await connection.request("POST", "/", 5, b"one")
        await asyncio.sleep(0.05)
        second = await connection.request("POST", "/", 5, b"two")
        await connection.close()
        server.close()
        return first, second, served

    first, second, served = asyncio.run(scenario())
    assert (first.body, second.body, served) == (b"one", b"two", [b"one", b"two"])


def test_a_timeout_drops_the_connection_and_the_next_request_opens_a_new_one():
    async def scenario():
        count = 0

        async def handler(reader, writer):
            nonlocal count
            count += 1
            head, body = await read_request(reader)
            if body == b"slow":
                await asyncio.sleep(1)
            writer.write(answer(body))
            await writer.drain()

        server, port = await serve(handler)
        connection = Http1Connection("127.0.0.1", port)
        with pytest.raises(TimeoutError):
            await connection.request("POST", "/", 0.1, b"slow")
        after = await connection.request("POST", "/", 5, b"fast")
        await connection.close()
        server.close()
        return after, count

    after, count = asyncio.run(scenario())
    assert after.body == b"fast" and count == 2


def test_a_closed_port_is_an_os_error():
    async def scenario():
        server, port = await serve(lambda reader, writer: None)
        server.close()
        await server.wait_closed()
        await Http1Connection("127.0.0.1", port).request("GET", "/", 1)

    with pytest.raises(OSError):
        asyncio.run(scenario())
