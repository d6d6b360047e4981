"""The HTTP/2 server framing layer (proxy.fronts.http2_protocol), sans I/O: python-hyper's h2
library as the client, and hand-made frames for what a well-behaved client never sends."""

from __future__ import annotations

import h2.errors
import h2.events
import h2.settings
import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.fronts.http2_protocol import (
    CONTINUATION,
    DATA,
    HEADERS,
    PING,
    PRIORITY,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    DataReceived,
    ErrorCode,
    ProtocolError,
    RequestReceived,
    StreamClosed,
    StreamEnded,
    StreamReset,
    WindowOpened,
)
from tests.proxy.fronts.peers import AUTHORITY, STREAM_WINDOW, Peers, frame, frames_of, of, request_headers


def test_a_get_becomes_one_request_and_its_answer_reaches_the_client() -> None:
    p = Peers()
    stream_id = p.request("/api/v1/namespaces/kube-system?resourceVersion=0", **{"user-agent": "kubectl/v1.36", "accept": "application/json"})
    (request,) = p.to_server()
    assert isinstance(request, RequestReceived) and request.stream_id == stream_id and request.ended
    head = request.head
    assert (head.method, head.path, head.authority) == ("GET", "/api/v1/namespaces/kube-system?resourceVersion=0", AUTHORITY)
    assert head.headers == [("user-agent", "kubectl/v1.36"), ("accept", "application/json")]

    p.answer(stream_id, 200, b'{"kind":"Namespace"}', **{"Audit-Id": "abc", "Cache-Control": "no-cache, private"})
    events = p.to_client()
    (response,) = of(events, h2.events.ResponseReceived)
    assert response.headers == [(":status", "200"), ("audit-id", "abc"), ("cache-control", "no-cache, private"),
                                ("content-type", "application/json"), ("content-length", "20")]
    assert [e.data for e in of(events, h2.events.DataReceived)] == [b'{"kind":"Namespace"}']
    assert of(events, h2.events.StreamEnded)
    assert p.server.open_streams == 0


def test_requests_repeated_on_a_connection_decode_the_same_from_the_dynamic_table() -> None:
    p = Peers()
    heads = []
    for _ in range(50):
        p.request("/api/v1/namespaces/acme/pods/p-1", accept="application/vnd.kubernetes.protobuf")
        (request,) = p.to_server()
        heads.append((request.head.method, request.head.path, request.head.headers))
        p.answer(request.stream_id, 200, b"x")
        p.to_client()
    assert len(set(map(repr, heads))) == 1 and p.server.open_streams == 0


def test_an_answer_without_body_ends_its_stream_with_its_headers() -> None:
    p = Peers()
    stream_id = p.request()
    p.to_server()
    p.answer(stream_id, 404)
    events = p.to_client()
    (response,) = of(events, h2.events.ResponseReceived)
    assert dict(response.headers)[":status"] == "404" and response.stream_ended is not None


def test_a_client_that_shrinks_its_header_table_hears_of_it_before_the_next_answer() -> None:
    p = Peers(client_settings={h2.settings.SettingCodes.HEADER_TABLE_SIZE: 0})
    stream_id = p.request()
    p.to_server()
    p.answer(stream_id, 200, b"{}", **{"Content-Encoding": "identity"})
    (response,) = of(p.to_client(), h2.events.ResponseReceived)
    assert dict(response.headers)["content-encoding"] == "identity"


def test_ping_is_answered_as_soon_as_it_is_read() -> None:
    p = Peers()
    p.client.ping(b"12345678")
    assert p.to_server() == []
    (ack,) = of(p.to_client(), h2.events.PingAckReceived)
    assert ack.ping_data == b"12345678"


def test_streams_beyond_max_concurrent_streams_are_refused_and_the_others_go_on() -> None:
    p = Peers(max_concurrent_streams=2)
    ids = [p.request() for _ in range(2)]
    ids.append(5)  # the h2 client keeps to the limit: a third stream by hand
    events = p.to_server(frame(HEADERS, 5, p.client.encoder.encode(request_headers()), 0x5))
    assert [e.stream_id for e in of(events, RequestReceived)] == ids[:2]
    assert frames_of(p.server.data_to_send()) == [(RST_STREAM, 0, ids[2], ErrorCode.REFUSED_STREAM.to_bytes(4, "big"))]
    p.answer(ids[0], 200, b"ok")
    assert of(p.to_client(), h2.events.StreamEnded)
    p.client.highest_outbound_stream_id = 5  # taken by hand
    p.request()
    assert len(of(p.to_server(), RequestReceived)) == 1  # a slot is free again


