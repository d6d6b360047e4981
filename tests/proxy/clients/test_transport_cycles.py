"""A connection the partition transport is done with, answered, broken, silent or refused, is
freed by reference counting: it leaves no reference cycle for the garbage collector, which
proxy.loop_health defers up to FROZEN_SWEEP_SECONDS (a closed connection's TLS state held that
long showed as a sawtooth in the soak's RSS). The peer is a local aiohttp server (it stands in
for a transport, not for kube-apiserver)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.clients.transport import ConnectFailed, ConnectionBroke, Endpoint, InactivityTimeout, connections_alive
from tests.cyclic_garbage import CyclicGarbage

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


async def _answer(request: web.Request) -> web.StreamResponse:
    return web.Response(body=b"{}")


async def _broken(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Length": "100"})
    await response.prepare(request)
    await response.write(b"{")
    assert request.transport is not None
    request.transport.close()  # the partition went away mid-answer
    return response


async def _silent(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    await response.write(b"{}\n")
    await asyncio.sleep(30)  # a watch with nothing to say
    return response


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def head(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: peer\r\n\r\n".encode()


async def test_answered_broken_silent_and_refused_connections_leave_no_cycles(aiohttp_server: ServerFactory) -> None:
    app = web.Application()
    app.router.add_get("/answer", _answer)
    app.router.add_get("/broken", _broken)
    app.router.add_get("/silent", _silent)
    server = await aiohttp_server(app)
    endpoint = Endpoint(server.host, server.port, None, connect_timeout=1.0, tick=0.05)
    with CyclicGarbage() as garbage:
        alive = connections_alive()  # after the collection that begins the block: earlier tests' garbage is gone
        exchange = await endpoint.exchange(head("/answer"), None, head_timeout=5, total_timeout=5, inactivity=None, replayable=True)
        assert await exchange.read() == b"{}"
        exchange.finish()

        exchange = await endpoint.exchange(head("/broken"), None, head_timeout=5, total_timeout=5, inactivity=None, replayable=True)
        with pytest.raises(ConnectionBroke):
            await exchange.read()
        exchange.finish()

        exchange = await endpoint.exchange(head("/silent"), None, head_timeout=5, total_timeout=None, inactivity=0.2, replayable=True)
        with pytest.raises(InactivityTimeout):
            async for _ in exchange.chunks():
                pass
        exchange.abort()

        refused = Endpoint(server.host, _closed_port(), None, connect_timeout=1.0, tick=0.05)
        with pytest.raises(ConnectFailed, match="ConnectionRefusedError"):
            await refused.exchange(head("/answer"), None, head_timeout=5, total_timeout=5, inactivity=None, replayable=True)

        endpoint.close()  # the idle connection of the first answer
        del exchange
        await asyncio.sleep(0.1)  # connection_lost of every closed connection
    assert not garbage.types & {"_Connection", "ConnectionRefusedError"}, garbage.types
    assert connections_alive() == alive  # the three connections made were freed, as /debug/memory counts them
