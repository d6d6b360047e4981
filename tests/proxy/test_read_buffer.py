"""proxy.read_buffer: TLS reads through one buffer per thread. A protocol behind `BufferedReads`
gets every byte in order, as bytes of its own (the buffer is reused by the next read), and
uvloop's TLS transport really reads into the buffer (no 256 KiB bytes object per read)."""

from __future__ import annotations

import asyncio
import ssl
import threading
from pathlib import Path

import pytest
import uvloop

from hack.pki import CertificateAuthority
from proxy.read_buffer import READ_BUFFER_SIZE, BufferedReads, read_buffer


class _Inner(asyncio.Protocol):
    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.calls: list[str] = []
        self.transport: asyncio.BaseTransport | None = None
        self.done = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.calls.append("made")

    def data_received(self, data: bytes) -> None:
        self.received.append(data)

    def eof_received(self) -> bool:
        self.calls.append("eof")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.calls.append("lost")
        self.done.set()

    def pause_writing(self) -> None:
        self.calls.append("pause")

    def resume_writing(self) -> None:
        self.calls.append("resume")


def test_each_read_reaches_the_inner_protocol_as_bytes_of_its_own() -> None:
    inner = _Inner()
    reads = BufferedReads(inner)
    buffer = reads.get_buffer(-1)
    assert len(buffer) == READ_BUFFER_SIZE
    buffer[:5] = b"hello"
    reads.buffer_updated(5)
    buffer[:5] = b"XXXXX"  # the next read reuses the buffer
    reads.buffer_updated(3)
    assert inner.received == [b"hello", b"XXX"]
    assert all(type(chunk) is bytes for chunk in inner.received)


def test_the_rest_of_the_protocol_is_the_inner_ones() -> None:
    inner = _Inner()
    reads = BufferedReads(inner)
    reads.connection_made(object())  # type: ignore[arg-type]
    reads.pause_writing()
    reads.resume_writing()
    assert reads.eof_received() is False
    reads.connection_lost(None)
    assert inner.calls == ["made", "pause", "resume", "eof", "lost"]


def test_one_buffer_per_thread() -> None:
    mine = read_buffer()
    theirs: list[memoryview] = []
    thread = threading.Thread(target=lambda: theirs.append(read_buffer()))
    thread.start()
    thread.join()
    assert read_buffer() is mine
    assert theirs[0] is not mine and theirs[0].obj is not mine.obj


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = CertificateAuthority.create(tmp_path, "read-buffer-test-ca")
    crt, key = ca.issue_serving(tmp_path, "server", ["127.0.0.1"])
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(str(crt), str(key))
    client = ssl.create_default_context(cafile=str(ca.cert_file))
    return server, client


def test_uvloop_tls_reads_go_through_the_buffer(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    """A client sends 1 MiB in pieces over TLS; the server's protocol behind BufferedReads gets
    all of it, in order, and uvloop asked it for a buffer (its buffered read path)."""
    server_ctx, client_ctx = tls
    payload = bytes(range(256)) * 4096  # 1 MiB: more than one buffer's worth
    asked: list[int] = []

    class Counting(BufferedReads):
        __slots__ = ()

        def get_buffer(self, sizehint: int) -> memoryview:
            asked.append(sizehint)
            return super().get_buffer(sizehint)

    async def main() -> _Inner:
        inner = _Inner()
        server = await asyncio.get_running_loop().create_server(lambda: Counting(inner), "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="127.0.0.1")
        for start in range(0, len(payload), 100_000):
            writer.write(payload[start : start + 100_000])
            await writer.drain()
        writer.close()
        await asyncio.wait_for(inner.done.wait(), 10)
        server.close()
        await server.wait_closed()
        return inner

    inner = uvloop.run(main())
    assert b"".join(inner.received) == payload
    assert asked, "uvloop never asked for a buffer: the copying read path was used"