def test_after_goaway_open_streams_end_and_new_ones_are_refused() -> None:
    p = Peers()
    first = p.request()
    p.to_server()
    p.server.goaway(ErrorCode.NO_ERROR)
    (terminated,) = of(p.to_client(), h2.events.ConnectionTerminated)
    assert (terminated.error_code, terminated.last_stream_id) == (0, first)
    # a request the client sent before it read the GOAWAY
    late = frame(HEADERS, first + 2, hpack.Encoder().encode(request_headers()), 0x4 | 0x1)
    assert p.server.receive(late) == []
    assert p.server.data_to_send()[3] == RST_STREAM
    p.answer(first, 200, b"done")
    assert p.server.open_streams == 0


def test_a_large_answer_is_cut_to_the_clients_frame_size_and_waits_for_its_windows() -> None:
    p = Peers()
    stream_id = p.request()
    p.to_server()
    body = bytes(range(256)) * 1000  # 256,000 bytes against the client's 65,535-byte windows
    p.server.send_headers(stream_id, p.encoder.encode(200, []), end=False)
    sent = p.server.send_data(stream_id, body, end=True)
    assert sent == 65_535 and p.server.window(stream_id) == 0
    received = bytearray()
    while sent < len(body):
        events = p.to_client()
        for e in of(events, h2.events.DataReceived):
            assert len(e.data) <= 16_384
            received += e.data
            p.client.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
        opened = p.to_server()
        assert of(opened, WindowOpened)
        sent += p.server.send_data(stream_id, body[sent:], end=True)
    events = p.to_client()
    received += b"".join(e.data for e in of(events, h2.events.DataReceived))
    assert bytes(received) == body and of(events, h2.events.StreamEnded)
    with pytest.raises(StreamClosed):
        p.server.send_data(stream_id, b"more", end=False)


def test_a_larger_initial_window_from_the_client_opens_every_stream() -> None:
    p = Peers()
    stream_id = p.request()
    p.to_server()
    assert p.server.window(stream_id) == 65_535
    p.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
    p.client.increment_flow_control_window(1 << 24)
    assert of(p.to_server(), WindowOpened)
    assert p.server.window(stream_id) == 1 << 20


def test_a_request_body_is_acknowledged_as_it_is_consumed() -> None:
    p = Peers()
    stream_id = p.request(method="POST", end=False, **{"content-length": str(3 * STREAM_WINDOW)})
    (request,) = p.to_server()
    assert not request.ended
    body = b"b" * (3 * STREAM_WINDOW)
    received = 0
    sent = 0
    updates = 0
    while received < len(body):
        window = p.client.local_flow_control_window(stream_id)
        if window and sent < len(body):
            n = min(window, 16_384, len(body) - sent)
            p.client.send_data(stream_id, body[sent : sent + n], end_stream=sent + n == len(body))
            sent += n
        for event in p.to_server():
            if isinstance(event, DataReceived):
                received += len(event.data)
                p.server.acknowledge(stream_id, event.flow_controlled)
        events = p.to_client()
        updates += len(of(events, h2.events.WindowUpdated))
    assert received == len(body)
    # half a window at a time, for the stream and the connection: a handful, not one per frame
    assert 4 <= updates <= 16


