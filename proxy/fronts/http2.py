"""The HTTP/2 front: the project's own HTTP/2 framing (`proxy.fronts.http2_protocol`, sans I/O,
with HPACK in `proxy.fronts.http2_headers`) over asyncio's TLS transport, feeding the same
pipeline as the HTTP/1.1 front (`proxy.pipeline.chain.Pipeline`).

Every stream becomes one pipeline `Request` served by a task of its own; its answer goes back as
HEADERS and DATA frames, built once; the frames every stream queues in a loop turn leave in one
transport write. What a client-go process expects of kube-apiserver's Go server holds here too:
- **Streams**: SETTINGS_MAX_CONCURRENT_STREAMS is `http2.max_concurrent_streams` (100, as
  kube-apiserver: `--http2-max-streams-per-connection` unset, `pkg/server/secure_serving.go`);
  a stream beyond it is refused (REFUSED_STREAM) and client-go opens a second connection.
- **Flow control and backpressure, per stream**: a stream is written only as far as its window
  (and the connection's) allows; a stream whose window stays shut for `write_timeout` seconds
  (its reader does not read) is reset with RST_STREAM (CANCEL), never the whole connection.
  A request body has a window of 1 MiB per stream and is acknowledged (WINDOW_UPDATE) as the
  pipeline consumes it.
- **PING** is answered as soon as its frame is read (every read flushes): client-go closes a
  connection whose ping goes unanswered for 15 s (kubernetes#121793).
- **Shutdown**: `shutdown()` sends GOAWAY, refuses new streams (REFUSED_STREAM: the client
  retries them elsewhere), lets the open ones end (watches end at once, with END_STREAM), then
  closes the connection after the grace period.
- **Requests**: header fields are checked as RFC 9113 §8.2-8.3 asks (lower-case names, no
  connection-specific fields, pseudo-header fields first, once and complete, no CR, LF or NUL
  in values: nothing that could split the HTTP/1.1 request sent upstream passes); a malformed
  request is reset (PROTOCOL_ERROR) and the connection goes on.
- **Abuse**: header lists over `max_header_list_size` and more than 64 CONTINUATION frames per
  header block are refused (CVE-2024-27316 class), a frame announcing more than
  SETTINGS_MAX_FRAME_SIZE before its bytes are buffered; a client that resets streams faster
  than `_RESETS_PER_SECOND` (rapid reset, CVE-2023-44487) or whose unread output (ping or
  settings floods) passes `_MAX_UNREAD_OUTPUT` gets GOAWAY (ENHANCE_YOUR_CALM) and is
  disconnected; any protocol error gets GOAWAY with its code. Nothing a client sends makes the
  proxy buffer without bound or crash.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, cast
from urllib.parse import parse_qsl

from multidict import CIMultiDict, CIMultiDictProxy, MultiDict, MultiDictProxy

from proxy.fronts.deadlines import Deadlines
from proxy.fronts.http2_headers import AnswerEncoder
from proxy.fronts.http2_protocol import (
    DEFAULT_WINDOW,
    ConnectionTerminated,
    DataReceived,
    ErrorCode,
    ProtocolError,
    RequestReceived,
    ServerConnection,
    StreamClosed,
    StreamEnded,
    StreamReset,
    WindowOpened,
)
from proxy.messages import Answer, ClientGone, Headers, LineSource, NoBody, Outcome, Request, WebSocketChannel
from proxy.pipeline.chain import Pipeline

log = logging.getLogger("partition_proxy.http2")

# stream resets per second a client may cause on average, and in a burst (a token bucket). A
# client-go process resets a stream when a request's context is cancelled before its answer: a
# handful per second. Rapid-reset attackers send thousands.
_RESETS_PER_SECOND = 100.0
_RESET_BURST = 200.0
# bytes of output a client may leave unread (queued in the transport) before it is disconnected:
# a stalled client, or a flood of PINGs/SETTINGS whose ACKs it never reads. 4 MiB is 4 kubelet
# watch bursts; flow control keeps DATA for one stream far below it.
_MAX_UNREAD_OUTPUT = 4 * 1024 * 1024
# bytes; each stream's receive window (request bodies), as Go's server: 1 MiB (http2 initialWindowSize
# for a server: `http2.Server.MaxUploadBufferPerStream` default). The connection's is as large
# again on top of the 65,535 bytes every connection starts with.
_STREAM_WINDOW = 1024 * 1024
# lines a pushed stream (a watch served from a cache) keeps while its window is shut before it is
# reset: a cache watcher's queue (proxy.cache.cache_watcher.DEFAULT_QUEUE_SIZE).
_MAX_PUSHED_LINES = 1000
# the decoded query of a request without one (read-only, so shared)
_NO_QUERY: MultiDictProxy[str] = MultiDictProxy(MultiDict())


class _Body:
    """A stream's request body as DATA frames arrive; each chunk is acknowledged (WINDOW_UPDATE)
    when the pipeline takes it, so a client sends no faster than the proxy forwards."""

    __slots__ = ("_chunks", "_ended", "_arrived", "_ack")

    def __init__(self, ack: Callable[[int], None]) -> None:
        self._chunks: deque[tuple[bytes, int]] = deque()
        self._ended = False
        self._arrived = asyncio.Event()
        self._ack = ack

    def feed(self, data: bytes, flow_controlled: int) -> None:
        self._chunks.append((data, flow_controlled))
        self._arrived.set()

    def end(self) -> None:
        self._ended = True
        self._arrived.set()

    @property
    def can_read(self) -> bool:
        return True

    async def _next(self) -> bytes | None:
        while not self._chunks:
            if self._ended:
                return None
            self._arrived.clear()
            await self._arrived.wait()
        data, flow_controlled = self._chunks.popleft()
        self._ack(flow_controlled)
        return data

    async def read(self, limit: int) -> bytes:
        out = bytearray()
        while len(out) <= limit:
            chunk = await self._next()
            if chunk is None:
                break
            out += chunk
        return bytes(out[: limit + 1])

    async def chunks(self) -> AsyncIterator[bytes]:
        while (chunk := await self._next()) is not None:
            yield chunk


class _NoBody(NoBody):
    """The body of a request whose HEADERS ended the stream (a GET, a watch): shared by all, so
    a stream without a body costs nothing for one."""

    __slots__ = ()

    def feed(self, data: bytes, flow_controlled: int) -> None:
        pass  # DATA after END_STREAM: the protocol refuses it before it gets here

    def end(self) -> None:
        pass


_NO_BODY = _NoBody()


class _Stream:
    """One request's stream. It does not hold its writer (the writer holds it, and the stream's
    task holds both): a stream is freed by reference counting when it ends, not left as cyclic
    garbage for the next full collection (~1 KiB per request, measured with gc.DEBUG_SAVEALL
    under bench/fleet.py)."""

    __slots__ = ("id", "body", "task", "_window", "answered", "done", "pushed")

    def __init__(self, stream_id: int, body: _Body | _NoBody) -> None:
        self.id = stream_id
        self.body = body
        self.task: asyncio.Task[None] | None = None
        self._window: asyncio.Event | None = None  # made when a write waits for flow control
        self.answered = False  # its answer's headers went out (or were queued)
        self.done = False
        self.pushed: _Pushed | None = None  # the stream's lines, once taken on from its task

    def window_opened(self) -> None:
        if self._window is not None:
            self._window.set()
        if self.pushed is not None:
            self.pushed.flush()

    async def window(self, timeout: float) -> None:
        """Wait (at most `timeout` seconds: TimeoutError) until the client opens the window."""
        if self._window is None:
            self._window = asyncio.Event()
        self._window.clear()
        async with asyncio.timeout(timeout):
            await self._window.wait()


class _Writer:
    """The pipeline's ResponseWriter for one stream."""

    __slots__ = ("_conn", "_stream", "_head", "status", "started", "_ended")

    def __init__(self, conn: Http2Connection, stream: _Stream, *, head: bool) -> None:
        self._conn = conn
        self._stream = stream
        self._head = head  # a HEAD request: the answer's headers only
        self.status: int | None = None
        self.started = False
        self._ended = False

    @property
    def connection(self) -> Http2Connection:
        return self._conn

    async def respond(self, answer: Answer) -> None:
        headers = answer.headers
        content_type = answer.content_type
        if content_type is not None and headers is not None and "Content-Type" in headers:
            content_type = None
        block = self._conn.encoder.encode(answer.status, headers.items() if headers is not None else (),
                                          content_type=content_type, content_length=len(answer.body))
        self.status = answer.status
        self._stream.answered = True
        body = b"" if self._head else answer.body
        self._conn.send_headers(self._stream, block, end=not body)
        if body:
            await self._conn.send_data(self._stream, body, end=True)
        self._ended = True

    async def start(self, status: int, headers: Headers, *, content_type: str | None = None) -> None:
        if content_type is not None and "Content-Type" in headers:
            content_type = None
        block = self._conn.encoder.encode(status, headers.items(), content_type=content_type)
        self.status, self.started = status, True
        self._stream.answered = True
        self._conn.send_headers(self._stream, block, end=False)

    async def write(self, data: bytes) -> None:
        await self._conn.send_data(self._stream, data, end=False)

    async def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._conn.end_stream(self._stream)

    async def accept_websocket(self, protocol: str) -> WebSocketChannel | None:
        return None  # no RFC 8441 extended CONNECT: kubectl upgrades over HTTP/1.1

    async def accept_upgrade(self, head: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        return None  # HTTP/2 has no Upgrade (RFC 9113, 8.6): client-go's SPDY dialer asks HTTP/1.1

    def detach(self, source: LineSource, *, deadline: float, on_end: Callable[[str], None]) -> bool:
        if self._conn.closing or not self.started:
            return False
        self._ended = True  # the stream is the pushed writer's to end now
        pushed = _Pushed(self._conn, self._stream, source, on_end)
        self._stream.pushed = pushed
        pushed.start(deadline)
        return True


class _Pushed:
    """A stream taken on from its task (a watch served from a cache): each line its source pushes
    is written at once, as far as the stream's flow-control window allows; what does not fit waits
    for a WINDOW_UPDATE, at most `_MAX_PUSHED_LINES` lines and the write timeout, after which the
    stream is reset (CANCEL). It ends at its deadline (the watch's lifetime), when the source
    terminates (after its last line), or when the client resets it or goes away; then the
    exchange is closed (`on_end`). No task, no coroutine frame: an idle watch is the stream's
    protocol state, the cache watcher and this."""

    __slots__ = ("_conn", "_stream", "_source", "_on_end", "_pending", "_stall", "_expiry", "ended")

    def __init__(self, conn: Http2Connection, stream: _Stream, source: LineSource, on_end: Callable[[str], None]) -> None:
        self._conn = conn
        self._stream = stream
        self._source = source
        self._on_end = on_end
        self._pending: list[bytes] = []
        self._stall: asyncio.TimerHandle | None = None
        self._expiry: int | None = None  # its bucket in the front's Deadlines
        self.ended = False

    def start(self, deadline: float) -> None:
        self._expiry = self._conn.deadlines.add(deadline, self.finish)
        for line in self._source.attach(self.push):
            self.push(line)

    def push(self, line: bytes) -> None:
        """The source's sink: called synchronously for each line (b"": the end of the stream)."""
        if self.ended:
            return
        if not line:
            self.finish()
            return
        self._pending.append(line)
        if len(self._pending) > _MAX_PUSHED_LINES:
            self._reset("its reader fell behind")
            return
        self.flush()

    def flush(self) -> None:
        """Write what the window allows; end the stream once a terminated source is written out."""
        if self.ended:
            return
        if self._pending:
            data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
            sent = self._conn.send_data_now(self._stream, data)
            if sent < 0:
                self.end(Outcome.GONE)
                return
            self._pending = [data[sent:]] if sent < len(data) else []
            self._conn.blocked(self._stream, bool(self._pending))
        if self._pending:
            if self._stall is None:
                self._stall = asyncio.get_running_loop().call_later(self._conn.write_timeout, self._reset, "its reader did not read in time")
            return
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        if self._source.terminated:
            self.finish()

    def finish(self) -> None:
        """End the stream cleanly (END_STREAM), or reset it if lines are still waiting for a window."""
        if self.ended:
            return
        if self._pending:
            self._reset("its reader did not read what was left")
            return
        self._conn.end_stream(self._stream)
        self.end(Outcome.DONE)

    def _reset(self, why: str) -> None:
        log.debug("stream %d reset: %s", self._stream.id, why)
        self._conn.reset(self._stream, ErrorCode.CANCEL)
        self.end(Outcome.GONE)

    def end(self, outcome: str) -> None:
        """Stop (the client went away, or the stream was ended or reset above) and close the
        exchange, once."""
        if self.ended:
            return
        self.ended = True
        self._pending = []
        if self._stall is not None:
            self._stall.cancel()
        if self._expiry is not None:
            self._conn.deadlines.discard(self._expiry, self.finish)
        # The source's sink and the timers' callbacks are this object's methods: let go of both
        # so the ended watch is freed by reference counting, not left in cycles (loop_health).
        self._stall = self._expiry = None
        self._source.detach()
        self._conn.forget(self._stream)
        self._on_end(outcome)


class Http2Connection(asyncio.Protocol):
    """One client connection speaking HTTP/2 (see the module docstring). `encoder` encodes the
    answers' headers (one per front: its cache serves every connection); `deadlines` ends its
    pushed streams at their deadlines (one per front: `proxy.fronts.deadlines`)."""

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        max_concurrent_streams: int,
        max_header_list_size: int,
        write_timeout: float,
        on_close: Callable[[Http2Connection], None] | None = None,
        encoder: AnswerEncoder | None = None,
        deadlines: Deadlines | None = None,
    ) -> None:
        self._pipeline = pipeline
        self._write_timeout = write_timeout
        self._on_close = on_close
        self._h2 = ServerConnection(max_concurrent_streams=max_concurrent_streams, max_header_list_size=max_header_list_size,
                                    stream_window=_STREAM_WINDOW, connection_window=DEFAULT_WINDOW + _STREAM_WINDOW)
        self.encoder = encoder if encoder is not None else AnswerEncoder()
        self.deadlines = deadlines if deadlines is not None else Deadlines()  # of its pushed streams
        self._transport: asyncio.Transport | None = None
        self._peercert: dict[str, Any] | None = None
        self._streams: dict[int, _Stream] = {}
        # streams with data waiting for a flow-control window (insertion-ordered): what a
        # WINDOW_UPDATE of the connection wakes, instead of every stream of the connection
        self._blocked: dict[_Stream, None] = {}
        # set when the transport resumes writing; None while it is writable (made at a pause
        # only: an asyncio.Event is ~860 bytes, and a kubelet's connection is almost never paused)
        self._unpaused: asyncio.Event | None = None
        self._closing = False  # GOAWAY sent or the connection closed: no new streams
        self._closed = False  # the connection is closed (or closing): nothing more is read or written
        self._tokens = _RESET_BURST
        self._tokens_at = time.monotonic()
        self._flush_scheduled = False
        self.write_timeout = write_timeout

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport: asyncio's TLS transport, or uvloop's (which does not subclass
        # asyncio.Transport but has its methods).
        self._transport = cast(asyncio.Transport, transport)
        self._peercert = self._transport.get_extra_info("peercert")
        self._h2.initiate()
        self._flush()

    def data_received(self, data: bytes) -> None:
        try:
            events = self._h2.receive(data)
        except ProtocolError as exc:
            self._goaway(exc.code, f"protocol error: {exc}")
            return
        for event in events:
            if self._closed:
                return
            if isinstance(event, RequestReceived):
                self._request(event)
            elif isinstance(event, WindowOpened):
                self._windows_opened(event.stream_id)
            elif isinstance(event, DataReceived):
                self._data(event)
            elif isinstance(event, StreamEnded):
                if (stream := self._streams.get(event.stream_id)) is not None:
                    stream.body.end()
            elif isinstance(event, StreamReset):
                self._stream_reset(event.stream_id)
            elif isinstance(event, ConnectionTerminated):
                self._close()
                return
        self._flush()  # PING and SETTINGS acknowledgements, window updates: at once

    def pause_writing(self) -> None:
        if self._unpaused is None:
            self._unpaused = asyncio.Event()

    def resume_writing(self) -> None:
        unpaused, self._unpaused = self._unpaused, None
        if unpaused is not None:
            unpaused.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = self._closed = True
        self.resume_writing()  # writers waiting for the transport find the connection closed
        self._end_streams()
        if self._on_close is not None:
            self._on_close(self)

    # -- incoming ------------------------------------------------------------------------------

    def _request(self, event: RequestReceived) -> None:
        stream_id = event.stream_id  # after GOAWAY the protocol refuses new streams itself (REFUSED_STREAM)
        head = event.head
        headers = CIMultiDict(head.headers)
        if head.authority is not None and "Host" not in headers:
            headers["Host"] = head.authority
        raw_path, _, query_string = head.path.partition("?")
        length = headers.get("Content-Length", "")
        body: _Body | _NoBody = _NO_BODY if event.ended else _Body(functools.partial(self._ack, stream_id))
        stream = _Stream(stream_id, body)
        self._streams[stream_id] = stream
        request = Request(
            method=head.method,
            raw_path=raw_path,
            query_string=query_string,
            query=_query(query_string) if query_string else _NO_QUERY,
            headers=CIMultiDictProxy(headers),
            body=body,
            peercert=self._peercert,
            content_length=int(length) if length.isascii() and length.isdigit() else None,  # "²".isdigit()
            protocol="h2",
        )
        writer = _Writer(self, stream, head=head.method == "HEAD")
        stream.task = asyncio.get_running_loop().create_task(self._serve(stream, request, writer), name=f"h2-stream:{stream_id}")

    def _data(self, event: DataReceived) -> None:
        stream = self._streams.get(event.stream_id)
        if stream is None:  # its task is done: give its bytes back to the client at once
            self._h2.acknowledge(event.stream_id, event.flow_controlled)
            return
        stream.body.feed(event.data, event.flow_controlled)

    def _ack(self, stream_id: int, flow_controlled: int) -> None:
        if self._closed:
            return
        self._h2.acknowledge(stream_id, flow_controlled)
        self._flush_soon()

    def _stream_reset(self, stream_id: int) -> None:
        """The client reset a stream, or the protocol did for a stream error of the client's."""
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return
        if stream.pushed is not None:
            stream.pushed.end(Outcome.GONE)  # a watch the client closed
            return
        if stream.task is not None and not stream.done:
            stream.task.cancel()  # the client gave up on it (a watch whose context was cancelled)
            # Rapid reset is streams reset before their answer began: work started and thrown
            # away at once. A client closing its open watches (a kubelet stopping) resets streams
            # that were answered long ago; those cost nothing to refuse and are not counted.
            if not stream.answered and not self._spend_reset_token():
                self._goaway(ErrorCode.ENHANCE_YOUR_CALM, "too many streams reset before their answers")

    def _spend_reset_token(self) -> bool:
        now = time.monotonic()
        self._tokens = min(_RESET_BURST, self._tokens + (now - self._tokens_at) * _RESETS_PER_SECOND)
        self._tokens_at = now
        self._tokens -= 1
        return self._tokens >= 0

    def _windows_opened(self, stream_id: int) -> None:
        if stream_id:
            if (stream := self._streams.get(stream_id)) is not None:
                stream.window_opened()
            return
        for stream in tuple(self._blocked):  # a stream with nothing waiting has nothing to send
            stream.window_opened()

    def blocked(self, stream: _Stream, waiting: bool) -> None:
        """Whether `stream` has data waiting for a flow-control window (see `_windows_opened`)."""
        if waiting:
            self._blocked[stream] = None
        else:
            self._blocked.pop(stream, None)

    # -- serving -------------------------------------------------------------------------------

    async def _serve(self, stream: _Stream, request: Request, writer: _Writer) -> None:
        try:
            await self._pipeline.handle(request, writer)
            if stream.pushed is not None:
                return  # the stream lives on without this task
            if writer.status is None:
                await writer.respond(Answer(500, b""))  # nothing was answered: only a bug gets here
            await writer.end()
        except (asyncio.CancelledError, ClientGone):
            pass
        except Exception:  # a bug: this stream fails, the connection and its other streams go on
            log.exception("stream %d failed", stream.id)
            self.reset(stream, ErrorCode.INTERNAL_ERROR)
        finally:
            stream.done = True
            stream.task = None
            if stream.pushed is None:
                self._streams.pop(stream.id, None)

    # -- outgoing ------------------------------------------------------------------------------

    def send_headers(self, stream: _Stream, block: bytes, *, end: bool) -> None:
        """Queue an answer's header block (`encoder.encode`). Raises ClientGone."""
        if self._transport is None or self._transport.is_closing():
            raise ClientGone("connection closed")
        try:
            self._h2.send_headers(stream.id, block, end=end)
        except StreamClosed:
            raise ClientGone(f"stream {stream.id} closed") from None
        self._flush_soon()  # with the body's first frames and other streams' answers: one write

    async def send_data(self, stream: _Stream, data: bytes, *, end: bool) -> None:
        """Send `data` on a stream as its flow-control windows allow. Raises ClientGone when the
        stream or connection is gone, or the stream's window stays shut past the write timeout
        (the stream is reset then)."""
        view: bytes | memoryview = data
        while True:
            if self._transport is None or self._transport.is_closing():
                raise ClientGone("connection closed")
            try:
                sent = self._h2.send_data(stream.id, view, end=end)
            except StreamClosed:
                raise ClientGone(f"stream {stream.id} closed") from None
            if sent or not view:
                self._flush_soon()
            if sent == len(view):
                break
            view = memoryview(view)[sent:]
            self.blocked(stream, True)
            try:
                await stream.window(self._write_timeout)
            except TimeoutError:
                self.reset(stream, ErrorCode.CANCEL)
                raise ClientGone(f"stream {stream.id}: its reader did not read in time") from None
            finally:
                self.blocked(stream, False)
        unpaused = self._unpaused
        if unpaused is not None:  # the client does not read its connection at all
            try:
                async with asyncio.timeout(self._write_timeout):
                    await unpaused.wait()
            except TimeoutError:
                self._goaway(ErrorCode.ENHANCE_YOUR_CALM, "client does not read")
                raise ClientGone("connection stalled") from None

    def send_data_now(self, stream: _Stream, data: bytes) -> int:
        """Send as much of `data` as the windows allow, without waiting: the bytes sent, or -1
        when the stream or connection is gone. The frames go out at the end of this loop
        iteration, with every other stream's (one write for a fan-out)."""
        if self._transport is None or self._transport.is_closing():
            return -1
        try:
            sent = self._h2.send_data(stream.id, data, end=False)
        except StreamClosed:
            return -1
        if sent:
            self._flush_soon()
        return sent

    def _flush_soon(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self._flush()

    def forget(self, stream: _Stream) -> None:
        """A pushed stream ended: it is no longer the connection's."""
        self._streams.pop(stream.id, None)
        self._blocked.pop(stream, None)
        stream.pushed = None

    @property
    def closing(self) -> bool:
        return self._closing

    def end_stream(self, stream: _Stream) -> None:
        self._h2.end_stream(stream.id)
        self._flush_soon()

    def reset(self, stream: _Stream, code: ErrorCode) -> None:
        self._h2.reset_stream(stream.id, code)
        self._flush_soon()

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)
            if self._transport.get_write_buffer_size() > _MAX_UNREAD_OUTPUT:
                self._goaway(ErrorCode.ENHANCE_YOUR_CALM, "client leaves its output unread")

    # -- closing -------------------------------------------------------------------------------

    def _goaway(self, code: ErrorCode, why: str) -> None:
        log.info("HTTP/2 connection closed (%s): %s", code.name, why)
        self._h2.goaway(code)
        data = self._h2.data_to_send()
        if self._transport is not None:
            if data and not self._transport.is_closing():
                self._transport.write(data)
            self._transport.close()
        self._close()

    def _close(self) -> None:
        self._closing = self._closed = True
        if self._transport is not None:
            self._transport.close()
        self._end_streams()

    def _end_streams(self) -> None:
        """Cancel every stream's task, end every pushed stream as GONE, and wake any task
        waiting for a stream's window (it then finds the connection closing)."""
        for stream in tuple(self._streams.values()):
            if stream.task is not None:
                stream.task.cancel()
            if stream.pushed is not None:
                stream.pushed.end(Outcome.GONE)
            else:
                stream.window_opened()

    async def shutdown(self, grace: float) -> None:
        """GOAWAY, then wait up to `grace` seconds for the open streams to end, then close. Once
        only: a connection already told to go (or gone) returns at once."""
        if self._closing or self._transport is None or self._transport.is_closing():
            return
        self._closing = True
        self._h2.goaway(ErrorCode.NO_ERROR)
        self._flush()
        tasks = [s.task for s in self._streams.values() if s.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace)
        self._close()


def _query(query_string: str) -> MultiDictProxy[str]:
    """The decoded query parameters, as aiohttp decodes them (first value wins on lookups)."""
    return MultiDictProxy(MultiDict(parse_qsl(query_string, keep_blank_values=True)))


class Http2Front:
    """Makes a protocol per HTTP/2 connection and knows them all (for shutdown and the metrics)."""

    def __init__(self, pipeline: Pipeline, *, max_concurrent_streams: int, max_header_list_size: int, write_timeout: float) -> None:
        self._pipeline = pipeline
        self._max_concurrent_streams = max_concurrent_streams
        self._max_header_list_size = max_header_list_size
        self._write_timeout = write_timeout
        self._encoder = AnswerEncoder()
        self._deadlines = Deadlines()  # every connection's pushed streams' (one timer per second, not per watch)
        self.connections: set[Http2Connection] = set()

    def protocol(self) -> Http2Connection:
        conn = Http2Connection(
            self._pipeline,
            max_concurrent_streams=self._max_concurrent_streams,
            max_header_list_size=self._max_header_list_size,
            write_timeout=self._write_timeout,
            on_close=self.connections.discard,
            encoder=self._encoder,
            deadlines=self._deadlines,
        )
        self.connections.add(conn)
        return conn

    def open(self) -> list[Http2Connection]:
        """The open connections (`_Writer.connection`)."""
        return list(self.connections)

    async def let_go(self, connection: Http2Connection, grace: float) -> None:
        """GOAWAY on `connection`, `grace` seconds for its streams, then close (the drain's turn)."""
        await connection.shutdown(grace)

    async def shutdown(self, grace: float) -> None:
        await asyncio.gather(*(c.shutdown(grace) for c in tuple(self.connections)))
