"""The client layer against peers that misbehave on demand: local aiohttp servers (pytest-aiohttp)
that answer, hang, stream and go silent, and ports where nothing listens. They stand in for a
transport, not for kube-apiserver: what is tested is failover, the breaker, the timeouts of each
request class and the conversion of failures into the proxy's own errors. What kube-apiserver
answers is tested against real partitions in tests/integration and tests/faults."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict
from yarl import URL

from config.models import PartitionRole
from proxy.clients.breaker import CircuitBreaker
from proxy.clients.credentials import Credentials
from proxy.clients.errors import (
    APIConflict,
    APIExpired,
    APINotFound,
    APIServerError,
    PartitionMarkedDown,
    PartitionTimedOut,
    PartitionUnreachable,
    StreamBroken,
    api_error,
)
from proxy.clients.partition import PartitionClient, RequestClass, Timeouts
from proxy.identity import Identity

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
MakeClient = Callable[..., PartitionClient]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def free_port() -> int:
    """A port where nothing listens (connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def make_client() -> AsyncIterator[MakeClient]:
    made: list[PartitionClient] = []

    def make(*endpoints: URL, failures: int = 2, request: float = 5.0, inactivity: float = 5.0,
             clock: Clock | None = None, token: str | None = "Bearer proxy-token") -> PartitionClient:
        client = PartitionClient(
            name="tp1",
            role=PartitionRole.TENANT,
            credentials=Credentials(endpoints=endpoints, ssl_context=False, auth_header=token),
            timeouts=Timeouts(connect=1.0, request=request, watch_inactivity=inactivity),
            breaker=CircuitBreaker(failures, 5.0, clock=clock or Clock()),
        )
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


async def serve(aiohttp_server: ServerFactory, handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                port: int | None = None) -> URL:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = await aiohttp_server(app, port=port)
    return URL(str(server.make_url("/")))


async def test_a_request_carries_the_proxys_credential_and_the_clients_identity(aiohttp_server: ServerFactory, make_client: MakeClient) -> None:
    seen: list[CIMultiDict[str]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(CIMultiDict(request.headers))
        return web.json_response({"kind": "ConfigMap"}, status=201)

    client = make_client(await serve(aiohttp_server, handler))
    async with client.request("POST", "/api/v1/x", query="a=b", body=b"{}", identity=Identity("alice", ("dev", "ops"))) as answer:
        assert (answer.status, await answer.json()) == (201, {"kind": "ConfigMap"})
    headers = seen[0]
    assert headers["Authorization"] == "Bearer proxy-token"
    assert headers["Impersonate-User"] == "alice" and headers.getall("Impersonate-Group") == ["dev", "ops"]
    assert "Content-Type" not in headers  # a body sent without one goes without one (kube-apiserver: JSON)


async def test_a_cookie_one_answer_sets_is_not_sent_with_later_requests(aiohttp_server: ServerFactory, make_client: MakeClient) -> None:
    # One session carries every client's requests to a partition: a cookie (a load balancer's
    # affinity cookie in front of HA kube-apiservers, say) set in one client's answer must not
    # go out with another client's request.
    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        response = web.Response(text="ok")
        response.set_cookie("affinity", "replica-1")
        return response

    # By a host name: aiohttp's default jar keeps no cookies of IP addresses at all.
    client = make_client((await serve(aiohttp_server, handler)).with_host("localhost"))
    for who in ("alice", "bob"):
        async with client.request("GET", "/api/v1/namespaces", identity=Identity(who, ())) as answer:
            assert answer.status == 200 and "affinity=replica-1" in answer.headers.get("Set-Cookie", "")
    assert seen == [None, None]


async def test_a_refused_connection_fails_over_to_the_next_endpoint_for_a_replayable_body(aiohttp_server: ServerFactory, make_client: MakeClient) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=await request.text())

    dead = URL(f"http://127.0.0.1:{free_port()}")
    client = make_client(dead, await serve(aiohttp_server, handler))
    async with client.request("PUT", "/x", body=b"payload") as answer:
        assert await answer.read() == b"payload"
    assert client.base_url != dead  # it stays on the endpoint that answered


async def test_a_streamed_body_is_never_sent_twice(aiohttp_server: ServerFactory, make_client: MakeClient) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def body() -> AsyncIterator[bytes]:
        yield b"once"

    client = make_client(URL(f"http://127.0.0.1:{free_port()}"), await serve(aiohttp_server, handler))
    with pytest.raises(PartitionUnreachable) as raised:
        async with client.request("POST", "/x", body=body()):
            pass
    assert raised.value.retry_after >= 1


async def test_failures_in_a_row_mark_the_partition_down_and_then_nothing_is_sent(make_client: MakeClient) -> None:
    client = make_client(URL(f"http://127.0.0.1:{free_port()}"), failures=2)
    for _ in range(2):
        with pytest.raises(PartitionUnreachable):
            async with client.request("GET", "/x"):
                pass
    with pytest.raises(PartitionMarkedDown) as raised:
        async with client.request("GET", "/x"):
            pass
    assert client.is_marked_down and raised.value.retry_after == 5


async def test_a_recovered_partition_is_served_again_by_its_half_open_trial(aiohttp_server: ServerFactory, make_client: MakeClient) -> None:
    seen: list[tuple[str, str | None]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers.get("Authorization")))
        if request.path == "/readyz":
            return web.Response(text="ok")
        return web.Response(status=500, text="up, but unhappy")  # any HTTP answer means the partition is up

    clock = Clock()
    client = make_client(await serve(aiohttp_server, handler), failures=1, clock=clock)
    client.breaker.failure()  # as if the last call had failed
    with pytest.raises(PartitionMarkedDown):
        async with client.request("GET", "/x"):
            pass
    assert seen == []
    clock.now += 5.0
    async with client.request("GET", "/x") as answer:
        assert answer.status == 500
    assert not client.is_marked_down and client.health == "up"
    # the trial asked /readyz first, with the proxy's own credential; once closed, calls go straight
    async with client.request("GET", "/y"):
        pass
    assert seen == [("/readyz", "Bearer proxy-token"), ("/x", "Bearer proxy-token"), ("/y", "Bearer proxy-token")]


