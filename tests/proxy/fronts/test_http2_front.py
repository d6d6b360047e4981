"""The HTTP/2 front's connection (proxy.fronts.http2.Http2Connection) on an event loop, with a
transport that records what is written, a pipeline of the test's own, and python-hyper's h2
library as the client."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import pytest
from multidict import CIMultiDict

from proxy.cache.cache_watcher import CacheWatcher
from proxy.fronts import deadlines
from proxy.fronts.http2 import Http2Connection, Http2Front
from proxy.messages import Answer, ClientGone, Outcome, Request
from routing.selectors import parse_field_selector, parse_label_selector
from tests.cyclic_garbage import CyclicGarbage
from tests.proxy.fronts.peers import Transport, frame, frames_of, request_headers

Handler = Callable[[Request, Any], Awaitable[None]]


class Pipeline:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Request] = []

    async def handle(self, request: Request, writer: Any) -> None:
        self.requests.append(request)
        await self.handler(request, writer)


class Client:
    """An h2 client connected to one Http2Connection."""

    def __init__(self, handler: Handler, *, write_timeout: float = 5.0, max_concurrent_streams: int = 100,
                 client_settings: dict[int, int] | None = None) -> None:
        self.pipeline = Pipeline(handler)
        self.front = Http2Front(self.pipeline, max_concurrent_streams=max_concurrent_streams,  # type: ignore[arg-type]
                                max_header_list_size=256 * 1024, write_timeout=write_timeout)
        self.server: Http2Connection = self.front.protocol()
        self.transport = Transport()
        self.server.connection_made(self.transport)  # type: ignore[arg-type]
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        if client_settings:
            self.h2.update_settings(client_settings)
        self.events: list[h2.events.Event] = []

    def send(self, raw: bytes = b"") -> None:
        self.server.data_received(self.h2.data_to_send() + raw)

    async def exchange(self, turns: int = 5) -> list[h2.events.Event]:
        """Let the loop run, then read what the server wrote; the client's answers go back."""
        for _ in range(turns):
            await asyncio.sleep(0)
        events = self.h2.receive_data(self.transport.take())
        self.events += events
        self.send()
        return events

    def request(self, path: str = "/api/v1/namespaces", method: str = "GET", *, body: bytes = b"", **headers: str) -> int:
        stream_id: int = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream_id, request_headers(path, method, **headers), end_stream=not body)
        if body:
            self.h2.send_data(stream_id, body, end_stream=True)
        self.send()
        return stream_id

    def answer(self, stream_id: int) -> tuple[dict[str, str], bytes, int | None]:
        """(headers, body, reset code) of a stream, from the events read so far."""
        headers: dict[str, str] = {}
        body = b""
        reset = None
        for e in self.events:
            if getattr(e, "stream_id", None) != stream_id:
                continue
            if isinstance(e, h2.events.ResponseReceived):
                headers = dict(e.headers)
            elif isinstance(e, h2.events.DataReceived):
                body += e.data
            elif isinstance(e, h2.events.StreamReset):
                reset = e.error_code
        return headers, body, reset

    def goaway(self) -> int | None:
        codes = [e.error_code for e in self.events if isinstance(e, h2.events.ConnectionTerminated)]
        return codes[-1] if codes else None

    def close(self) -> None:
        self.transport.closed = True
        self.server.connection_lost(None)


async def _ok(request: Request, writer: Any) -> None:
    await writer.respond(Answer(200, b'{"kind":"NamespaceList"}', CIMultiDict({"Audit-Id": "a-1", "Connection": "keep-alive"})))


async def test_a_get_goes_down_the_pipeline_and_its_answer_leaves_in_one_write() -> None:
    c = Client(_ok)
    await c.exchange()
    await c.exchange()  # SETTINGS acknowledged both ways
    stream_id = c.request("/api/v1/namespaces?labelSelector=a%3Db&limit=5", **{"user-agent": "kubectl"})
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(c.transport.writes) == 1  # HEADERS and DATA of the answer together
    await c.exchange()
    headers, body, reset = c.answer(stream_id)
    assert headers == {":status": "200", "audit-id": "a-1", "content-type": "application/json", "content-length": "24"}
    assert body == b'{"kind":"NamespaceList"}' and reset is None
    (request,) = c.pipeline.requests
    assert (request.method, request.raw_path, request.query_string, request.protocol) == (
        "GET", "/api/v1/namespaces", "labelSelector=a%3Db&limit=5", "h2")
    assert dict(request.query) == {"labelSelector": "a=b", "limit": "5"}
    assert request.headers["User-Agent"] == "kubectl" and request.headers["Host"] == "proxy.test:6443"
    assert not request.body.can_read
    c.close()


