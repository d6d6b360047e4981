"""A client TLS connection over a plain TCP transport, through OpenSSL memory BIOs fed and
drained one TLS record's worth at a time: the candidate `bench.tls_memory` measures against
uvloop's TLS transport. A peer written to measure, not the proxy's transport.

Why it was tried: uvloop gives every TLS connection a 256 KiB read buffer of its own
(SSL_READ_MAX_SIZE, sslproto.pyx) and writes each read whole into the incoming memory BIO,
whose OpenSSL buffer never shrinks, so a connection that once received a large answer keeps
~550 KiB resident until it closes; through this layer ~49 KiB (`python -m bench.tls_memory`).

Why it is not the partition transport's: wired in as such (b5d19f3, reverted), the proxy
answered nothing, not even /readyz, for most of a reconnect storm: `python -m bench.fleet
--kubelets 1000 --sides proxy --duration 20` had the restarted proxy ready after 46-54 s
against 8 s with uvloop's TLS (all kubelets back after 46-54 s against 49 s), and in the soak
replica B was not ready for 102-134 s after each restart (docs/benchmarks.md, "TLS buffers").
Where that time went is not measured yet.

The TCP transport reads into one buffer per process; the bytes go into the incoming BIO
FEED_BYTES at a time, and the plaintext is taken out after each slice into a second buffer and
handed to the protocol as a memoryview (valid until `data_received` returns). Writes go through
the SSL object WRITE_BYTES at a time, all the records of one `write` sent in one `writelines`.
`pause_reading` stops both the TCP reads and the decryption; the ciphertext of the read in
progress waits, copied, until `resume_reading`, which delivers from the next turn of the loop
(as asyncio's transports do).

Shapes: `TLSConnection(context, server_hostname, app, loop)` is the TCP protocol
(`loop.create_connection(lambda: tls, sock=sock)`) and, to `app`, its transport. `await
tls.handshake` gives "" once the handshake is done and `app.connection_made` was called, or
the reason it failed (text); the TCP connection is aborted when it fails.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

# bytes: what one TCP read takes at most (uvloop's own SSL_READ_MAX_SIZE)
READ_BYTES = 256 * 1024


# bytes of ciphertext written into the incoming BIO at once: a whole TLS record (16 KiB of
# plaintext plus its header and tag, RFC 8446 section 5.2), so a record is decrypted as soon as
# it is complete and the BIO never holds more than about two.
FEED_BYTES = 16 * 1024 + 256
# bytes of plaintext handed to the SSL object per SSL_write: one record's worth; the outgoing
# BIO holds at most one record before it is read out.
WRITE_BYTES = 16 * 1024
# bytes of the per-thread plaintext buffer: what one `data_received` carries at most (four
# records: fewer calls into the HTTP parser than one per record, and no larger than needed).
PLAIN_BYTES = 64 * 1024

# one of each per process: the protocols use them only inside one callback
_READ = memoryview(bytearray(READ_BYTES))
_PLAIN = memoryview(bytearray(PLAIN_BYTES))

class TLSConnection(asyncio.BufferedProtocol):
    """One client TLS connection: the TCP transport's protocol, and `app`'s transport (module
    docstring)."""

    __slots__ = ("_app", "_tcp", "_ssl", "_incoming", "_outgoing", "handshake", "_backlog", "_paused", "_ready", "_closing", "_error", "_loop")

    def __init__(self, context: ssl.SSLContext, server_hostname: str | None, app: asyncio.BaseProtocol,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._app: Any = app  # an asyncio.Protocol (data_received) or BufferedProtocol-with-data_received
        self._tcp: asyncio.Transport | None = None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname)
        self.handshake: asyncio.Future[str] = loop.create_future()
        self._backlog = b""  # ciphertext received while the reader was paused, not yet fed
        self._paused = False  # the app paused reading
        self._ready = False  # the handshake is done and app.connection_made was called
        self._closing = False
        self._error = ""  # the TLS error that made this side abort, for app.connection_lost

    # -- the TCP transport's protocol --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._tcp = transport  # type: ignore[assignment]
        self._shake()

    def get_buffer(self, sizehint: int) -> memoryview:
        return _READ

    def buffer_updated(self, nbytes: int) -> None:
        data = _READ[:nbytes]
        if self._paused or self._backlog:
            self._backlog += data  # a copy: the buffer is the next read's
            return
        self._feed(data)

    def eof_received(self) -> bool | None:
        if not self._ready:
            self._failed("the partition closed the connection during the TLS handshake")
            return False
        return self._app.eof_received()  # type: ignore[no-any-return]

    def connection_lost(self, exc: Exception | None) -> None:
        self._tcp = None
        self._closing = True
        if not self.handshake.done():
            self.handshake.set_result(f"connection lost during the TLS handshake: {exc}" if exc else
                                      "connection closed during the TLS handshake")
        if self._ready:
            self._ready = False
            self._app.connection_lost(exc if exc is not None or not self._error else ConnectionResetError(self._error))

    def pause_writing(self) -> None:
        if self._ready:
            self._app.pause_writing()

    def resume_writing(self) -> None:
        if self._ready:
            self._app.resume_writing()

    # -- the app's transport ------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt `data` and send it (all its records in one write). Ignored once closing, as
        asyncio's transports do."""
        tcp = self._tcp
        if tcp is None or self._closing or not data:
            return
        if len(data) <= WRITE_BYTES:  # a request's head, a small body: one record, one write
            try:
                self._ssl.write(data)
            except ssl.SSLError as exc:
                self._abort_with(exc)
                return
            tcp.write(self._outgoing.read())
            return
        view = memoryview(data)
        records = []
        try:
            for start in range(0, len(view), WRITE_BYTES):
                self._ssl.write(view[start: start + WRITE_BYTES])
                records.append(self._outgoing.read())
        except ssl.SSLError as exc:
            self._abort_with(exc)
            return
        if len(records) == 1:
            tcp.write(records[0])
        else:
            tcp.writelines(records)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def pause_reading(self) -> None:
        if not self._paused:
            self._paused = True
            if self._tcp is not None:
                self._tcp.pause_reading()

    def resume_reading(self) -> None:
        """Go on reading, from the next turn of the loop (as asyncio's transports do: the
        caller, inside its reader, expects no `data_received` before it returns)."""
        if not self._paused:
            return
        self._paused = False
        self._loop.call_soon(self._resumed)

    def _resumed(self) -> None:
        if self._paused or self._tcp is None:
            return  # paused again, or closed, before this turn
        if self._backlog:
            backlog, self._backlog = self._backlog, b""
            self._feed(memoryview(backlog))
        elif self._ready:
            self._deliver()  # records decrypted into the SSL object before the pause
        if not self._paused and self._tcp is not None:
            self._tcp.resume_reading()

    def is_closing(self) -> bool:
        return self._closing or self._tcp is None or self._tcp.is_closing()

    def close(self) -> None:
        """Close without a close_notify (the partition treats both alike) once written out."""
        self._closing = True
        if self._tcp is not None:
            self._tcp.close()

    def abort(self) -> None:
        self._closing = True
        if self._tcp is not None:
            self._tcp.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self._ssl
        if name == "peercert":
            return self._ssl.getpeercert()
        if name == "cipher":
            return self._ssl.cipher()
        return self._tcp.get_extra_info(name, default) if self._tcp is not None else default

    # -- inside -------------------------------------------------------------------------------

    def _feed(self, data: memoryview) -> None:
        """Put `data` (ciphertext) into the incoming BIO a record at a time, decrypting and
        delivering after each; what is left when the reader pauses waits in the backlog."""
        offset, size = 0, len(data)
        while offset < size:
            if self._paused:
                self._backlog = bytes(data[offset:])
                return
            self._incoming.write(data[offset: offset + FEED_BYTES])
            offset += FEED_BYTES
            if not self._ready:
                if not self._shake():
                    if self._tcp is None or self._closing:
                        return
                    continue
            self._deliver()
            if self._tcp is None:
                return

    def _shake(self) -> bool:
        """One step of the handshake; True once it is done (the app then has its transport)."""
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return False
        except (ssl.SSLError, OSError) as exc:
            self._flush()
            self._failed(f"TLS handshake: {type(exc).__name__}: {exc}")
            return False
        self._flush()
        self._ready = True
        self._app.connection_made(self)
        if not self.handshake.done():
            self.handshake.set_result("")
        return True

    def _failed(self, why: str) -> None:
        if not self.handshake.done():
            self.handshake.set_result(why)
        self.abort()

    def _deliver(self) -> None:
        """Decrypt what the incoming BIO holds and hand it to the app, PLAIN_BYTES at a time,
        until the SSL object wants more ciphertext or the app pauses."""
        buffer = _PLAIN
        tls, incoming = self._ssl, self._incoming
        while self._ready and not self._paused:
            filled, eof, failure = 0, False, None
            try:
                while filled < PLAIN_BYTES:
                    n: int = tls.read(PLAIN_BYTES - filled, buffer[filled:])  # type: ignore[assignment]  # a count, given a buffer
                    if n == 0:
                        eof = True  # close_notify
                        break
                    filled += n
                    if not incoming.pending and not tls.pending():
                        break  # nothing left to decrypt: spare the read that would say so by raising
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError as exc:
                failure = exc
            if filled:
                self._app.data_received(buffer[:filled])
            if failure is not None:
                self._abort_with(failure)
                return
            if eof:
                if self._ready and not self._app.eof_received():
                    self.close()
                return
            if filled < PLAIN_BYTES:
                break
        self._flush()  # what reading produced (a TLS 1.3 KeyUpdate answer)

    def _flush(self) -> None:
        if self._outgoing.pending and self._tcp is not None:
            self._tcp.write(self._outgoing.read())

    def _abort_with(self, exc: BaseException) -> None:
        """A TLS error after the handshake: the connection cannot go on."""
        self._error = f"TLS: {type(exc).__name__}: {exc}"
        self._closing = True
        if self._tcp is not None:
            self._tcp.abort()