def test_a_client_sending_past_its_stream_window_has_that_stream_reset() -> None:
    p = Peers()
    stream_id = p.request(method="POST", end=False)
    p.to_server()
    chunk = frame(DATA, stream_id, b"x" * 16_384)
    events = []
    for _ in range(STREAM_WINDOW // 16_384 + 1):
        events += p.server.receive(chunk)
    (reset,) = of(events, StreamReset)
    assert (reset.stream_id, reset.code, reset.remote) == (stream_id, ErrorCode.FLOW_CONTROL_ERROR, False)


def test_a_body_longer_than_its_content_length_resets_the_stream() -> None:
    p = Peers()
    stream_id = p.request(method="POST", end=False, **{"content-length": "3"})
    p.to_server()
    events = p.server.receive(frame(DATA, stream_id, b"four", 0x1))
    assert [(type(e), e.code) for e in of(events, StreamReset)] == [(StreamReset, ErrorCode.PROTOCOL_ERROR)]


def test_a_body_ends_with_its_last_data_frame_or_with_trailers() -> None:
    p = Peers()
    first = p.request(method="POST", end=False)
    second = p.request(method="POST", end=False)
    p.to_server()
    p.client.send_data(first, b"abc", end_stream=True)
    p.client.send_data(second, b"def")
    p.client.send_headers(second, [("x-trailer", "1")], end_stream=True)
    events = p.to_server()
    assert [(type(e).__name__, e.stream_id) for e in events] == [
        ("DataReceived", first), ("StreamEnded", first), ("DataReceived", second), ("StreamEnded", second)]


def test_a_client_reset_is_an_event_and_closes_the_stream() -> None:
    p = Peers()
    stream_id = p.request(method="POST", end=False)
    p.to_server()
    p.client.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
    (reset,) = p.to_server()
    assert isinstance(reset, StreamReset) and (reset.stream_id, reset.code, reset.remote) == (stream_id, ErrorCode.CANCEL, True)
    with pytest.raises(StreamClosed):
        p.server.send_headers(stream_id, b"\x88", end=True)
    assert p.server.receive(frame(WINDOW_UPDATE, stream_id, (5).to_bytes(4, "big")) + frame(RST_STREAM, stream_id, bytes(4))) == []
    assert p.server.data_to_send() == b""


def test_frames_the_client_sent_before_it_read_our_reset_are_ignored() -> None:
    p = Peers()
    stream_id = p.request(method="POST", end=False)
    p.to_server()
    p.server.reset_stream(stream_id, ErrorCode.CANCEL)
    p.server.data_to_send()
    late = frame(DATA, stream_id, b"late") + frame(HEADERS, stream_id, p.client.encoder.encode([("x-trailer", "1")]), 0x5)
    assert p.server.receive(late) == [] and p.server.data_to_send() == b""
    # the connection's window got those bytes back: 4 more bytes are owed, with the next ones
    p.server.acknowledge(stream_id, 1_000_000)
    (update,) = frames_of(p.server.data_to_send())
    assert update[:3] == (WINDOW_UPDATE, 0, 0) and int.from_bytes(update[3], "big") == 1_000_004


def test_a_reset_from_the_front_closes_the_stream_for_the_client() -> None:
    p = Peers()
    stream_id = p.request()
    p.to_server()
    p.server.reset_stream(stream_id, ErrorCode.CANCEL)
    (reset,) = of(p.to_client(), h2.events.StreamReset)
    assert (reset.stream_id, reset.error_code) == (stream_id, h2.errors.ErrorCodes.CANCEL)
    p.server.reset_stream(stream_id, ErrorCode.CANCEL)  # once only
    assert p.server.data_to_send() == b""


def test_priority_and_unknown_frames_are_read_and_ignored() -> None:
    p = Peers()
    p.request()
    extra = frame(PRIORITY, 9, (1).to_bytes(4, "big") + b"\x10") + frame(0xFA, 0, b"what is this")
    events = p.to_server(extra)
    assert [type(e) for e in events] == [RequestReceived]


def test_padded_headers_and_data_are_unpadded() -> None:
    p = Peers()
    block = hpack.Encoder().encode(request_headers(method="POST"))
    padded_headers = frame(HEADERS, 1, bytes([3]) + block + b"\0\0\0", 0x4 | 0x8)
    padded_data = frame(DATA, 1, bytes([2]) + b"body" + b"\0\0", 0x1 | 0x8)
    events = p.server.receive(padded_headers + padded_data)
    assert [type(e) for e in events] == [RequestReceived, DataReceived, StreamEnded]
    assert events[1].data == b"body" and events[1].flow_controlled == 7


def test_a_header_block_in_continuation_frames_is_one_request() -> None:
    p = Peers()
    block = hpack.Encoder().encode(request_headers(**{"x-long": "v" * 40_000}))
    frames = frame(HEADERS, 1, block[:16_384], 0x1)
    frames += frame(CONTINUATION, 1, block[16_384:32_768])
    frames += frame(CONTINUATION, 1, block[32_768:], 0x4)
    (request,) = p.server.receive(frames)
    assert dict(request.head.headers)["x-long"] == "v" * 40_000


@given(st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=30))
@settings(max_examples=60, deadline=None)
def test_frames_split_anywhere_across_reads_give_the_same_events(cuts: list[int]) -> None:
    p = Peers()
    p.request("/a")
    p.client.ping(b"abcdefgh")
    second = p.request("/b", method="PUT", end=False)
    p.client.send_data(second, b"0123456789" * 30, end_stream=True)
    wire = p.client.data_to_send()
    events = []
    rest = wire
    for cut in cuts:
        events += p.server.receive(rest[:cut])
        rest = rest[cut:]
    events += p.server.receive(rest)
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["RequestReceived", "RequestReceived", "DataReceived", "StreamEnded"]
    assert b"".join(e.data for e in of(events, DataReceived)) == b"0123456789" * 30
    assert of(p.to_client(), h2.events.PingAckReceived)


