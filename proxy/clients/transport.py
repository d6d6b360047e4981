"""The partition transport: persistent HTTP/1.1 connections to one partition endpoint, a request
written in one write, the answer parsed by llhttp (httptools).

Owns, per endpoint: a pool of idle keep-alive connections (TLS, TCP keepalive; the most recent
reused first, each closed IDLE_SECONDS after its last answer, as Go's `IdleConnTimeout`, and
one that ever read more than RECYCLE_AFTER_READ at once closed at the end of its answer: the TLS
layer's buffers keep the largest read's size for the connection's life),
opening new ones when none is idle, and the wire exchange of one request at a time per
connection (no pipelining, as Go's net/http and aiohttp). Owns no policy: which endpoint, the circuit breaker,
what an error means to the caller, and the request's headers are `proxy.clients.partition`'s.

Slots: requests with a whole answer (everything but streams) hold one of
MAX_REQUESTS_PER_ENDPOINT slots from the send until the answer is read; beyond them a request
waits, first come first served, for a slot and the connection it frees (Go's
`Transport.MaxConnsPerHost`) instead of opening a connection it would close again. Without
them a reconnect storm (1,000 kubelets back on a restarted replica) opened ~900 TLS
connections to four partitions within 5 s for its SubjectAccessReviews. Streams (watches)
take an idle connection or a new one and hold no slot: they live for minutes.

Why not aiohttp's ClientSession (which this replaced): on this machine's 2 cores it spent
~0.08 ms of CPU per forwarded GET more than this module, most of it in building its request
(URL objects, header normalisation, the cookie jar, the tracing hooks) and its response
(`bench/transport_cpu.py` measures the three candidates the design allows: aiohttp's client,
this module, and pyreqwest; see `bench/README.md`). A connection here costs one Protocol, one
llhttp parser and its buffers.

Shapes:
- `Endpoint.exchange(head, body, ...)` sends `head` (the request line and headers, ending in a
  blank line, already encoded) and the body (bytes, in the same write; or an async iterator,
  sent chunked as it comes), and returns an `Exchange` once the answer's status and headers
  arrived. The body is read from the exchange whole (`read`) or as it arrives (`chunks`).
- Deadlines (seconds): `connect` for the TCP and TLS handshakes; `head` until the answer's
  headers; then either `total` (from the send until the answer is read whole) or `inactivity`
  (a stream: no byte for that long breaks it).

Errors: `ConnectFailed` (nothing was sent: the next endpoint may take the request),
`TimedOut` (a deadline passed, waiting for a slot included), `ConnectionBroke` (reset, closed
or malformed before or during the answer). All are `OSError`s, so a caller that catches
OSError catches every transport failure.
"""

from __future__ import annotations

import asyncio
import bisect
import socket
import ssl
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import cast

import httptools

from proxy.read_buffer import read_buffer