async def test_a_head_answer_carries_the_length_and_no_body() -> None:
    c = Client(_ok)
    await c.exchange()
    stream_id = c.request(method="HEAD")
    await c.exchange()
    headers, body, _ = c.answer(stream_id)
    assert headers["content-length"] == "24" and body == b""
    assert any(isinstance(e, h2.events.StreamEnded) and e.stream_id == stream_id for e in c.events)
    c.close()


async def test_a_request_body_reaches_the_pipeline() -> None:
    received = []

    async def echo(request: Request, writer: Any) -> None:
        received.append(await request.body.read(10 * 1024 * 1024))
        await writer.respond(Answer(201, b"{}"))

    c = Client(echo)
    await c.exchange()
    body = b"0123456789" * 5000
    stream_id = c.h2.get_next_available_stream_id()
    c.h2.send_headers(stream_id, request_headers("/api/v1/namespaces", "POST", **{"content-length": str(len(body))}))
    for start in range(0, len(body), 16_000):
        await c.exchange()
        c.h2.send_data(stream_id, body[start : start + 16_000], end_stream=start + 16_000 >= len(body))
        c.send()
    await c.exchange()
    assert received == [body] and c.answer(stream_id)[0][":status"] == "201"
    assert c.pipeline.requests[0].content_length == len(body)
    c.close()


async def test_a_stream_whose_window_stays_shut_is_reset_and_the_connection_goes_on() -> None:
    async def stream(request: Request, writer: Any) -> None:
        if request.raw_path == "/slow":
            await writer.start(200, CIMultiDict(), content_type="application/json")
            await writer.write(b"x" * 100)  # past the client's 10-byte window
            await writer.end()
        else:
            await _ok(request, writer)

    c = Client(stream, write_timeout=0.2, client_settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 10})
    await c.exchange()
    await c.exchange()
    slow = c.request("/slow")
    await c.exchange()
    _, body, reset = c.answer(slow)
    assert body == b"x" * 10 and reset is None  # what fits, then it waits
    await asyncio.sleep(0.3)
    await c.exchange()
    assert c.answer(slow)[2] == h2.errors.ErrorCodes.CANCEL
    other = c.request("/api/v1/namespaces")
    await c.exchange()
    assert c.answer(other)[0][":status"] == "200" and c.goaway() is None and not c.transport.closed
    c.close()


async def test_a_bug_in_the_pipeline_resets_its_stream_only() -> None:
    async def buggy(request: Request, writer: Any) -> None:
        if request.raw_path == "/bug":
            raise RuntimeError("a bug")
        await _ok(request, writer)

    c = Client(buggy)
    await c.exchange()
    bad = c.request("/bug")
    good = c.request("/fine")
    await c.exchange()
    assert c.answer(bad)[2] == h2.errors.ErrorCodes.INTERNAL_ERROR
    assert c.answer(good)[0][":status"] == "200"
    c.close()


async def test_rapid_reset_gets_goaway_enhance_your_calm() -> None:
    async def never(request: Request, writer: Any) -> None:
        await asyncio.Event().wait()

    c = Client(never)
    await c.exchange()
    for _ in range(300):
        stream_id = c.request("/api/v1/pods?watch=1")
        c.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
    c.send()
    await c.exchange()
    assert c.goaway() == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM and c.transport.closed
    c.close()
    await asyncio.sleep(0)


async def test_a_client_closing_answered_watches_is_not_rapid_reset() -> None:
    async def watch(request: Request, writer: Any) -> None:
        await writer.start(200, CIMultiDict(), content_type="application/json")
        await asyncio.Event().wait()

    c = Client(watch, max_concurrent_streams=1000)
    await c.exchange()
    ids = [c.request("/api/v1/pods?watch=1") for _ in range(300)]
    await c.exchange()
    for stream_id in ids:
        c.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
    c.send()
    await c.exchange()
    assert c.goaway() is None and not c.transport.closed
    c.close()


async def test_a_protocol_error_gets_goaway_with_its_code_and_the_connection_closes() -> None:
    c = Client(_ok)
    await c.exchange()
    c.send(frame(0x0, 0, b"x"))  # DATA on stream 0
    await c.exchange()
    assert c.goaway() == h2.errors.ErrorCodes.PROTOCOL_ERROR and c.transport.closed
    c.close()


async def test_output_the_client_leaves_unread_disconnects_it() -> None:
    c = Client(_ok)
    await c.exchange()
    c.transport.buffered = 5 * 1024 * 1024
    c.h2.ping(b"pingpong")
    c.send()
    assert c.transport.closed
    assert h2.events.ConnectionTerminated in {type(e) for e in c.h2.receive_data(c.transport.take())}
    c.close()


