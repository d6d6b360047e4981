"""The layered watch reader against local aiohttp servers standing in for a transport (see
test_partition_client.py): reopen after an end or a break, from where the reader got to, with
backoff; a refused reopen raises its APIError; events split across chunks come out whole."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from config.models import PartitionRole
from proxy.clients.breaker import CircuitBreaker
from proxy.clients.credentials import Credentials
from proxy.clients.errors import APIExpired
from proxy.clients.partition import PartitionClient, Timeouts
from proxy.clients.watch import Backoff, WatchStream, with_bookmarks
from routing import protobuf as pb

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


@pytest.fixture
async def client_for(aiohttp_server: ServerFactory) -> AsyncIterator[Callable[..., Awaitable[PartitionClient]]]:
    made: list[PartitionClient] = []

    async def make(handler: Callable[[web.Request], Awaitable[web.StreamResponse]], *, inactivity: float = 5.0) -> PartitionClient:
        app = web.Application()
        # ready, as a kube-apiserver that serves: a stream the peer breaks makes the next call ask
        # /readyz first (proxy.clients.partition `_peer_closed`), and the handlers count calls
        app.router.add_get("/readyz", _ready)
        app.router.add_get("/{tail:.*}", handler)
        server = await aiohttp_server(app)
        client = PartitionClient(
            name="rp1", role=PartitionRole.RESOURCE,
            credentials=Credentials(endpoints=(URL(str(server.make_url("/"))),), ssl_context=False, auth_header=None),
            timeouts=Timeouts(connect=1.0, request=5.0, watch_inactivity=inactivity),
            breaker=CircuitBreaker(3, 5.0),
        )
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


async def _ready(request: web.Request) -> web.Response:
    return web.Response(text="ok")


class Pauses:
    """An injected sleep that records the pauses instead of waiting them out."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seen.append(seconds)
        await asyncio.sleep(0)


async def test_a_stream_that_ends_is_reopened_from_where_the_reader_got_to(client_for: Callable[..., Awaitable[PartitionClient]]) -> None:
    queries: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        queries.append(request.query_string)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        rv = int(request.query["resourceVersion"])
        # one event split over two writes, then the stream ends (as at its timeoutSeconds)
        await response.write(b'{"type":"MODIFIED","object":{"metadata":{"resourceVersion":"')
        await response.write(str(rv + 1).encode() + b'"}}}\n')
        await response.write_eof()
        return response

    client = await client_for(handler)
    position = 10
    pauses = Pauses()
    stream = WatchStream(client, "/api/v1/nodes", query=lambda: f"watch=true&resourceVersion={position}", sleep=pauses,
                         backoff=Backoff(after_end=0.2, first=1.0, most=8.0))
    events = []
    async for line in stream.events():
        events.append(line)
        position += 1
        if len(events) == 3:
            break
    assert [int(e.split(b'"resourceVersion":"')[1].split(b'"')[0]) for e in events] == [11, 12, 13]
    assert [q.split("resourceVersion=")[1].split("&")[0] for q in queries] == ["10", "11", "12"]
    assert all("allowWatchBookmarks=true" in q for q in queries)  # always asked: inactivity relies on them
    assert stream.opened == 3 and all(0.1 <= p <= 0.3 for p in pauses.seen)  # the short pause after a normal end


async def test_failures_back_off_and_a_refused_reopen_raises_its_status(client_for: Callable[..., Awaitable[PartitionClient]]) -> None:
    calls = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls <= 3:  # headers, then a broken body: the connection is cut mid-stream
            response = web.StreamResponse()
            await response.prepare(request)
            await response.write(b'{"type":"ADDED"')
            assert request.transport is not None
            request.transport.close()
            return response
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410},
                                 status=410)

    pauses = Pauses()
    stream = WatchStream(await client_for(handler), "/w", query=lambda: "watch=true", sleep=pauses,
                         backoff=Backoff(after_end=0.2, first=1.0, most=3.0))
    with pytest.raises(APIExpired):
        async for _ in stream.events():
            pass
    assert calls == 4
    # doubling from 1 s, capped at 3 s, each jittered by +-50 %
    assert len(pauses.seen) == 3
    assert all(0.5 * base <= pause <= 1.5 * base for pause, base in zip(pauses.seen, (1.0, 2.0, 3.0)))


async def test_a_silent_stream_is_dropped_and_reopened(client_for: Callable[..., Awaitable[PartitionClient]]) -> None:
    calls = 0

    async def handler(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"%d"}}}\n' % calls)
        await asyncio.sleep(30)
        return response

    stream = WatchStream(await client_for(handler, inactivity=0.3), "/w", query=lambda: "watch=true", sleep=Pauses())
    seen = []
    async for line in stream.events():
        seen.append(line)
        if len(seen) == 2:
            break
    assert calls == 2


async def test_protobuf_frames_come_out_whole(client_for: Callable[..., Awaitable[PartitionClient]]) -> None:
    frames = [pb.encode_watch_event("BOOKMARK", pb.bookmark_object(api_version="v1", kind="Node", resource_version=str(i), annotations={}))
              for i in (5, 6)]

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/vnd.kubernetes.protobuf;stream=watch"})
        await response.prepare(request)
        data = b"".join(pb.encode_frame(f) for f in frames)
        for i in range(0, len(data), 7):  # frames cut at arbitrary points
            await response.write(data[i : i + 7])
        await asyncio.sleep(30)
        return response

    stream = WatchStream(await client_for(handler), "/w", query=lambda: "watch=true", sleep=Pauses())
    await stream.open()
    assert stream.protobuf
    got = []
    async for frame in stream.events():
        got.append(frame)
        if len(got) == 2:
            break
    assert got == frames


def test_with_bookmarks_asks_for_them_once() -> None:
    assert with_bookmarks("") == "allowWatchBookmarks=true"
    assert with_bookmarks("watch=1") == "watch=1&allowWatchBookmarks=true"
    assert with_bookmarks("allowWatchBookmarks=true&watch=1") == "allowWatchBookmarks=true&watch=1"