# -- connection errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "frames", "code"),
    [
        ("DATA on stream 0", frame(DATA, 0, b"x"), ErrorCode.PROTOCOL_ERROR),
        ("DATA on an idle stream", frame(DATA, 5, b"x"), ErrorCode.PROTOCOL_ERROR),
        ("window past 2^31-1", frame(WINDOW_UPDATE, 0, (2**31 - 1).to_bytes(4, "big")) * 2, ErrorCode.FLOW_CONTROL_ERROR),
        ("a window increment of 0", frame(WINDOW_UPDATE, 0, bytes(4)), ErrorCode.PROTOCOL_ERROR),
        ("RST_STREAM of an idle stream", frame(RST_STREAM, 7, bytes(4)), ErrorCode.PROTOCOL_ERROR),
        ("SETTINGS of a wrong length", frame(SETTINGS, 0, b"\x00\x01\x00"), ErrorCode.FRAME_SIZE_ERROR),
        ("SETTINGS on a stream", frame(SETTINGS, 1, b""), ErrorCode.PROTOCOL_ERROR),
        ("an initial window over 2^31-1", frame(SETTINGS, 0, b"\x00\x04\x80\x00\x00\x00"), ErrorCode.FLOW_CONTROL_ERROR),
        ("a max frame size under 16 KiB", frame(SETTINGS, 0, b"\x00\x05\x00\x00\x10\x00"), ErrorCode.PROTOCOL_ERROR),
        ("PING of 7 bytes", frame(PING, 0, b"1234567"), ErrorCode.FRAME_SIZE_ERROR),
        ("PING on a stream", frame(PING, 1, b"12345678"), ErrorCode.PROTOCOL_ERROR),
        ("HEADERS on an even stream", frame(HEADERS, 2, b"\x82", 0x4), ErrorCode.PROTOCOL_ERROR),
        ("PUSH_PROMISE from a client", frame(0x5, 1, bytes(4)), ErrorCode.PROTOCOL_ERROR),
        ("CONTINUATION without HEADERS", frame(CONTINUATION, 1, b"\x82", 0x4), ErrorCode.PROTOCOL_ERROR),
        ("a frame between HEADERS and its CONTINUATION", frame(HEADERS, 1, b"\x82") + frame(PING, 0, bytes(8)), ErrorCode.PROTOCOL_ERROR),
        ("an HPACK index past the table", frame(HEADERS, 1, b"\xff\x00", 0x5), ErrorCode.COMPRESSION_ERROR),
        ("a truncated HPACK string", frame(HEADERS, 1, b"\x00\x05ab", 0x5), ErrorCode.COMPRESSION_ERROR),
        ("invalid Huffman", frame(HEADERS, 1, b"\x00\x81\xff\x01a", 0x5), ErrorCode.COMPRESSION_ERROR),
        ("a table size over SETTINGS_HEADER_TABLE_SIZE", frame(HEADERS, 1, b"\x3f\xe1\x3f", 0x5), ErrorCode.COMPRESSION_ERROR),
    ],
)
def test_frames_the_protocol_forbids_are_connection_errors_with_their_code(name: str, frames: bytes, code: ErrorCode) -> None:
    p = Peers()
    with pytest.raises(ProtocolError) as raised:
        p.server.receive(frames)
    assert raised.value.code == code, name


