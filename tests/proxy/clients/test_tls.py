"""proxy.clients.tls through the partition transport, against a local aiohttp server over TLS (it
stands in for a TLS peer, not for kube-apiserver): large answers and bodies arrive whole and in
order, a slow reader back-pressures without losing a byte, the incoming memory BIO is fed a
record at a time, and a failed handshake is a ConnectFailed naming why."""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import uvloop
from aiohttp import web

from hack.pki import CertificateAuthority
from proxy.clients.tls import TLSConnection
from proxy.clients.transport import ConnectFailed, Endpoint

BIG = bytes(range(256)) * 16384  # 4 MiB: many reads, many records
RECORD = 16 * 1024 + 256  # bytes: the largest TLS record, its header and tag (RFC 8446 section 5.2)


@pytest.fixture
def contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext, ssl.SSLContext]:
    """(server context for 127.0.0.1, server context for another name, client context)."""
    ca = CertificateAuthority.create(tmp_path, "tls-test-ca")
    crt, key = ca.issue_serving(tmp_path, "server", ["127.0.0.1"])
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(str(crt), str(key))
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other_crt, other_key = ca.issue_serving(other_dir, "other", ["elsewhere.example"])
    other = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    other.load_cert_chain(str(other_crt), str(other_key))
    client = ssl.create_default_context(cafile=str(ca.cert_file))
    return server, other, client


async def _handle(request: web.Request) -> web.StreamResponse:
    if request.method == "PUT":
        body = await request.read()
        return web.Response(text=f"{len(body)} {hashlib.sha256(body).hexdigest()}")
    if request.path == "/stream":
        response = web.StreamResponse()
        await response.prepare(request)
        for start in range(0, len(BIG), 100_000):
            await response.write(BIG[start: start + 100_000])
        return response
    return web.Response(body=BIG)


def _run(server_context: ssl.SSLContext, client_context: ssl.SSLContext,
         test: Callable[[Endpoint], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        app = web.Application(client_max_size=16 * 2**20)
        app.router.add_route("*", "/{tail:.*}", _handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        endpoint = Endpoint("127.0.0.1", port, client_context, connect_timeout=5.0, tick=0.05)
        try:
            return await test(endpoint)
        finally:
            endpoint.close()
            await runner.cleanup()

    return uvloop.run(main())


def _head(method: str, path: str, length: int | None = None) -> bytes:
    extra = f"Content-Length: {length}\r\n" if length is not None else ""
    return f"{method} {path} HTTP/1.1\r\nHost: peer\r\n{extra}\r\n".encode()


def test_a_large_answer_and_a_large_body_arrive_whole(contexts: tuple[ssl.SSLContext, ...]) -> None:
    server, _, client = contexts
    body = bytes(reversed(BIG))[: 3 * 2**20 + 7]

    async def test(endpoint: Endpoint) -> tuple[bytes, bytes, int]:
        got = await endpoint.exchange(_head("GET", "/big"), None, head_timeout=5, total_timeout=30, inactivity=None, replayable=True)
        answer = await got.read()
        got.finish()
        put = await endpoint.exchange(_head("PUT", "/x", len(body)), body, head_timeout=5, total_timeout=30,
                                      inactivity=None, replayable=False)
        echoed = await put.read()
        put.finish()
        return answer, echoed, len(endpoint._open)

    answer, echoed, connections = _run(server, client, test)
    assert answer == BIG
    assert echoed.decode() == f"{len(body)} {hashlib.sha256(body).hexdigest()}"
    assert connections == 1  # the PUT reused the GET's connection


def test_a_slow_reader_pauses_the_connection_and_loses_nothing(
    contexts: tuple[ssl.SSLContext, ...], monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, _, client = contexts
    pauses: list[int] = []
    original = TLSConnection.pause_reading

    def counting(self: TLSConnection) -> None:
        pauses.append(1)
        original(self)

    monkeypatch.setattr(TLSConnection, "pause_reading", counting)

    async def test(endpoint: Endpoint) -> bytes:
        got = await endpoint.exchange(_head("GET", "/stream"), None, head_timeout=5, total_timeout=None, inactivity=10,
                                      replayable=True)
        parts = []
        async for chunk in got.chunks():
            parts.append(chunk)
            await asyncio.sleep(0.02)  # slower than the peer writes: the body piles up
        got.finish()
        return b"".join(parts)

    assert _run(server, client, test) == BIG
    assert pauses, "the reader never fell behind: the test did not exercise back-pressure"


def test_the_incoming_bio_is_fed_a_record_at_a_time(
    contexts: tuple[ssl.SSLContext, ...], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before each decryption the incoming BIO holds at most a record being fed plus the
    incomplete one before it; uvloop's own TLS transport writes whole reads (up to 256 KiB)."""
    server, _, client = contexts
    most = [0]
    original = TLSConnection._deliver

    def measuring(self: TLSConnection) -> None:
        most[0] = max(most[0], self._incoming.pending)
        original(self)

    monkeypatch.setattr(TLSConnection, "_deliver", measuring)

    async def test(endpoint: Endpoint) -> bytes:
        got = await endpoint.exchange(_head("GET", "/big"), None, head_timeout=5, total_timeout=30, inactivity=None, replayable=True)
        data = await got.read()
        got.finish()
        return data

    assert _run(server, client, test) == BIG
    assert 0 < most[0] <= 2 * RECORD


def test_a_certificate_for_another_name_fails_the_connect(contexts: tuple[ssl.SSLContext, ...]) -> None:
    _, other, client = contexts

    async def test(endpoint: Endpoint) -> str:
        with pytest.raises(ConnectFailed) as failed:
            await endpoint.exchange(_head("GET", "/big"), None, head_timeout=5, total_timeout=30, inactivity=None, replayable=True)
        assert not endpoint._open
        return str(failed.value)

    why = _run(other, client, test)
    assert "TLS handshake" in why and "CERTIFICATE_VERIFY_FAILED" in why


def test_a_peer_that_is_no_tls_server_fails_the_connect(contexts: tuple[ssl.SSLContext, ...]) -> None:
    _, _, client = contexts

    async def main() -> str:
        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(10)
            writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            writer.close()

        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        endpoint = Endpoint("127.0.0.1", port, client, connect_timeout=5.0, tick=0.05)
        try:
            with pytest.raises(ConnectFailed) as failed:
                await endpoint.exchange(_head("GET", "/"), None, head_timeout=5, total_timeout=5, inactivity=None, replayable=True)
            return str(failed.value)
        finally:
            endpoint.close()
            server.close()
            await server.wait_closed()

    assert "TLS" in uvloop.run(main())