# TCP keepalive of every connection: a peer that vanished without a reset (host down, network
# cut) is noticed after IDLE + INTERVAL x COUNT seconds even on a silent watch.
# seconds idle before the first probe; 30 s is well under kube-apiserver's 60 s bookmark period.
_KEEPALIVE_IDLE = 30
# seconds between probes, and probes without an answer before the connection is dropped.
_KEEPALIVE_INTERVAL = 10
_KEEPALIVE_COUNT = 3
# bytes of an answer's body received but not yet taken by its reader before the connection
# stops reading (TCP backpressure to the partition); a watch burst of a few hundred events.
# asyncio's StreamReader pauses at 2 x 64 KiB; a kube-apiserver LIST chunk is up to 500 items.
_READ_HIGH_WATER = 256 * 1024
# idle connections kept per endpoint: enough for the proxy's concurrency towards one partition
# (client-go keeps 25 per host, `MaxIdleConnsPerHost`); beyond it a released connection closes.
MAX_IDLE_PER_ENDPOINT = 64
# seconds an idle connection may wait for its next request: below kube-apiserver's own idle
# timeout (90 s, `IdleTimeout` in k8s.io/apiserver/pkg/server/secure_serving.go), so the proxy
# never reuses a connection the partition is closing at that moment.
IDLE_SECONDS = 60.0
# bytes: a connection that once read more than this in one read is closed when its answer ends
# instead of going back to the pool. uvloop's TLS transport keeps, for a connection's life, a
# 256 KiB read buffer resident as far as its largest read touched it and an incoming memory BIO
# as large as that read (`python -m bench.tls_memory`: 552 KiB resident per connection after a
# 1 MiB answer, 38 KiB after a 2 KB one). A pooled connection that once carried a LIST page or a
# burst of watch events kept that for as long as requests reused it, which under steady load is
# until the partition restarts: replica A's RSS in the hour's soak crept up between a partition's
# restarts and fell by 8-16 MiB at most of them (docs/benchmarks.md, "The creep between partition
# restarts"). 16 KiB is one full TLS record (RFC 8446 section 5.1): a Lease renewal's, a
# SubjectAccessReview's or a status PATCH's answer fits in it, so those connections stay pooled,
# and what costs more to answer (a LIST page, a watch's burst) pays one TLS handshake (~0.9 ms of
# CPU, bench/results/tls_handshake.json). It was 64 KiB until the 60-minute soak at 5d3ff32 read
# ~120 KiB of C heap per upstream connection kept by replica A (its bytes in use fell and rose with
# the connections open) while its Python objects stayed flat (/debug/memory?census):
# docs/benchmarks.md, "The C heap's creep at 1,000 kubelets". It lowered that level, not the creep.
RECYCLE_AFTER_READ = 16 * 1024
# requests with a whole answer in flight per endpoint (see the module docstring): equal to the
# idle connections kept, so every connection a burst opens is kept for the next burst; at
# ~10 ms per answer it carries ~6,000 requests a second to one partition, above what a
# kube-apiserver on this machine's 2 cores answers.
MAX_REQUESTS_PER_ENDPOINT = MAX_IDLE_PER_ENDPOINT


_NEVER = float("inf")


class _NoCallbacks:
    """The callbacks of `_CLOSED_PARSER`: none."""


# The parser a closed connection keeps in place of its own (which calls back into it): never fed.
_CLOSED_PARSER = httptools.HttpResponseParser(_NoCallbacks())

# Every connection object of this process, open or closed, until it is freed (weak: holds none
# alive). Next to the connections open, it tells a connection kept after it closed, whose TLS
# state (OpenSSL's, outside Python's allocator) nothing else would show; /debug/memory reports it.
_ALIVE: weakref.WeakSet[_Connection] = weakref.WeakSet()


def connections_alive() -> int:
    """Connection objects of this process not yet freed: those open, and closed ones something
    still references (their TLS state with them)."""
    return len(_ALIVE)


class _Recycled:
    """Connections closed at the end of an answer because a read of their life was larger than
    RECYCLE_AFTER_READ, since the process started: each cost a TLS handshake to replace."""

    count = 0


# bytes: upper bounds of the classes `largest_reads` counts connections in (the last: above all)
_READ_CLASSES = (4 * 1024, RECYCLE_AFTER_READ, 64 * 1024)
_READ_CLASS_NAMES = (*(f"<={b // 1024}KiB" for b in _READ_CLASSES), f">{_READ_CLASSES[-1] // 1024}KiB")


def largest_reads() -> dict[str, int]:
    """How much the open connections of this process ever read at once (what their TLS layer's
    buffers keep: RECYCLE_AFTER_READ): {"<=4KiB", "<=16KiB", "<=64KiB", ">64KiB": connections
    whose largest read falls in that class, "recycled": connections closed so far for a read
    above RECYCLE_AFTER_READ}."""
    counts = dict.fromkeys(_READ_CLASS_NAMES, 0)
    for conn in list(_ALIVE):
        if not conn.closed:
            counts[_READ_CLASS_NAMES[bisect.bisect_left(_READ_CLASSES, conn.largest_read)]] += 1
    return {**counts, "recycled": _Recycled.count}

RawHeaders = list[tuple[bytes, bytes]]  # an answer's header fields as received: (name, value)


class TransportError(OSError):
    """A transport failure (base class)."""


class ConnectFailed(TransportError):
    """The connection could not be made (refused, unreachable, TLS handshake, connect deadline):
    nothing of the request was sent."""


class ConnectionBroke(TransportError):
    """The connection was reset or closed, or the answer was malformed, before the answer ended."""


class TimedOut(TransportError):
    """A deadline passed: no answer's headers (or, for a whole answer, not all of it) in time."""


class InactivityTimeout(TimedOut):
    """A stream sent no byte for longer than its inactivity timeout."""


