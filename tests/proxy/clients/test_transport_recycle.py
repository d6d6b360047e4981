"""The partition transport closes, at the end of its answer, a connection that ever read more than
`proxy.clients.transport.RECYCLE_AFTER_READ` bytes at once, instead of pooling it: the TLS layer
keeps buffers as large as that read for the connection's life. Small answers keep their
connection. The peer is a local aiohttp server counting the connections it saw (it stands in for
a transport, not for kube-apiserver)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.clients.transport import RECYCLE_AFTER_READ, Endpoint, largest_reads

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
LARGE = 1 << 20  # bytes: a LIST page's size, several reads of more than RECYCLE_AFTER_READ on loopback
MEDIUM = 8 * 1024  # bytes: a Node's status PATCH answer (a kwok Node: ~2.5 KB in JSON; real ones with images, more)


async def start(aiohttp_server: ServerFactory) -> tuple[set[object], Endpoint]:
    peers: set[object] = set()

    async def handle(request: web.Request) -> web.StreamResponse:
        peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        if request.path == "/medium":  # a Node's or a Pod's status PATCH answer
            return web.Response(body=b"m" * MEDIUM)
        if request.path == "/large":
            return web.Response(body=b"x" * LARGE)
        if request.path == "/large-stream":  # chunked, as a watch or a streamed LIST
            response = web.StreamResponse()
            await response.prepare(request)
            for _ in range(4):
                await response.write(b"y" * (LARGE // 4))
            await response.write_eof()
            return response
        return web.Response(body=b"small")

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    server = await aiohttp_server(app)
    return peers, Endpoint(server.host, server.port, None, connect_timeout=1.0, tick=0.05)


async def get(endpoint: Endpoint, path: str, *, stream: bool = False) -> bytes:
    head = f"GET {path} HTTP/1.1\r\nHost: peer\r\n\r\n".encode()
    exchange = await endpoint.exchange(head, None, head_timeout=5.0, total_timeout=None if stream else 5.0,
                                       inactivity=5.0 if stream else None, replayable=True)
    try:
        if not stream:
            return await exchange.read()
        return b"".join([chunk async for chunk in exchange.chunks()])
    finally:
        exchange.finish()


async def test_small_answers_keep_reusing_one_connection(aiohttp_server: ServerFactory) -> None:
    peers, endpoint = await start(aiohttp_server)
    try:
        for _ in range(5):
            assert await get(endpoint, "/small") == b"small"
        assert len(peers) == 1 and endpoint.idle_connections == 1
    finally:
        endpoint.close()


async def test_a_connection_that_read_a_large_answer_is_closed_and_the_next_request_opens_another(
        aiohttp_server: ServerFactory) -> None:
    assert LARGE > RECYCLE_AFTER_READ
    peers, endpoint = await start(aiohttp_server)
    try:
        assert await get(endpoint, "/small") == b"small"
        assert len(await get(endpoint, "/large")) == LARGE  # on the pooled connection: it read large
        assert endpoint.idle_connections == 0 and endpoint.connections == 0
        assert await get(endpoint, "/small") == b"small"
        assert len(peers) == 2 and endpoint.idle_connections == 1
    finally:
        endpoint.close()


async def test_a_stream_that_carried_large_reads_is_closed_at_its_end(aiohttp_server: ServerFactory) -> None:
    peers, endpoint = await start(aiohttp_server)
    try:
        assert len(await get(endpoint, "/large-stream", stream=True)) == LARGE
        assert endpoint.idle_connections == 0 and endpoint.connections == 0
        assert await get(endpoint, "/small") == b"small"
        assert len(peers) == 2
    finally:
        endpoint.close()


async def test_answers_that_fit_one_tls_record_keep_their_connection_and_the_reads_are_counted(
        aiohttp_server: ServerFactory) -> None:
    assert MEDIUM < RECYCLE_AFTER_READ
    peers, endpoint = await start(aiohttp_server)
    recycled = largest_reads()["recycled"]
    try:
        for _ in range(3):
            assert len(await get(endpoint, "/medium")) == MEDIUM
        assert len(peers) == 1 and endpoint.idle_connections == 1
        reads = largest_reads()
        assert reads["<=16KiB"] >= 1 and reads["recycled"] == recycled  # the pooled one read up to 8 KiB + headers
        assert len(await get(endpoint, "/large")) == LARGE
        assert largest_reads()["recycled"] == recycled + 1 and endpoint.connections == 0
    finally:
        endpoint.close()