async def test_shutdown_sends_goaway_lets_open_streams_end_and_refuses_new_ones() -> None:
    release = asyncio.Event()

    async def slow(request: Request, writer: Any) -> None:
        await release.wait()
        await _ok(request, writer)

    c = Client(slow)
    await c.exchange()
    first = c.request()
    await c.exchange()
    shutdown = asyncio.create_task(c.server.shutdown(5.0))
    await c.exchange()
    assert c.goaway() == h2.errors.ErrorCodes.NO_ERROR
    late = first + 2  # sent before the client read the GOAWAY (h2 itself would not send it)
    c.send(frame(0x1, late, c.h2.encoder.encode(request_headers()), 0x5))
    release.set()
    await shutdown
    sent = frames_of(bytes(c.transport.all))
    assert (0x0, 0x1, first, b'{"kind":"NamespaceList"}') in sent  # the open stream's answer, ended
    assert (0x3, 0, late, (7).to_bytes(4, "big")) in frames_of(bytes(c.transport.all))  # RST_STREAM REFUSED_STREAM
    assert c.transport.closed and len(c.pipeline.requests) == 1
    c.close()


class Lines:
    """A LineSource of the test's own."""

    def __init__(self, queued: list[bytes]) -> None:
        self.queued = queued
        self.sink: Callable[[bytes], None] | None = None
        self.terminated = False
        self.detached = False

    def attach(self, sink: Callable[[bytes], None]) -> list[bytes]:
        self.sink = sink
        queued, self.queued = self.queued, []
        return queued

    def detach(self) -> None:
        self.detached = True  # the sink is kept: tests push to an ended stream through it


async def _pushed(lines: Lines, outcomes: list[str]) -> Handler:
    async def handler(request: Request, writer: Any) -> None:
        await writer.start(200, CIMultiDict(), content_type="application/json")
        loop = asyncio.get_running_loop()
        assert writer.detach(lines, deadline=loop.time() + 60, on_end=outcomes.append)

    return handler


async def test_a_pushed_watch_writes_each_line_without_a_task_and_ends_with_its_source() -> None:
    lines, outcomes = Lines([b'{"type":"ADDED"}\n']), []
    c = Client(await _pushed(lines, outcomes))
    await c.exchange()
    stream_id = c.request("/api/v1/nodes?watch=1")
    await c.exchange()
    assert c.answer(stream_id)[1] == b'{"type":"ADDED"}\n'
    assert lines.sink is not None
    lines.sink(b'{"type":"MODIFIED"}\n')
    await c.exchange()
    assert c.answer(stream_id)[1] == b'{"type":"ADDED"}\n{"type":"MODIFIED"}\n'
    lines.terminated = True
    lines.sink(b"")
    await c.exchange()
    assert outcomes == [Outcome.DONE]
    assert any(isinstance(e, h2.events.StreamEnded) and e.stream_id == stream_id for e in c.events)
    c.close()


async def test_a_pushed_watch_the_client_resets_ends_gone() -> None:
    lines, outcomes = Lines([]), []
    c = Client(await _pushed(lines, outcomes))
    await c.exchange()
    stream_id = c.request("/api/v1/nodes?watch=1")
    await c.exchange()
    c.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
    c.send()
    assert outcomes == [Outcome.GONE]
    assert lines.sink is not None
    lines.sink(b"late\n")  # nothing written, nothing raised
    c.close()


async def test_a_pushed_watch_whose_window_stays_shut_is_reset() -> None:
    lines, outcomes = Lines([]), []
    c = Client(await _pushed(lines, outcomes), write_timeout=0.2, client_settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 8})
    await c.exchange()
    await c.exchange()
    stream_id = c.request("/api/v1/nodes?watch=1")
    await c.exchange()
    assert lines.sink is not None
    lines.sink(b"0123456789abcdef\n")
    await c.exchange()
    assert c.answer(stream_id)[1] == b"01234567"
    await asyncio.sleep(0.3)
    await c.exchange()
    assert c.answer(stream_id)[2] == h2.errors.ErrorCodes.CANCEL and outcomes == [Outcome.GONE]
    c.close()


async def test_a_write_to_a_stream_the_client_reset_raises_client_gone() -> None:
    gone = []
    proceed = asyncio.Event()

    async def handler(request: Request, writer: Any) -> None:
        await writer.start(200, CIMultiDict())
        await proceed.wait()
        try:
            await writer.write(b"late")
        except ClientGone:
            gone.append(True)
            raise

    c = Client(handler)
    await c.exchange()
    stream_id = c.request()
    await c.exchange()
    c.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
    c.send()
    proceed.set()
    await c.exchange()
    # The reset cancelled the task (the client gave up): it never got to write.
    assert gone == [] and stream_id not in c.server._streams
    c.close()