class _Connection(asyncio.BufferedProtocol):
    """One keep-alive connection and the answer it is receiving (the parser's callbacks). Read
    through the thread's read buffer (`proxy.read_buffer`): llhttp parses the bytes in place and
    copies out only headers and body."""

    __slots__ = (
        "_endpoint", "_parser", "_buffer", "transport", "closed", "_headers", "head", "_chunks", "_buffered", "_waiter",
        "complete", "error", "keep_alive", "_paused", "_drain", "deadline", "_why", "_last_read", "_inactivity", "idle_since", "loop",
        "slot", "largest_read", "__weakref__",
    )

    def __init__(self, endpoint: Endpoint, loop: asyncio.AbstractEventLoop) -> None:
        self._endpoint = endpoint
        self.loop = loop
        self._parser = httptools.HttpResponseParser(self)
        self._buffer = read_buffer()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._headers: list[tuple[bytes, bytes]] = []
        self.head: asyncio.Future[tuple[int, RawHeaders]] | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self.complete = False
        self.error: BaseException | None = None
        self.keep_alive = False
        self._paused = False
        self._drain: asyncio.Future[None] | None = None
        self.deadline = _NEVER  # loop time by which the answer (or its headers) must have come
        self._why = ""  # what passing the deadline means, for the error
        self._last_read = 0.0
        self._inactivity = 0.0
        self.idle_since = 0.0  # loop time it went back to its pool
        self.slot = False  # it carries a request holding one of its endpoint's slots
        self.largest_read = 0  # bytes: the most one read brought (RECYCLE_AFTER_READ)
        _ALIVE.add(self)

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TLS transport is no asyncio.Transport subclass

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        if nbytes > self.largest_read:
            self.largest_read = nbytes
        self.data_received(self._buffer[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        if self._inactivity:
            self._last_read = self.loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionBroke(f"malformed answer: {exc}"))
        except httptools.HttpParserUpgrade:
            self._fail(ConnectionBroke("the partition upgraded the connection"))

    def eof_received(self) -> bool:
        return False  # close the transport: a half-closed connection carries nothing more

    def connection_lost(self, exc: Exception | None) -> None:
        # closed by the partition (not by `abort`), and not after an answer that said it would
        # close: idle in the pool, or before its answer ended
        by_peer = not self.closed and not (self.complete and not self.keep_alive)
        self.closed = True
        self._endpoint.forget(self)
        if not self.complete and (self.head is not None or self._waiter is not None):
            self._fail(ConnectionBroke(f"connection closed: {exc}" if exc else "connection closed by the partition"))
        if self._drain is not None and not self._drain.done():
            self._drain.set_exception(ConnectionBroke("connection closed while sending"))
        # The parser and the transport both point back here: let go of them, so a closed
        # connection (and its TLS state) is freed by reference counting, not by the next full
        # collection, which proxy.loop_health defers up to FROZEN_SWEEP_SECONDS.
        self.transport = None
        self._parser = _CLOSED_PARSER
        if by_peer:
            self._endpoint.peer_closed()

    def pause_writing(self) -> None:
        self._drain = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    # -- llhttp callbacks (httptools) --------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        raw, self._headers = self._headers, []
        head = self.head
        if head is not None and not head.done():
            head.set_result((self._parser.get_status_code(), raw))

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _READ_HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self._parser.should_keep_alive()  # llhttp forgets it once the message ends
        self.deadline = _NEVER
        self._wake()

    # -- the exchange ------------------------------------------------------------------------

    def begin(self, *, head_timeout: float) -> asyncio.Future[tuple[int, RawHeaders]]:
        """Reset for a new request; the future of its answer's status and headers."""
        loop = self.loop
        self.complete = False
        self.error = None
        self.keep_alive = False
        self._chunks.clear()
        self._buffered = 0
        self._inactivity = 0.0
        self.head = loop.create_future()
        self.deadline, self._why = loop.time() + head_timeout, "no answer within its deadline"
        self._endpoint.busy(self)
        return self.head

    def answering(self, *, total_deadline: float | None, inactivity: float | None) -> None:
        """The headers arrived: from now on the body's deadline (loop time) or inactivity timeout."""
        self.deadline = _NEVER
        if self.complete:
            return
        if total_deadline is not None:
            self.deadline, self._why = total_deadline, "the answer did not end within its deadline"
        elif inactivity is not None:
            self._inactivity = inactivity
            self._last_read = self.loop.time()

    def check(self, now: float) -> None:
        """Fail the answer if its deadline passed or its stream went silent (the endpoint's
        sweep calls this every tick while the connection is busy)."""
        if self.complete or self.closed:
            return
        if now >= self.deadline:
            self._fail(TimedOut(self._why))
        elif self._inactivity and now - self._last_read >= self._inactivity:
            self._fail(InactivityTimeout(f"no byte for {self._inactivity:g} s"))

    def _fail(self, error: BaseException) -> None:
        """The answer cannot go on: wake its reader with `error`, drop the connection."""
        if self.error is None:
            self.error = error
        head = self.head
        if head is not None and not head.done():
            head.set_exception(error)
        self._wake()
        self.abort()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def take(self) -> bytes:
        """The body bytes received and not yet taken ("" when none), resuming reading."""
        if not self._chunks:
            return b""
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def wait(self) -> None:
        """Until more body bytes, the answer's end or a failure."""
        if self._chunks or self.complete or self.error is not None:
            return
        self._waiter = self.loop.create_future()
        await self._waiter

    async def drain(self) -> None:
        if self._drain is not None:
            await self._drain

    def finish(self) -> None:
        """The caller is done with the answer: the connection goes back to its endpoint's pool if
        the answer ended cleanly and may be followed by another, and no read of its life was
        larger than RECYCLE_AFTER_READ; else it is closed."""
        self._endpoint.idle(self)
        self.head = None
        self._waiter = None
        if (self.complete and self.keep_alive and self.error is None and not self.closed
                and self.largest_read <= RECYCLE_AFTER_READ):
            self._chunks.clear()
            self._buffered = 0
            if self._paused and self.transport is not None:
                self._paused = False
                self.transport.resume_reading()
            if self.slot:
                self.slot = False
                self._endpoint.free_slot(self)
            else:
                self._endpoint.release(self)
        else:
            if self.largest_read > RECYCLE_AFTER_READ and not self.closed:
                _Recycled.count += 1
            self.abort()

    def abort(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.abort()
        self._endpoint.forget(self)  # also when already lost: a request begun on it marked it busy
        if self.slot:
            self.slot = False
            self._endpoint.free_slot(None)


class Exchange:
    """One request's answer on a connection: `status`, `raw_headers` (name and value bytes as
    received, in order), the body whole (`read`) or as it arrives (`chunks`). `finish` (always,
    exactly once) gives the connection back or drops it; `abort` drops it (a stream its caller
    stops reading early)."""

    __slots__ = ("status", "raw_headers", "_conn")

    def __init__(self, conn: _Connection, status: int, raw_headers: RawHeaders) -> None:
        self._conn = conn
        self.status = status
        self.raw_headers = raw_headers

    async def read(self) -> bytes:
        """The whole body. Raises TransportError."""
        conn = self._conn
        parts: list[bytes] = []
        while True:
            if conn.error is not None:
                raise conn.error
            data = conn.take()
            if data:
                parts.append(data)
            if conn.complete:
                break
            await conn.wait()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body in the pieces that arrived since the last one. Ends at the end of the body;
        raises TransportError (InactivityTimeout for a silent stream)."""
        conn = self._conn
        while True:
            if conn.error is not None:
                raise conn.error
            data = conn.take()
            if data:
                yield data
                continue
            if conn.complete:
                return
            await conn.wait()

    def finish(self) -> None:
        self._conn.finish()
        self._conn.error = None  # raised to the caller, whose traceback holds a frame holding this connection

    def abort(self) -> None:
        self._conn.abort()
        self._conn.error = None


class Endpoint:
    """The connections to one kube-apiserver endpoint (module docstring). `ssl_context` is None
    for plain HTTP."""

    def __init__(self, host: str, port: int, ssl_context: ssl.SSLContext | None, *, connect_timeout: float, tick: float,
                 on_peer_closed: Callable[[], None] | None = None) -> None:
        """`tick`: seconds between two checks of the busy connections' deadlines (a deadline
        is noticed at most this late). `on_peer_closed`: called when the endpoint closes one of
        its connections while it waits in the pool or before its answer ended (a killed or
        restarting kube-apiserver closes them all), not when the proxy closes it or an answer
        said it would close."""
        self.host = host
        self.peer_closed: Callable[[], None] = on_peer_closed or _nothing
        self.port = port
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self.tick = tick
        self._idle: deque[_Connection] = deque()
        self._open: set[_Connection] = set()
        self._busy: set[_Connection] = set()
        self._sweep: asyncio.TimerHandle | None = None
        # closes idle connections IDLE_SECONDS after their last answer: reuse takes the most
        # recent (_take_idle), so without it the older ones of a burst are never looked at and
        # stay open until the partition's own idle timeout (the soak saw 46-72 connections to an
        # RP for 100-130 s after each fault on it). One timer per endpoint, armed for the oldest.
        self._reaper: asyncio.TimerHandle | None = None
        self._slots = 0  # slots held (MAX_REQUESTS_PER_ENDPOINT)
        # requests waiting for a slot, first come first served: each gets the connection the
        # request before it freed (None: none reusable, it takes an idle one or connects)
        self._waiting: deque[asyncio.Future[_Connection | None]] = deque()

    def busy(self, conn: _Connection) -> None:
        """`conn` carries a request: its deadlines are checked every tick until `idle`. One
        timer per endpoint instead of one per request (a timer costs ~2 us to arm and cancel)."""
        self._busy.add(conn)
        if self._sweep is None:
            self._sweep = conn.loop.call_later(self.tick, self._check_deadlines)

    def idle(self, conn: _Connection) -> None:
        self._busy.discard(conn)

    def _check_deadlines(self) -> None:
        self._sweep = None
        if not self._busy:
            return
        loop = next(iter(self._busy)).loop
        now = loop.time()
        for conn in tuple(self._busy):
            conn.check(now)
        if self._busy:
            self._sweep = loop.call_later(self.tick, self._check_deadlines)

    @property
    def connections(self) -> int:
        """Connections open now (idle and busy)."""
        return len(self._open)

    @property
    def idle_connections(self) -> int:
        """Connections open now waiting for their next request (at most MAX_IDLE_PER_ENDPOINT)."""
        return len(self._idle)

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot now."""
        return sum(not waiter.done() for waiter in self._waiting)

    async def _slot(self, timeout: float) -> _Connection | None:
        """Take a slot (waiting up to `timeout` seconds for one); the connection it comes with,
        if any. Raises TimedOut."""
        if self._slots < MAX_REQUESTS_PER_ENDPOINT:
            self._slots += 1
            return self._take_idle()
        waiter: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                conn = await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:  # handed a slot as it gave up: pass it on
                self.free_slot(waiter.result())
            if isinstance(exc, TimeoutError):
                raise TimedOut(f"no connection to the partition free within {timeout:g} s") from None
            raise
        if conn is not None and not (conn.closed or conn.transport is None or conn.transport.is_closing()):
            return conn
        return self._take_idle()

    def free_slot(self, conn: _Connection | None) -> None:
        """A request's answer ended: its slot, with its connection when that may carry another
        request, goes to the first waiting request, else back (the connection to the idle pool)."""
        waiting = self._waiting
        while waiting:
            waiter = waiting.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self._slots -= 1
        if conn is not None:
            self.release(conn)

    async def _connect(self) -> _Connection:
        """A new connection. Raises ConnectFailed."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
                # The last failure's text, not the exception: a frame holding the exception that
                # holds the frame (its traceback) is a cycle, one per refused connect.
                why = f"no address for {self.host}"
                for family, type_, proto, _, address in infos:
                    sock = socket.socket(family, type_, proto)
                    try:
                        sock.setblocking(False)
                        _keepalive(sock)
                        await loop.sock_connect(sock, address)
                    except OSError as exc:
                        sock.close()
                        why = f"{type(exc).__name__}: {exc}"
                        continue
                    break
                else:
                    raise ConnectFailed(why)
                _, conn = await loop.create_connection(
                    lambda: _Connection(self, loop), sock=sock, ssl=self.ssl_context,
                    server_hostname=self.host if self.ssl_context is not None else None,
                )
        except ConnectFailed:
            raise
        except TimeoutError:
            raise ConnectFailed(f"no connection within {self.connect_timeout:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from None
        self._open.add(conn)
        return conn

    async def exchange(
        self, head: bytes, body: bytes | AsyncIterator[bytes] | None, *, head_timeout: float,
        total_timeout: float | None, inactivity: float | None, replayable: bool,
    ) -> Exchange:
        """Send a request; its answer once the headers arrived (module docstring). `head` ends
        in the blank line; a chunked `head` (Transfer-Encoding) takes an iterator `body`. A
        request on a reused connection that broke before any answer is sent once more on a new
        connection when `replayable` (a read, or a body that can be sent again: the partition
        closed an idle connection as it was reused). Raises ConnectFailed, TimedOut,
        ConnectionBroke."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + total_timeout if total_timeout is not None else None
        whole = total_timeout is not None  # not a stream: it holds a slot
        for attempt in (0, 1):
            conn = await self._slot(head_timeout) if whole else self._take_idle()
            reused = conn is not None
            if conn is None:
                try:
                    conn = await self._connect()
                except BaseException:
                    if whole:
                        self.free_slot(None)
                    raise
            conn.slot = whole
            head_future = conn.begin(head_timeout=head_timeout)
            transport = conn.transport
            sender: asyncio.Task[None] | None = None
            try:
                if transport is None:  # lost between its handshake and this first request
                    raise ConnectionBroke("connection closed before the request was sent")
                if body is None or isinstance(body, bytes):
                    transport.write(head + body if body else head)
                else:
                    transport.write(head)
                    sender = loop.create_task(_send_chunked(conn, transport, body))
                status, raw_headers = await head_future
            except ConnectionBroke:
                conn.abort()
                if sender is not None:
                    sender.cancel()
                if reused and replayable and attempt == 0:
                    continue
                raise
            except BaseException:
                conn.abort()
                if sender is not None:
                    sender.cancel()
                raise
            conn.answering(total_deadline=deadline, inactivity=inactivity)
            return Exchange(conn, status, raw_headers)
        raise AssertionError("unreachable")  # pragma: no cover

    def _take_idle(self) -> _Connection | None:
        idle = self._idle
        while idle:
            conn = idle.pop()  # the most recently used: warm (the oldest are dropped below)
            if conn.closed or conn.transport is None or conn.transport.is_closing():
                continue
            if conn.loop.time() - conn.idle_since > IDLE_SECONDS:
                conn.abort()
                continue
            return conn
        return None

    def release(self, conn: _Connection) -> None:
        """A connection whose answer ended cleanly waits for the next request."""
        if len(self._idle) >= MAX_IDLE_PER_ENDPOINT:
            conn.abort()
            return
        conn.idle_since = conn.loop.time()
        self._idle.append(conn)
        if self._reaper is None:
            self._reaper = conn.loop.call_later(IDLE_SECONDS, self._reap)

    def _reap(self) -> None:
        """Close the idle connections idle for IDLE_SECONDS (the oldest are at the left: each
        is appended when released), and wake again when the next oldest is due."""
        self._reaper = None
        idle = self._idle
        while idle and (idle[0].closed or idle[0].loop.time() - idle[0].idle_since >= IDLE_SECONDS):
            idle.popleft().abort()
        if idle:
            oldest = idle[0]
            self._reaper = oldest.loop.call_later(max(oldest.idle_since + IDLE_SECONDS - oldest.loop.time(), 0.0),
                                                  self._reap)

    def forget(self, conn: _Connection) -> None:
        """A connection closed: it is no longer open, nor idle, nor busy."""
        self._open.discard(conn)
        self._busy.discard(conn)
        try:
            self._idle.remove(conn)
        except ValueError:
            pass

    def close(self) -> None:
        """Close every connection, idle or busy; a request waiting for a slot fails."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_exception(ConnectFailed("the partition's connections were closed"))
        for conn in tuple(self._open):
            conn.abort()
        self._idle.clear()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None


def _nothing() -> None:
    pass


async def _send_chunked(conn: _Connection, transport: asyncio.Transport, body: AsyncIterator[bytes]) -> None:
    """Send a streamed request body in chunked transfer coding, as it arrives."""
    try:
        async for chunk in body:
            if chunk:
                transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                await conn.drain()
        transport.write(b"0\r\n\r\n")
    except ConnectionBroke:
        pass  # the answer's reader learns of it
    except Exception as exc:  # the client's body broke: so does this request
        conn._fail(ConnectionBroke(f"request body broke: {type(exc).__name__}"))


def _keepalive(sock: socket.socket) -> None:
    """TCP keepalive on (see _KEEPALIVE_*), and no Nagle delay: a request goes out in one write."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for option, value in (("TCP_KEEPIDLE", _KEEPALIVE_IDLE), ("TCP_KEEPINTVL", _KEEPALIVE_INTERVAL), ("TCP_KEEPCNT", _KEEPALIVE_COUNT)):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