async def test_a_partition_that_answers_but_is_not_ready_gets_no_call_until_its_readyz_passes(aiohttp_server: ServerFactory, make_client: MakeClient) -> None:
    # A restarted kube-apiserver listens before it is ready: until its RBAC informers synced it
    # answers 403 to whatever the proxy impersonates, and its /readyz answers 500 meanwhile.
    ready = False
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.path)
        if request.path == "/readyz":
            return web.Response(text="ok") if ready else web.Response(status=500, text="[-]informer-sync failed: reason withheld")
        return web.Response(text="served")

    clock = Clock()
    client = make_client(await serve(aiohttp_server, handler), failures=1, clock=clock)
    client.breaker.failure()
    clock.now += 5.0  # the window ended: the next call is the trial
    with pytest.raises(PartitionMarkedDown, match="not ready") as raised:
        async with client.request("PUT", "/lease", body=b"{}"):
            pass
    assert seen == ["/readyz"] and client.is_marked_down and client.breaker.remaining() == 1.0
    assert raised.value.retry_after == 1
    clock.now += 0.5
    with pytest.raises(PartitionMarkedDown):  # still within the second: not even asked
        async with client.request("PUT", "/lease", body=b"{}"):
            pass
    assert seen == ["/readyz"]
    ready = True
    clock.now += 0.5
    async with client.request("PUT", "/lease", body=b"{}") as answer:
        assert await answer.read() == b"served"
    assert seen == ["/readyz", "/readyz", "/lease"] and client.health == "up"