def test_headers_on_a_closed_stream_are_a_connection_error() -> None:
    p = Peers()
    stream_id = p.request()
    p.to_server()
    p.answer(stream_id, 204)
    with pytest.raises(ProtocolError) as raised:
        p.server.receive(frame(HEADERS, stream_id, hpack.Encoder().encode(request_headers()), 0x5))
    assert raised.value.code == ErrorCode.STREAM_CLOSED


def test_a_frame_announcing_more_than_max_frame_size_is_refused_from_its_header_alone() -> None:
    p = Peers()
    with pytest.raises(ProtocolError) as raised:
        p.server.receive(b"\xff" * 9)  # nine bytes: 16 MiB announced, none of it buffered
    assert raised.value.code == ErrorCode.FRAME_SIZE_ERROR


def test_a_connection_that_does_not_start_with_the_preface_is_refused_at_once() -> None:
    p = Peers()
    fresh = type(p.server)(max_concurrent_streams=1, max_header_list_size=1024, stream_window=65_535, connection_window=65_535)
    with pytest.raises(ProtocolError) as raised:
        fresh.receive(b"GET / HTTP/1.1\r\n")
    assert raised.value.code == ErrorCode.PROTOCOL_ERROR
    assert fresh.receive(b"PRI * HTTP/2.0\r\n") == []  # a preface arriving in pieces is fine


def test_a_continuation_flood_is_refused_after_64_frames() -> None:
    p = Peers()
    flood = frame(HEADERS, 1, hpack.Encoder().encode(request_headers()), 0x1)
    flood += frame(CONTINUATION, 1, b"\x00" * 16) * 65
    with pytest.raises(ProtocolError) as raised:
        p.server.receive(flood)
    assert raised.value.code == ErrorCode.PROTOCOL_ERROR


@pytest.mark.parametrize("continued", [False, True])
def test_a_header_list_over_the_limit_is_refused(continued: bool) -> None:
    p = Peers(max_header_list_size=16 * 1024)
    if continued:  # a block refused before it is all buffered
        block = hpack.Encoder().encode(request_headers(**{"x-big": "y" * 40_000}))
        wire = frame(HEADERS, 1, block[:10_000]) + frame(CONTINUATION, 1, block[10_000:20_000])
    else:  # small when compressed, large when decoded
        encoder = hpack.Encoder()
        encoder.encode([("x-big", "y" * 4000)])  # in the encoder's table only: rebuilt here
        block = hpack.Encoder().encode(request_headers(**{"x-big": "y" * 4000}))
        wire = frame(HEADERS, 1, block + bytes([0xBE]) * 5, 0x5)  # the field indexed five more times
    with pytest.raises(ProtocolError) as raised:
        p.server.receive(wire)
    assert raised.value.code == ErrorCode.ENHANCE_YOUR_CALM


# -- malformed requests: stream errors, the connection goes on ---------------------------------


def _raw_request(p: Peers, fields: list[tuple[bytes, bytes]]) -> bytes:
    """Stream 1's request as given, HPACK-encoded by the client's own encoder (one table)."""
    assert p.client.get_next_available_stream_id() == 1
    p.client.highest_outbound_stream_id = 1  # the client's next stream is 3
    return frame(HEADERS, 1, p.client.encoder.encode(fields, huffman=False), 0x5)


