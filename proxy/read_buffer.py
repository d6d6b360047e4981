"""TLS reads into one buffer per thread, instead of a new 256 KiB bytes object per read.

uvloop's TLS transport hands a plain `asyncio.Protocol` its bytes by decrypting into a new bytes
object of SSL_READ_MAX_SIZE (256 KiB; sslproto.pyx, `_do_read__copied`) and shrinking it to what
was read. With glibc's mmap threshold fixed at 128 KiB (`proxy.allocator`), every such read is
an mmap, an mremap and a munmap: 9 % of the proxy's CPU per Lease renewal over HTTP/1.1
(`python -m bench.where_cpu_goes --op renew-lease --client-protocol http/1.1`, py-spy native
frames under `SSLObject.read`). A `BufferedProtocol` is read into the buffer its `get_buffer`
offers (`_do_read__buffered`), with no allocation.

uvloop (and asyncio's selector loop) calls `get_buffer` and then `buffer_updated` back to back,
with no other callback between, and every protocol here consumes the bytes (parses or copies
them) before `buffer_updated` returns; so one buffer serves every connection of a thread's
event loop.
"""

from __future__ import annotations

import asyncio
import threading

# bytes: uvloop's SSL_READ_MAX_SIZE, the most one TLS read decrypts; a smaller buffer only
# splits a large read into several turns of the loop
READ_BUFFER_SIZE = 256 * 1024

_local = threading.local()


def read_buffer() -> memoryview:
    """This thread's read buffer (READ_BUFFER_SIZE bytes, made on first use): for
    `get_buffer`, its contents valid only until `buffer_updated` returns."""
    try:
        return _local.buffer  # type: ignore[no-any-return]
    except AttributeError:
        _local.buffer = memoryview(bytearray(READ_BUFFER_SIZE))
        return _local.buffer  # type: ignore[no-any-return]


class BufferedReads(asyncio.BufferedProtocol):
    """`inner` (a protocol taking bytes by `data_received`) read through this thread's read
    buffer: each read reaches `inner` as one bytes copy of what was read (a few hundred bytes
    for a request, where the transport would allocate 256 KiB). Everything else is `inner`'s."""

    __slots__ = ("inner", "_buffer")

    def __init__(self, inner: asyncio.Protocol) -> None:
        self.inner = inner
        self._buffer = read_buffer()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.inner.data_received(self._buffer[:nbytes].tobytes())

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()