async def test_after_a_refused_connection_the_next_call_asks_readyz_first_though_the_breaker_did_not_open(
        aiohttp_server: ServerFactory, make_client: MakeClient) -> None:
    # A kube-apiserver killed and started again between two calls: the first finds nothing
    # listening, the next finds it listening but not ready.
    port = free_port()
    clock = Clock()
    client = make_client(URL(f"http://127.0.0.1:{port}"), failures=3, clock=clock)
    with pytest.raises(PartitionUnreachable):
        async with client.request("PUT", "/lease", body=b"{}"):
            pass
    assert not client.is_marked_down  # one failure of the three that open the breaker
    ready = False
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.path)
        if request.path == "/readyz":
            return web.Response(text="ok") if ready else web.Response(status=403)
        return web.Response(text="served")

    await serve(aiohttp_server, handler, port)
    with pytest.raises(PartitionMarkedDown, match="not ready"):
        async with client.request("PUT", "/lease", body=b"{}"):
            pass
    assert seen == ["/readyz"]
    ready = True
    clock.now += 1.0
    async with client.request("PUT", "/lease", body=b"{}") as answer:
        assert await answer.read() == b"served"
    async with client.request("PUT", "/lease", body=b"{}"):
        pass
    assert seen == ["/readyz", "/readyz", "/lease", "/lease"] and client.health == "up"


@pytest.mark.parametrize("status", [403, 429, 503])
async def test_only_a_readyz_answered_200_lets_the_trial_through(status: int, aiohttp_server: ServerFactory, make_client: MakeClient) -> None:
    # kube-apiserver answers /readyz 403 in its first instants of listening (its authorizers
    # not all in place yet), although the path is always allowed once it runs.
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.path)
        if request.path == "/readyz":
            return web.Response(status=status)
        return web.Response(text="served")

    clock = Clock()
    client = make_client(await serve(aiohttp_server, handler), failures=1, clock=clock)
    client.breaker.failure()
    clock.now += 5.0
    with pytest.raises(PartitionMarkedDown, match="not ready"):
        async with client.request("GET", "/x"):
            pass
    assert seen == ["/readyz"] and client.is_marked_down


async def test_a_trial_whose_readyz_finds_nothing_listening_counts_as_a_failure(make_client: MakeClient) -> None:
    clock = Clock()
    client = make_client(URL(f"http://127.0.0.1:{free_port()}"), failures=1, clock=clock)
    client.breaker.failure()
    clock.now += 5.0
    with pytest.raises(PartitionUnreachable):
        async with client.request("GET", "/x"):
            pass
    assert client.is_marked_down and client.breaker.remaining() == 5.0  # a whole failure's window


