"""The shutdown's gradual drain (proxy.fronts.drain): its pacing, the open streams by connection
(proxy.context.OpenStreams), and the listener letting HTTP/2 connections go one by one, each
watch ended cleanly before its connection's GOAWAY, with python-hyper's h2 as the clients."""

from __future__ import annotations

import asyncio
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from proxy.context import OpenStreams
from proxy.fronts.drain import DRAIN_MIN_PER_SECOND, drain_offsets
from proxy.fronts.http1 import Http1Front
from proxy.fronts.http2 import Http2Front
from proxy.fronts.listener import Listener
from proxy.messages import Request
from tests.proxy.fronts.peers import Transport, request_headers


@given(count=st.integers(0, 5000), seconds=st.floats(0, 120), rate=st.floats(0.5, 1000))
def test_offsets_start_at_once_rise_evenly_end_before_the_drain_time_and_never_go_slower_than_the_rate(
        count: int, seconds: float, rate: float) -> None:
    offsets = drain_offsets(count, seconds=seconds, min_per_second=rate)
    assert len(offsets) == count
    if not count:
        return
    assert offsets[0] == 0.0
    steps = {round(b - a, 9) for a, b in zip(offsets, offsets[1:])}
    assert len(steps) <= 1  # evenly spaced
    step = steps.pop() if steps else 0.0
    assert step <= 1 / rate + 1e-9
    assert offsets[-1] <= seconds  # the last goes within the drain time (at 0 when it is 0)
    if seconds / count <= 1 / rate:  # the drain time, not the rate, sets the pace: it is all used
        assert offsets[-1] == pytest.approx(seconds * (count - 1) / count)


def test_a_few_connections_go_at_the_rate_and_many_share_the_drain_time() -> None:
    assert drain_offsets(3, seconds=10.0) == pytest.approx([0.0, 1 / DRAIN_MIN_PER_SECOND, 2 / DRAIN_MIN_PER_SECOND])
    assert drain_offsets(1000, seconds=10.0)[-1] == pytest.approx(9.99)
    assert drain_offsets(4, seconds=0.0) == [0.0] * 4


@pytest.mark.parametrize("args", [(-1, 1.0, 25.0), (1, -1.0, 25.0), (1, 1.0, 0.0)])
def test_bad_pacing_raises(args: tuple[int, float, float]) -> None:
    count, seconds, rate = args
    with pytest.raises(ValueError):
        drain_offsets(count, seconds=seconds, min_per_second=rate)


def test_ending_a_connection_ends_its_streams_only_and_every_later_one_on_it_at_once() -> None:
    streams, ended = OpenStreams(), []
    streams.add(lambda: ended.append("a1"), "a")
    streams.add(lambda: ended.append("a2"), "a")
    b1 = lambda: ended.append("b1")  # noqa: E731
    streams.add(b1, "b")
    assert streams.end_connection("a") == 2
    assert sorted(ended) == ["a1", "a2"]
    streams.add(lambda: ended.append("a3"), "a")  # a stream that opened on "a" meanwhile
    assert ended[-1] == "a3"
    streams.discard(b1, "b")
    streams.add(lambda: ended.append("b2"), "b")
    assert "b1" not in ended and "b2" not in ended
    streams.end_all()
    assert ended[-1] == "b2" and "b1" not in ended
    streams.add(lambda: ended.append("c1"), "c")  # after end_all: at once, on any connection
    assert ended[-1] == "c1"


def test_discarded_streams_leave_nothing_behind() -> None:
    streams = OpenStreams()
    closers = [lambda: None for _ in range(3)]
    for i, closer in enumerate(closers):
        streams.add(closer, i % 2)
    assert len(streams) == 3
    for i, closer in enumerate(closers):
        streams.discard(closer, i % 2)
    streams.discard(closers[0], "unknown")
    assert len(streams) == 0


class _Pipeline:
    """Every request is a watch: it starts its answer, registers its closer on its connection,
    and ends cleanly when the closer is called (as the proxy's watches do)."""

    def __init__(self, streams: OpenStreams) -> None:
        self.streams = streams
        self.ended_at: dict[object, float] = {}  # connection -> loop time its watch was asked to end

    async def handle(self, request: Request, writer: Any) -> None:
        await writer.start(200, CIMultiDict(), content_type="application/json")
        await writer.write(b'{"type":"ADDED"}\n')
        asked = asyncio.Event()

        def closer() -> None:
            self.ended_at.setdefault(writer.connection, asyncio.get_running_loop().time())
            asked.set()

        with self.streams.stream(closer, writer.connection):
            await asked.wait()
        await writer.end()


async def test_the_listener_lets_connections_go_one_by_one_each_watch_ending_cleanly_before_its_goaway() -> None:
    streams = OpenStreams()
    pipeline = _Pipeline(streams)
    front = Http2Front(pipeline, max_concurrent_streams=100, max_header_list_size=256 * 1024, write_timeout=5.0)  # type: ignore[arg-type]
    listener = Listener(Http1Front(pipeline, max_line_size=8190, max_field_size=8190, write_timeout=5.0), front)  # type: ignore[arg-type]
    clients = []
    for _ in range(5):
        server = front.protocol()
        transport = Transport()
        server.connection_made(transport)  # type: ignore[arg-type]
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        client.initiate_connection()
        stream_id = client.get_next_available_stream_id()
        client.send_headers(stream_id, request_headers("/api/v1/pods?watch=1"), end_stream=True)
        server.data_received(client.data_to_send())
        clients.append((server, transport, client, stream_id))
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(streams) == 5

    await listener.shutdown(1.0, streams=streams, drain_seconds=10.0)

    times = sorted(pipeline.ended_at.values())
    assert len(times) == 5  # every watch was asked to end, each on its own connection's turn
    step = 1 / DRAIN_MIN_PER_SECOND  # five connections: the drain's floor rate sets the pace
    assert times[-1] - times[0] >= 0.9 * 4 * step  # one by one, not at once
    for server, transport, client, stream_id in clients:
        events = client.receive_data(bytes(transport.all))
        ended = [e for e in events if isinstance(e, h2.events.StreamEnded)]
        goaway = [e for e in events if isinstance(e, h2.events.ConnectionTerminated)]
        assert [e.stream_id for e in ended] == [stream_id]  # the watch ended cleanly (END_STREAM, no reset)
        assert not [e for e in events if isinstance(e, h2.events.StreamReset)]
        assert [e.error_code for e in goaway] == [h2.errors.ErrorCodes.NO_ERROR]
        assert transport.closed
    assert len(streams) == 0  # every watch let go of its registration
