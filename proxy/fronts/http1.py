"""The HTTP/1.1 front: aiohttp's low-level server (no router, no middlewares) adapted to the
pipeline's own types (`proxy.messages`). Every request, whatever its path, goes to
`Pipeline.handle`.

A client that goes away cancels its handler (aiohttp's `handler_cancellation`), so a watch frees
its upstream watches at once instead of at its next event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import WSMsgType, web
from multidict import CIMultiDict

from proxy.pipeline.chain import Pipeline
from proxy.messages import Answer, ClientGone, Headers, LineSource, Request, WebSocketChannel


class _Body:
    """The request body from aiohttp's stream reader."""

    __slots__ = ("_request",)

    def __init__(self, request: web.BaseRequest) -> None:
        self._request = request

    @property
    def can_read(self) -> bool:
        return self._request.can_read_body

    async def read(self, limit: int) -> bytes:
        # Until the end or past `limit`: aiohttp's read(n) gives what is buffered now, which for a
        # body of more than a few TCP segments is only its beginning.
        if not self._request.can_read_body:
            return b""
        content = self._request.content
        parts: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = await content.readany()
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        return body[: limit + 1] if size > limit else body

    async def chunks(self) -> AsyncIterator[bytes]:
        async for chunk in self._request.content.iter_any():
            yield chunk