async def test_a_request_without_an_answer_in_time_times_out_and_counts_against_the_breaker(aiohttp_server: ServerFactory, make_client: MakeClient) -> None:
    async def handler(request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.Response()

    client = make_client(await serve(aiohttp_server, handler), request=0.2, failures=1)
    with pytest.raises(PartitionTimedOut):
        async with client.request("GET", "/x"):
            pass
    assert client.is_marked_down


async def test_a_watch_has_no_total_deadline_but_a_silent_stream_breaks_after_its_inactivity_timeout(aiohttp_server: ServerFactory, make_client: MakeClient) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(3):  # longer than the request deadline in all, each piece within the inactivity timeout
            await response.write(b'{"type":"BOOKMARK"}\n')
            await asyncio.sleep(0.15)
        await asyncio.sleep(30)  # then silent
        return response

    client = make_client(await serve(aiohttp_server, handler), request=0.3, inactivity=0.5)
    chunks: list[bytes] = []
    with pytest.raises(StreamBroken, match="no byte for 0.5 s"):
        async with client.request("GET", "/watch", kind=RequestClass.WATCH) as answer:
            async for chunk in answer.chunks():
                chunks.append(chunk)
    assert b"".join(chunks).count(b"BOOKMARK") == 3
    assert not client.is_marked_down  # a stream breaking mid-way is not the partition failing


@pytest.mark.parametrize(
    "code, body, error, reason",
    [
        (404, b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"x not found"}', APINotFound, "NotFound"),
        (409, b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}', APIConflict, "Conflict"),
        (410, b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Gone","code":410}', APIExpired, "Gone"),
        (503, b"upstream connect error", APIServerError, "InternalError"),
    ],
)
def test_api_errors_are_built_from_the_status_the_partition_sent(code: int, body: bytes, error: type, reason: str) -> None:
    exc = api_error("tp1", code, body)
    assert type(exc) is error and exc.code == code and exc.reason == reason and exc.body == body
    assert exc.status["kind"] == "Status" and exc.partition == "tp1"


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached within 2 s")


async def test_after_the_partition_closed_an_idle_connection_the_next_call_asks_readyz_first(
        aiohttp_server: ServerFactory, make_client: MakeClient) -> None:
    # A kube-apiserver killed and started again while no call of this worker was in flight: its
    # pooled connection is closed by the other end, and no call failed. The next call must not go
    # straight to a kube-apiserver that may not be ready (it would answer 403).
    ready = True
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.path)
        if request.path == "/readyz":
            return web.Response(text="ok") if ready else web.Response(status=403)
        return web.Response(text="served")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    server = await aiohttp_server(app)
    client = make_client(URL(str(server.make_url("/"))), failures=1000)
    async with client.request("PUT", "/lease", body=b"{}") as answer:
        assert await answer.read() == b"served"
    await _until(lambda: client.idle_connections == 1)
    port = server.port
    await server.close()  # closes the idle keep-alive connection from its side
    await _until(lambda: client.idle_connections == 0)
    assert client.health == "recovering"
    ready = False
    await serve(aiohttp_server, handler, port)
    with pytest.raises(PartitionMarkedDown, match="not ready"):
        async with client.request("PUT", "/lease", body=b"{}"):
            pass
    assert seen == ["/lease", "/readyz"]


async def test_a_watch_whose_connection_the_partition_dropped_makes_the_next_call_ask_readyz_first(
        aiohttp_server: ServerFactory, make_client: MakeClient) -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request.path)
        if request.path == "/watch":
            response = web.StreamResponse()
            await response.prepare(request)
            await response.write(b'{"type":"ADDED"}\n')
            assert request.transport is not None
            request.transport.abort()  # the process died mid-stream
            return response
        return web.Response(text="ok")

    client = make_client(await serve(aiohttp_server, handler), failures=1000)
    with pytest.raises(StreamBroken):
        async with client.request("GET", "/watch", kind=RequestClass.WATCH) as answer:
            async for _ in answer.chunks():
                pass
    assert client.health == "recovering"
    async with client.request("GET", "/x"):
        pass
    assert seen == ["/watch", "/readyz", "/x"] and client.health == "up"


@pytest.mark.parametrize("how", ["answer says Connection: close", "the proxy stops reading a watch"])
async def test_a_connection_closed_as_announced_or_by_the_proxy_raises_no_suspicion(
        how: str, aiohttp_server: ServerFactory, make_client: MakeClient) -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request.path)
        if request.path == "/watch":
            response = web.StreamResponse()
            await response.prepare(request)
            await response.write(b'{"type":"ADDED"}\n')
            await asyncio.sleep(5)
            return response
        return web.Response(text="ok", headers={"Connection": "close"})

    client = make_client(await serve(aiohttp_server, handler), failures=1000)
    if how == "answer says Connection: close":
        async with client.request("GET", "/x") as answer:
            await answer.read()
        await asyncio.sleep(0.1)  # the partition's close arrives
    else:
        async with client.request("GET", "/watch", kind=RequestClass.WATCH) as answer:
            async for _ in answer.chunks():
                break
        await _until(lambda: client.connections == 0)
    assert client.health == "up"
    async with client.request("GET", "/y") as answer:
        await answer.read()
    assert seen[-1] == "/y" and "/readyz" not in seen
