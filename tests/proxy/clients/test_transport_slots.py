"""The partition transport's slots (`proxy.clients.transport.MAX_REQUESTS_PER_ENDPOINT`): a burst
of requests larger than the slots opens no more connections than there are slots, every request
is answered, waiting ones in arrival order, and a stream holds no slot. The peer is a local
aiohttp server that holds each answer until the test lets it go (it stands in for a transport,
not for kube-apiserver)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.clients import transport
from proxy.clients.transport import Endpoint, TimedOut

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
SLOTS = 4  # a small number of slots, so the test's bursts are short


class Peer:
    """A server that counts connections and holds every answer until `gate` is set."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.peers: set[object] = set()
        self.in_flight = 0
        self.most_in_flight = 0
        self.order: list[str] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        if request.path == "/watch":
            response = web.StreamResponse()
            await response.prepare(request)
            await response.write(b"{}\n")
            await asyncio.sleep(30)
            return response
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.gate.wait()
        finally:
            self.in_flight -= 1
        self.order.append(request.path)
        return web.Response(body=request.path.encode())


async def start(aiohttp_server: ServerFactory) -> tuple[Peer, Endpoint]:
    peer = Peer()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", peer.handle)
    server = await aiohttp_server(app)
    return peer, Endpoint(server.host, server.port, None, connect_timeout=1.0, tick=0.05)


def head(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: peer\r\n\r\n".encode()


async def get(endpoint: Endpoint, path: str, timeout: float = 5.0) -> bytes:
    exchange = await endpoint.exchange(head(path), None, head_timeout=timeout, total_timeout=timeout,
                                       inactivity=None, replayable=True)
    try:
        return await exchange.read()
    finally:
        exchange.finish()


async def fill_the_slots(peer: Peer, endpoint: Endpoint) -> list[asyncio.Task[bytes]]:
    """SLOTS requests the peer holds until its gate opens, once all of them reached it."""
    held = [asyncio.create_task(get(endpoint, f"/held{i}")) for i in range(SLOTS)]
    while peer.in_flight < SLOTS:
        await asyncio.sleep(0.01)
    return held


@pytest.fixture(autouse=True)
def few_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "MAX_REQUESTS_PER_ENDPOINT", SLOTS)


async def test_a_burst_larger_than_the_slots_opens_one_connection_per_slot_and_answers_every_request(aiohttp_server: ServerFactory) -> None:
    peer, endpoint = await start(aiohttp_server)
    try:
        tasks = [asyncio.create_task(get(endpoint, f"/r{i}")) for i in range(5 * SLOTS)]
        while peer.in_flight < SLOTS:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # had the transport opened more, the peer would hold them now
        assert peer.in_flight == SLOTS and endpoint.connections == SLOTS
        assert endpoint.waiting == 4 * SLOTS
        peer.gate.set()
        answers = await asyncio.gather(*tasks)
        assert answers == [f"/r{i}".encode() for i in range(5 * SLOTS)]
        assert peer.most_in_flight == SLOTS and len(peer.peers) == SLOTS
        assert peer.order[SLOTS:] == [f"/r{i}" for i in range(SLOTS, 5 * SLOTS)]  # the waiting ones in arrival order
        assert endpoint.waiting == 0 and endpoint._slots == 0
    finally:
        endpoint.close()


async def test_a_stream_holds_no_slot(aiohttp_server: ServerFactory) -> None:
    peer, endpoint = await start(aiohttp_server)
    streams = []
    try:
        for _ in range(SLOTS + 1):
            streams.append(await endpoint.exchange(head("/watch"), None, head_timeout=5.0, total_timeout=None,
                                                   inactivity=30.0, replayable=True))
        peer.gate.set()
        assert await get(endpoint, "/after-streams") == b"/after-streams"
    finally:
        for stream in streams:
            stream.abort()
        endpoint.close()


async def test_a_request_that_waits_longer_than_its_timeout_for_a_slot_times_out_and_gives_nothing_away(aiohttp_server: ServerFactory) -> None:
    peer, endpoint = await start(aiohttp_server)
    try:
        held = await fill_the_slots(peer, endpoint)
        with pytest.raises(TimedOut, match="no connection to the partition free"):
            await get(endpoint, "/late", timeout=0.1)
        peer.gate.set()
        await asyncio.gather(*held)
        assert endpoint._slots == 0
        assert await get(endpoint, "/again") == b"/again"  # the slots still serve
    finally:
        endpoint.close()


async def test_a_slot_freed_by_a_broken_answer_goes_to_the_next_request(aiohttp_server: ServerFactory) -> None:
    peer, endpoint = await start(aiohttp_server)
    try:
        held = await fill_the_slots(peer, endpoint)
        waiting = asyncio.create_task(get(endpoint, "/next"))
        await asyncio.sleep(0.05)
        held[0].cancel()  # its connection is dropped: the slot passes on without it
        peer.gate.set()
        assert await waiting == b"/next"
        await asyncio.gather(*held[1:])
        assert endpoint._slots == 0
    finally:
        endpoint.close()


async def test_closing_the_endpoint_fails_the_requests_waiting_for_a_slot(aiohttp_server: ServerFactory) -> None:
    peer, endpoint = await start(aiohttp_server)
    held = await fill_the_slots(peer, endpoint)
    waiting = asyncio.create_task(get(endpoint, "/waiting"))
    await asyncio.sleep(0.05)
    endpoint.close()
    with pytest.raises(transport.ConnectFailed, match="closed"):
        await waiting
    for task in held:  # their connections were closed under them
        with pytest.raises(transport.TransportError):
            await task


async def test_the_idle_connections_of_a_burst_close_after_idle_seconds_while_one_stays_in_use(
        aiohttp_server: ServerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a burst, steady traffic reuses the most recent idle connection; the others close
    IDLE_SECONDS after their last answer, not when the partition gets round to it."""
    monkeypatch.setattr(transport, "IDLE_SECONDS", 0.4)
    peer, endpoint = await start(aiohttp_server)
    try:
        held = await fill_the_slots(peer, endpoint)
        peer.gate.set()
        await asyncio.gather(*held)
        assert endpoint.connections == endpoint.idle_connections == SLOTS
        loop = asyncio.get_running_loop()
        end = loop.time() + 1.2
        while loop.time() < end:  # one request at a time: one connection is enough
            assert await get(endpoint, "/steady") == b"/steady"
            await asyncio.sleep(0.05)
        assert endpoint.connections == endpoint.idle_connections == 1
    finally:
        endpoint.close()