class Writer:
    """A ResponseWriter over aiohttp: a whole answer becomes the web.Response the handler
    returns; a stream a StreamResponse prepared at `start` (chunked unless a Content-Length is
    given). Writes that the client does not take within `write_timeout` seconds drop it."""

    __slots__ = ("_request", "_write_timeout", "response", "status")

    def __init__(self, request: web.BaseRequest, write_timeout: float) -> None:
        self._request = request
        self._write_timeout = write_timeout
        self.response: web.StreamResponse | None = None
        self.status: int | None = None

    @property
    def started(self) -> bool:
        return self.response is not None and self.response.prepared

    @property
    def connection(self) -> object:
        return self._request.protocol  # aiohttp's RequestHandler: one per connection

    async def respond(self, answer: Answer) -> None:
        # An answer's CIMultiDict is made for this answer alone (proxy.headers, proxy.answers):
        # aiohttp takes it as the response's own instead of copying it once more.
        headers = answer.headers if type(answer.headers) is CIMultiDict else CIMultiDict(answer.headers or ())
        if answer.content_type is not None and "Content-Type" not in headers:
            headers["Content-Type"] = answer.content_type
        self.response = web.Response(status=answer.status, body=answer.body, headers=headers)
        self.status = answer.status

    async def start(self, status: int, headers: Headers, *, content_type: str | None = None) -> None:
        response = web.StreamResponse(status=status, headers=headers)
        if content_type is not None and "Content-Type" not in headers:
            response.headers["Content-Type"] = content_type
        if "Content-Length" not in headers:
            response.enable_chunked_encoding()
        self.response, self.status = response, status
        try:
            await response.prepare(self._request)
        except ConnectionError as exc:
            raise ClientGone(str(exc)) from None

    async def write(self, data: bytes) -> None:
        # asyncio.timeout, not wait_for: no Task per write (wait_for makes one on Python 3.11),
        # and the write rarely suspends at all (only when the transport's buffer is full).
        assert self.response is not None
        try:
            async with asyncio.timeout(self._write_timeout):
                await self.response.write(data)
        except TimeoutError:
            if self._request.transport is not None:
                self._request.transport.abort()
            raise ClientGone("client did not read its stream in time") from None
        except ConnectionError as exc:
            raise ClientGone(str(exc)) from None

    async def accept_websocket(self, protocol: str) -> WebSocketChannel | None:
        ws = web.WebSocketResponse(protocols=(protocol,), autoping=True, max_msg_size=0)
        self.response, self.status = ws, 101
        try:
            await ws.prepare(self._request)
        except ConnectionError as exc:
            raise ClientGone(str(exc)) from None
        return _WebSocket(ws)

    async def accept_upgrade(self, head: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        # aiohttp's parser upgrades only to websocket and tcp (anything else would go on being
        # parsed as requests), so the connection is taken from it: its protocol becomes a
        # stream's before the 101 is written, and the client sends nothing of the new protocol
        # before it reads the 101. aiohttp's handler learns the connection's end from ours.
        request = self._request
        transport = request.transport
        if transport is None or transport.is_closing():
            raise ClientGone("client went away before its upgrade")
        reader = asyncio.StreamReader(limit=_UPGRADED_BUFFER)
        protocol = _Upgraded(reader, request.protocol)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        writer = asyncio.StreamWriter(transport, protocol, reader, asyncio.get_running_loop())
        writer.write(head)
        self.response, self.status = _TakenOver(status=101), 101
        return reader, writer

    def detach(self, source: LineSource, *, deadline: float, on_end: Callable[[str], None]) -> bool:
        return False  # aiohttp ends a response when its handler returns: the task streams it

    async def end(self) -> None:
        if self.response is None:
            return
        try:
            await self.response.write_eof()
        except ConnectionError:
            pass  # the client is gone: nothing left to end


# bytes: the StreamReader limit of an upgraded connection (reading pauses at twice this);
# asyncio's default, a few SPDY DATA frames
_UPGRADED_BUFFER = 64 * 1024


class _Upgraded(asyncio.StreamReaderProtocol):
    """The protocol of a connection taken from aiohttp by an upgrade: a stream's, which passes
    the connection's end on to aiohttp's handler (so the server forgets the connection)."""

    def __init__(self, reader: asyncio.StreamReader, handler: asyncio.BaseProtocol) -> None:
        super().__init__(reader)
        self._handler = handler

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._handler.connection_lost(exc)


class _TakenOver(web.StreamResponse):
    """What the handler returns for a connection taken over by an upgrade: its 101 is already
    written, so aiohttp has nothing left to send."""

    async def prepare(self, request: web.BaseRequest) -> None:
        return None

    async def write_eof(self, data: bytes = b"") -> None:
        return None


class _WebSocket:
    """A WebSocketChannel over aiohttp's WebSocketResponse."""

    __slots__ = ("_ws",)

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self._ws = ws

    async def receive(self) -> bytes | None:
        message = await self._ws.receive()
        if message.type is WSMsgType.BINARY:
            return bytes(message.data)
        if message.type is WSMsgType.TEXT:
            return str(message.data).encode()
        return None  # close, closing, closed, error

    async def send(self, data: bytes) -> None:
        try:
            await self._ws.send_bytes(data)
        except ConnectionError as exc:
            raise ClientGone(str(exc)) from None

    async def close(self, code: int = 1000, message: bytes = b"") -> None:
        await self._ws.close(code=code, message=message)


def adapt(request: web.BaseRequest) -> Request:
    """The pipeline's Request for an aiohttp request."""
    url = request.rel_url
    transport = request.transport
    return Request(
        method=request.method,
        raw_path=url.raw_path,
        query_string=url.raw_query_string,
        query=request.query,
        headers=request.headers,
        body=_Body(request),
        peercert=transport.get_extra_info("peercert") if transport is not None else None,
        content_length=request.content_length,
    )


class Http1Front:
    """aiohttp's low-level server feeding `pipeline`. `protocol()` makes a new connection's
    protocol (the listener's protocol factory). The parser limits sit above the configured ones,
    so requests between the two get a Status from the pipeline (414/431) instead of aiohttp's
    plain 400."""

    def __init__(self, pipeline: Pipeline, *, max_line_size: int, max_field_size: int, write_timeout: float) -> None:
        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            writer = Writer(request, write_timeout)
            await pipeline.handle(adapt(request), writer)
            if writer.response is None:  # nothing was answered: only a bug gets here
                return web.Response(status=500)
            return writer.response

        self._server = web.Server(
            handle,
            handler_cancellation=True,
            access_log=None,
            max_line_size=max_line_size,
            max_field_size=max_field_size,
        )

    def protocol(self) -> asyncio.Protocol:
        return self._server()

    @property
    def open_connections(self) -> int:
        return len(self._server.connections)

    def open(self) -> list[Any]:
        """The open connections (aiohttp's RequestHandlers: `Writer.connection`)."""
        return list(self._server.connections)

    async def let_go(self, connection: Any, grace: float) -> None:
        """Close `connection` once its request in flight is answered (the drain's turn; the
        `grace` is `shutdown`'s, which waits for it)."""
        connection.close()

    async def shutdown(self, grace: float) -> None:
        """Close idle connections now, give requests in flight `grace` seconds, then close all."""
        self._server.pre_shutdown()
        await self._server.shutdown(grace)