@pytest.mark.parametrize("status", [200, 201, 404, 410, 429, 503])
async def test_statuses_and_proxy_answers_read_back_as_sent(status: int) -> None:
    async def answer(request: Request, writer: Any) -> None:
        await writer.respond(Answer(status, b"404 page not found\n", CIMultiDict({"Retry-After": "1", "Warning": '299 - "stale"'}),
                                    content_type="text/plain; charset=utf-8"))

    c = Client(answer)
    await c.exchange()
    stream_id = c.request()
    await c.exchange()
    headers, body, _ = c.answer(stream_id)
    assert headers == {":status": str(status), "retry-after": "1", "warning": '299 - "stale"',
                       "content-type": "text/plain; charset=utf-8", "content-length": "19"}
    assert body == b"404 page not found\n"
    c.close()


async def test_a_get_whose_content_length_is_no_ascii_number_is_served_without_one() -> None:
    c = Client(_ok)
    await c.exchange()
    stream_id = c.h2.get_next_available_stream_id()
    fields = [(n.encode(), v.encode()) for n, v in request_headers()]
    c.h2.send_headers(stream_id, [*fields, (b"content-length", b"\xb2")], end_stream=True)  # latin-1 "\u00b2"
    c.send()
    await c.exchange()
    assert c.answer(stream_id)[0][":status"] == "200" and c.pipeline.requests[0].content_length is None
    c.close()


async def test_ended_streams_are_freed_by_reference_counting_not_left_in_cycles() -> None:
    """A stream that ends leaves no reference cycle behind: the proxy answers hundreds of
    requests a second, and cycles wait for a full collection (proxy.loop_health freezes their
    survivors for up to FROZEN_SWEEP_SECONDS), which showed as a 50 MiB sawtooth in bench/soak."""
    async def echo(request: Request, writer: Any) -> None:
        await request.body.read(1024)
        await writer.respond(Answer(201, b"{}"))

    lines, outcomes = Lines([b'{"type":"ADDED"}\n']), []
    pushed = await _pushed(lines, outcomes)
    watcher = CacheWatcher(label_selector=parse_label_selector(""), field_selector=parse_field_selector(""))
    watches = {"/api/v1/nodes": pushed, "/api/v1/pods": await _pushed(watcher, outcomes)}  # type: ignore[arg-type]

    async def route(request: Request, writer: Any) -> None:
        await (watches[request.raw_path] if request.query.get("watch") else echo)(request, writer)

    with CyclicGarbage() as garbage:
        c = Client(route)
        await c.exchange()
        get = c.request("/api/v1/namespaces")
        post = c.request("/api/v1/namespaces", "POST", body=b'{"kind":"Namespace"}')
        watch = c.request("/api/v1/nodes?watch=1")
        cached = c.request("/api/v1/pods?watch=1")
        await c.exchange()
        lines.terminated = True
        assert lines.sink is not None
        lines.sink(b"")
        watcher.finish()  # as at a shutdown: the cache watcher's end marker
        await c.exchange()
        assert [c.answer(s)[0].get(":status") for s in (get, post, watch, cached)] == ["201", "201", "200", "200"]
        assert outcomes == [Outcome.DONE, Outcome.DONE]
        c.close()
        watches.clear()  # the cache watcher is referenced from here on only by what the stream left
        del c, watcher
    assert not garbage.types & {"_Stream", "_Writer", "_Body", "_Pushed", "CacheWatcher", "Event", "TimerHandle"}, garbage.types


async def test_a_pushed_watch_ends_cleanly_at_its_deadline_and_an_ended_one_leaves_no_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadlines, "DEADLINE_RESOLUTION", 0.05)
    lines, outcomes = Lines([]), list[str]()

    async def handler(request: Request, writer: Any) -> None:
        await writer.start(200, CIMultiDict(), content_type="application/json")
        seconds = 0.1 if "short" in request.raw_path else 60
        assert writer.detach(lines, deadline=asyncio.get_running_loop().time() + seconds, on_end=outcomes.append)

    c = Client(handler)
    await c.exchange()
    short = c.request("/api/v1/short?watch=1")
    long = c.request("/api/v1/long?watch=1")
    await c.exchange()
    assert len(c.server.deadlines) == 2 and outcomes == []
    await asyncio.sleep(0.1 + 0.05 + 0.1)
    await c.exchange()
    assert outcomes == [Outcome.DONE]  # the short one, at its deadline
    assert any(isinstance(e, h2.events.StreamEnded) and e.stream_id == short for e in c.events)
    assert len(c.server.deadlines) == 1
    c.h2.reset_stream(long, h2.errors.ErrorCodes.CANCEL)
    c.send()
    assert outcomes == [Outcome.DONE, Outcome.GONE]
    assert len(c.server.deadlines) == 0  # the reset one's deadline went with it
    c.close()
