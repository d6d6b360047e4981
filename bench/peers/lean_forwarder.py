"""The lean forwarder: aiohttp's server in; out, persistent uvloop TLS connections to each
partition, a request in one write, its answer parsed by httptools (`bench.peers`)."""

from __future__ import annotations

import asyncio
import ssl
from urllib.parse import urlsplit

import httptools
import uvloop
from aiohttp import web
from multidict import CIMultiDict

from bench.peers.common import DROP_REQUEST, DROP_RESPONSE, impersonation, parse_args, partition_of, serve, upstream_ssl


class Upstream(asyncio.Protocol):
    """One keep-alive connection to a partition, one request at a time."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.keep_alive = False
        self.done: asyncio.Future[None] | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("partition closed the connection"))

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.done is not None
        self.keep_alive = self.parser.should_keep_alive()  # llhttp forgets it once the message ends
        self.done.set_result(None)

    async def send(self, request: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        assert self.transport is not None
        self.headers, self.body = [], []
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        await self.done
        return self.parser.get_status_code(), self.headers, b"".join(self.body)


class Pool:
    """Idle connections per partition."""

    def __init__(self, upstreams: dict[str, str], ctx: ssl.SSLContext) -> None:
        self.addresses = {name: urlsplit(url) for name, url in upstreams.items()}
        self.ctx = ctx
        self.idle: dict[str, list[Upstream]] = {name: [] for name in upstreams}

    async def get(self, partition: str) -> Upstream:
        idle = self.idle[partition]
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        address = self.addresses[partition]
        _, conn = await asyncio.get_running_loop().create_connection(Upstream, address.hostname, address.port, ssl=self.ctx)
        return conn

    def put(self, partition: str, conn: Upstream) -> None:
        if not conn.closed and conn.keep_alive:
            self.idle[partition].append(conn)


async def main() -> None:
    args = parse_args(__doc__ or "")
    pool = Pool(args.upstream, upstream_ssl(args))
    hosts = {name: urlsplit(url).netloc for name, url in args.upstream.items()}

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        partition = partition_of(request.raw_path)
        lines = [f"{request.method} {request.raw_path} HTTP/1.1\r\nHost: {hosts[partition]}\r\n"]
        lines += (f"{k}: {v}\r\n" for k, v in request.headers.items() if k.lower() not in DROP_REQUEST)
        peercert = request.transport.get_extra_info("peercert") if request.transport is not None else None
        lines += (f"{k}: {v}\r\n" for k, v in impersonation(peercert))
        body = await request.read()
        lines.append(f"Content-Length: {len(body)}\r\n\r\n")
        conn = await pool.get(partition)
        status, raw_headers, data = await conn.send("".join(lines).encode() + body)
        pool.put(partition, conn)
        out: CIMultiDict[str] = CIMultiDict()
        for name, value in raw_headers:
            key = name.decode("latin-1")
            if key.lower() not in DROP_RESPONSE:
                out.add(key, value.decode("latin-1"))
        return web.Response(status=status, body=data, headers=out)

    await serve(handle, args)


if __name__ == "__main__":
    uvloop.run(main())