_GOOD = [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/api"), (b":authority", b"a")]


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("no :path", [f for f in _GOOD if f[0] != b":path"]),
        ("no :method", [f for f in _GOOD if f[0] != b":method"]),
        ("no :scheme", [f for f in _GOOD if f[0] != b":scheme"]),
        ("an empty :path", [(b":path", b"") if f[0] == b":path" else f for f in _GOOD]),
        ("neither :authority nor Host", [f for f in _GOOD if f[0] != b":authority"]),
        ("Host unlike :authority", [*_GOOD, (b"host", b"b")]),
        ("two :path fields", [*_GOOD[:3], (b":path", b"/b"), _GOOD[3]]),
        ("a pseudo-header after a regular field", [*_GOOD[:2], (b"accept", b"*/*"), *_GOOD[2:]]),
        ("an unknown pseudo-header", [*_GOOD, (b":protocol", b"websocket")]),
        ("a response pseudo-header", [*_GOOD, (b":status", b"200")]),
        ("an upper-case name", [*_GOOD, (b"Accept", b"*/*")]),
        ("a name with a space", [*_GOOD, (b"x y", b"1")]),
        ("a colon inside a name", [*_GOOD, (b"x:y", b"1")]),
        ("an empty name", [*_GOOD, (b"", b"1")]),
        ("Connection", [*_GOOD, (b"connection", b"close")]),
        ("Transfer-Encoding", [*_GOOD, (b"transfer-encoding", b"chunked")]),
        ("Upgrade", [*_GOOD, (b"upgrade", b"h2c")]),
        ("Keep-Alive", [*_GOOD, (b"keep-alive", b"1")]),
        ("TE other than trailers", [*_GOOD, (b"te", b"gzip")]),
        ("CR LF in a value: a split request upstream", [*_GOOD, (b"x-a", b"1\r\nimpersonate-user: admin")]),
        ("LF alone in a value", [*_GOOD, (b"x-a", b"1\nx-b: 2")]),
        ("NUL in a value", [*_GOOD, (b"x-a", b"1\x00")]),
        ("CR LF in :path", [(b":path", b"/api HTTP/1.1\r\nx: y") if f[0] == b":path" else f for f in _GOOD]),
        ("a value starting with a space", [*_GOOD, (b"x-a", b" 1")]),
        ("a value ending with a tab", [*_GOOD, (b"x-a", b"1\t")]),
        ("a method that is no token", [(b":method", b"GET /x") if f[0] == b":method" else f for f in _GOOD]),
    ],
)
def test_a_malformed_request_is_reset_and_the_connection_goes_on(name: str, fields: list[tuple[bytes, bytes]]) -> None:
    p = Peers(validate=False)
    assert p.server.receive(_raw_request(p, fields)) == [], name
    wire = p.server.data_to_send()
    assert wire[3] == RST_STREAM and int.from_bytes(wire[9:13], "big") == ErrorCode.PROTOCOL_ERROR, name
    p.request()
    assert len(of(p.to_server(), RequestReceived)) == 1, name


def test_te_trailers_and_a_matching_host_pass() -> None:
    p = Peers()
    (request,) = p.server.receive(_raw_request(p, [*_GOOD, (b"te", b"trailers"), (b"host", b"a")]))
    assert request.head.headers == [("te", "trailers"), ("host", "a")]


def test_trailers_with_a_pseudo_header_reset_the_stream() -> None:
    p = Peers()
    stream_id = p.request(method="POST", end=False)
    p.to_server()
    events = p.server.receive(frame(HEADERS, stream_id, hpack.Encoder().encode([(":path", "/x")]), 0x5))
    assert [(e.stream_id, e.code) for e in of(events, StreamReset)] == [(stream_id, ErrorCode.PROTOCOL_ERROR)]


def test_a_stream_depending_on_itself_is_reset() -> None:
    p = Peers()
    assert p.client.get_next_available_stream_id() == 1
    p.client.highest_outbound_stream_id = 1
    block = p.client.encoder.encode(request_headers())
    events = p.server.receive(frame(HEADERS, 1, (1).to_bytes(4, "big") + b"\x10" + block, 0x5 | 0x20))
    assert events == [] and p.server.data_to_send()[3] == RST_STREAM
    p.request()
    assert len(of(p.to_server(), RequestReceived)) == 1


def test_a_client_sending_a_byte_at_a_time_is_understood() -> None:
    p = Peers()
    stream_id = p.request(method="PUT", end=False)
    p.client.send_data(stream_id, b"x" * 10_000, end_stream=True)
    events = []
    for byte in p.client.data_to_send():
        events += p.server.receive(bytes((byte,)))
    assert [type(e) for e in events] == [RequestReceived, DataReceived, StreamEnded]
    assert events[1].data == b"x" * 10_000


def test_a_content_length_that_is_no_ascii_number_resets_the_stream_instead_of_failing() -> None:
    p = Peers(validate=False)
    fields = [*_GOOD, (b"content-length", "\u00b2".encode("latin-1"))]  # a digit to str.isdigit, not to int
    block = p.client.encoder.encode([(b":method", b"POST"), *fields[1:]], huffman=False)
    assert p.server.receive(frame(HEADERS, 1, block, 0x4)) == []
    assert frames_of(p.server.data_to_send()) == [(RST_STREAM, 0, 1, ErrorCode.PROTOCOL_ERROR.to_bytes(4, "big"))]
