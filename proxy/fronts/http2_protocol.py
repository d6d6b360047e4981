"""HTTP/2 (RFC 9113), the server side of one connection, sans I/O: bytes from the client go into
`ServerConnection.receive`, which returns what happened (events); what the front sends (answer
headers, DATA, resets, GOAWAY) is queued by its methods and taken with `data_to_send`.

Owns: frame parsing and building, SETTINGS, PING, WINDOW_UPDATE, RST_STREAM, GOAWAY, PRIORITY
and CONTINUATION handling, flow control both ways (per stream and per connection), the stream
states (RFC 9113 §5.1) enough to enforce the protocol, and the limits a client cannot pass:
SETTINGS_MAX_CONCURRENT_STREAMS (REFUSED_STREAM beyond it), SETTINGS_MAX_FRAME_SIZE (checked on
a frame's header, before its payload is buffered), `max_header_list_size`, 64 CONTINUATION
frames per header block. Does not own: HPACK (`proxy.fronts.http2_headers`), what a request
means, timers, the transport, or rapid-reset accounting (`proxy.fronts.http2`).

Errors: a connection error raises `ProtocolError` from `receive` with its code; the caller sends
GOAWAY (`goaway`) and closes. A stream error (a malformed request, DATA past a stream's window,
...) is handled here: RST_STREAM is queued, and a `StreamReset` event (`remote=False`) tells the
caller when the stream was one it knew.

Only what a server needs: the client's streams (odd), no server push (SETTINGS_ENABLE_PUSH is
0), no extended CONNECT, priorities read and ignored (RFC 9113 §5.3.2 deprecates them).
"""

from __future__ import annotations

import enum
import struct

from proxy.fronts.http2_headers import (
    DEFAULT_TABLE_SIZE,
    CompressionError,
    HeaderDecoder,
    HeaderListTooLarge,
    MalformedRequest,
    RequestHead,
    request_head,
    trailers_are_valid,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # RFC 9113 §3.4: the client's first bytes

# A frame header (RFC 9113 §4.1) as three fields: length (24 bits) and type (8), flags, reserved
# bit and stream identifier (31).
_FRAME_HEADER = struct.Struct(">LBL")
FRAME_HEADER_SIZE = 9
_SETTING = struct.Struct(">HL")

# frame types (RFC 9113 §6)
DATA = 0x0
HEADERS = 0x1
PRIORITY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PUSH_PROMISE = 0x5
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9
# flags
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20
# settings (RFC 9113 §6.5.2)
SETTINGS_HEADER_TABLE_SIZE = 0x1
SETTINGS_ENABLE_PUSH = 0x2
SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
SETTINGS_MAX_FRAME_SIZE = 0x5
SETTINGS_MAX_HEADER_LIST_SIZE = 0x6

# bytes: the initial flow-control window of a stream and of a connection (RFC 9113 §6.9.2)
DEFAULT_WINDOW = 65_535
MAX_WINDOW = 2**31 - 1
# bytes: the largest frame payload either side may send until told otherwise, and the largest a
# peer may announce (RFC 9113 §4.2). The front keeps the default for what it receives.
DEFAULT_MAX_FRAME_SIZE = 16_384
_LARGEST_FRAME_SIZE = 2**24 - 1
# CONTINUATION frames one header block may take: a header list needs a few at most (256 KiB in
# 16 KiB frames is 16); a flood of them (CVE-2024-27316) is a connection error.
MAX_CONTINUATIONS = 64
# bytes a header block may take over the header list limit before it is refused unread: HPACK
# encodes every field in fewer bytes than the 32 RFC 7541 §4.1 counts it for, but for the two
# table size updates a block may start with (5 bytes each at most).
_BLOCK_SLACK = 16
# streams the front reset that are remembered, so that frames the client sent before it read the
# reset are ignored (RFC 9113 §5.1, "closed"): those of the streams reset within a round trip.
# Streams the client reset need no memory: it sends nothing more on them.
_REMEMBERED_RESETS = 256


class ErrorCode(enum.IntEnum):
    """RFC 9113 §7."""

    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    SETTINGS_TIMEOUT = 0x4
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    CONNECT_ERROR = 0xA
    ENHANCE_YOUR_CALM = 0xB
    INADEQUATE_SECURITY = 0xC
    HTTP_1_1_REQUIRED = 0xD


class ProtocolError(Exception):
    """A connection error (RFC 9113 §5.4.1): send GOAWAY with `code` and close."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class StreamClosed(Exception):
    """The stream cannot be sent on: reset, ended by the front already, or never opened."""


# -- events ----------------------------------------------------------------------------------


class RequestReceived:
    """A new stream: a request's header list, valid (`ended`: HEADERS ended the stream, no body)."""

    __slots__ = ("stream_id", "head", "ended")

    def __init__(self, stream_id: int, head: RequestHead, ended: bool) -> None:
        self.stream_id = stream_id
        self.head = head
        self.ended = ended


class DataReceived:
    """Request body bytes; `flow_controlled` (padding included) is what `acknowledge` gives back."""

    __slots__ = ("stream_id", "data", "flow_controlled")

    def __init__(self, stream_id: int, data: bytes, flow_controlled: int) -> None:
        self.stream_id = stream_id
        self.data = data
        self.flow_controlled = flow_controlled


class StreamEnded:
    """The client ended its side of a stream (the request body is complete)."""

    __slots__ = ("stream_id",)

    def __init__(self, stream_id: int) -> None:
        self.stream_id = stream_id


class StreamReset:
    """A stream closed by RST_STREAM: the client's (`remote`), or ours for a stream error."""

    __slots__ = ("stream_id", "code", "remote")

    def __init__(self, stream_id: int, code: int, remote: bool) -> None:
        self.stream_id = stream_id
        self.code = code
        self.remote = remote


class WindowOpened:
    """A send window grew: one stream's, or (stream_id 0) the connection's or every stream's."""

    __slots__ = ("stream_id",)

    def __init__(self, stream_id: int) -> None:
        self.stream_id = stream_id


class ConnectionTerminated:
    """The client sent GOAWAY."""

    __slots__ = ("code", "last_stream_id")

    def __init__(self, code: int, last_stream_id: int) -> None:
        self.code = code
        self.last_stream_id = last_stream_id


Event = RequestReceived | DataReceived | StreamEnded | StreamReset | WindowOpened | ConnectionTerminated


class _Stream:
    """One open stream's protocol state (RFC 9113 §5.1: open, or half-closed either way)."""

    __slots__ = ("send_window", "recv_window", "unacked", "remote_ended", "local_ended", "expected_length", "received_length")

    def __init__(self, send_window: int, recv_window: int) -> None:
        self.send_window = send_window  # bytes we may still send
        self.recv_window = recv_window  # bytes the client may still send
        self.unacked = 0  # bytes received and consumed, not yet given back by WINDOW_UPDATE
        self.remote_ended = False
        self.local_ended = False
        self.expected_length: int | None = None  # the request's Content-Length
        self.received_length = 0


class _HeaderBlock:
    """A header block still waiting for its CONTINUATION frames."""

    __slots__ = ("stream_id", "flags", "self_dependent", "fragments", "size", "continuations")

    def __init__(self, stream_id: int, flags: int, self_dependent: bool, fragment: bytes) -> None:
        self.stream_id = stream_id
        self.flags = flags
        self.self_dependent = self_dependent
        self.fragments = [fragment]
        self.size = len(fragment)
        self.continuations = 0


def _frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return _FRAME_HEADER.pack(len(payload) << 8 | kind, flags, stream_id) + payload


class ServerConnection:
    """The server side of one HTTP/2 connection (see the module docstring). Plain methods, no
    awaits: each runs atomically on the event loop."""

    def __init__(self, *, max_concurrent_streams: int, max_header_list_size: int, stream_window: int,
                 connection_window: int) -> None:
        """`stream_window`: bytes of request body a stream may send ahead (SETTINGS_INITIAL_WINDOW_SIZE);
        `connection_window`: bytes all streams together may (at least 65,535)."""
        self._max_streams = max_concurrent_streams
        self._max_header_list_size = max_header_list_size
        self._decoder = HeaderDecoder(max_list_size=max_header_list_size)
        self._streams: dict[int, _Stream] = {}
        self._resets: dict[int, None] = {}  # streams the front reset, oldest first
        self._out: list[bytes | memoryview] = []
        # The start of a frame (or of the preface) that is not whole yet, kept in the pieces it
        # came in and joined once `_needed` bytes are there: a client sending a frame a byte at
        # a time costs a copy of it twice, not once per byte.
        self._partial: list[bytes] = []
        self._partial_size = 0
        self._needed = 0
        self._started = False  # the client's preface and the header of its first SETTINGS arrived
        self._block: _HeaderBlock | None = None
        self.highest_stream_id = 0  # the highest stream the client opened (or tried to)
        self._refuse_after: int | None = None  # once GOAWAY is sent: streams above it are refused
        # receiving
        self._stream_window = stream_window
        self._recv_window = connection_window
        self._connection_window = connection_window
        self._unacked = 0
        # sending
        self._send_window = DEFAULT_WINDOW
        self._initial_send_window = DEFAULT_WINDOW
        self.max_send_frame_size = DEFAULT_MAX_FRAME_SIZE
        self._table_size = DEFAULT_TABLE_SIZE  # the answers' encoder's, at most the client's SETTINGS_HEADER_TABLE_SIZE
        self._table_update = b""  # a dynamic table size update owed at the start of the next block

    # -- set-up and output -------------------------------------------------------------------

    def initiate(self) -> None:
        """Queue the server's preface: SETTINGS, then the connection window's increment."""
        settings = b"".join(_SETTING.pack(k, v) for k, v in (
            (SETTINGS_ENABLE_PUSH, 0),
            (SETTINGS_MAX_CONCURRENT_STREAMS, self._max_streams),
            (SETTINGS_INITIAL_WINDOW_SIZE, self._stream_window),
            (SETTINGS_MAX_HEADER_LIST_SIZE, self._max_header_list_size),
        ))
        self._out.append(_frame(SETTINGS, 0, 0, settings))
        if self._connection_window > DEFAULT_WINDOW:
            self._out.append(_frame(WINDOW_UPDATE, 0, 0, (self._connection_window - DEFAULT_WINDOW).to_bytes(4, "big")))

    def data_to_send(self) -> bytes:
        """Every frame queued since the last call, as one bytes object (b"" when none)."""
        out = self._out
        if not out:
            return b""
        data = b"".join(out)
        out.clear()
        return data

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    # -- receiving ---------------------------------------------------------------------------

    def receive(self, data: bytes) -> list[Event]:
        """Parse the client's bytes: the events of every whole frame in them, in order. A frame
        whose header announces more than SETTINGS_MAX_FRAME_SIZE is refused at once. Raises
        ProtocolError (a connection error; events of the frames before it are lost)."""
        if self._partial:
            self._partial.append(data)
            self._partial_size += len(data)
            if self._partial_size < self._needed:
                return []
            buf = b"".join(self._partial)
            self._partial = []
        else:
            buf = data
        pos, end = 0, len(buf)
        if not self._started:
            pos = self._start(buf)
            if pos < 0:
                self._keep(buf, len(PREFACE) + FRAME_HEADER_SIZE)
                return []
        events: list[Event] = []
        needed = FRAME_HEADER_SIZE
        unpack = _FRAME_HEADER.unpack_from
        handlers = _HANDLERS
        while end - pos >= FRAME_HEADER_SIZE:
            length_kind, flags, stream_id = unpack(buf, pos)
            length = length_kind >> 8
            if length > DEFAULT_MAX_FRAME_SIZE:
                raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, f"a frame of {length} bytes, over SETTINGS_MAX_FRAME_SIZE")
            stop = pos + FRAME_HEADER_SIZE + length
            if stop > end:
                needed = stop - pos
                break
            kind = length_kind & 0xFF
            payload = buf[pos + FRAME_HEADER_SIZE : stop]
            pos = stop
            if self._block is not None and kind != CONTINUATION:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "a frame inside a header block")
            if kind <= CONTINUATION:
                handlers[kind](self, flags, stream_id & 0x7FFFFFFF, payload, events)
            # frames of unknown types are ignored (RFC 9113 §5.5)
        if pos < end:
            self._keep(buf[pos:] if pos else buf, needed)
        return events

    def _keep(self, start: bytes, needed: int) -> None:
        self._partial = [start]
        self._partial_size = len(start)
        self._needed = needed

    def _start(self, buf: bytes) -> int:
        """Check the client's preface and that SETTINGS comes first: the offset after them, or
        -1 while they are incomplete."""
        seen = min(len(buf), len(PREFACE))
        if buf[:seen] != PREFACE[:seen]:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "not the HTTP/2 client preface")
        if len(buf) < len(PREFACE) + FRAME_HEADER_SIZE:
            return -1
        length_kind, flags, _ = _FRAME_HEADER.unpack_from(buf, len(PREFACE))
        if length_kind & 0xFF != SETTINGS or flags & ACK:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "the client's first frame is not SETTINGS")
        self._started = True
        return len(PREFACE)

    def _on_data(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0")
        flow_controlled = len(payload)
        self._recv_window -= flow_controlled
        if self._recv_window < 0:
            raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "DATA past the connection's window")
        if flags & PADDED:
            payload = _unpad(payload)
        stream = self._streams.get(stream_id)
        if stream is None:
            if stream_id > self.highest_stream_id:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            if stream_id not in self._resets:  # not sent before the client saw our reset
                self._stream_error(stream_id, ErrorCode.STREAM_CLOSED, events)
            self.acknowledge(stream_id, flow_controlled)  # the connection's share, given back
            return
        code = None
        stream.recv_window -= flow_controlled
        stream.received_length += len(payload)
        ended = flags & END_STREAM
        expected = stream.expected_length
        if stream.remote_ended:
            code = ErrorCode.STREAM_CLOSED
        elif stream.recv_window < 0:
            code = ErrorCode.FLOW_CONTROL_ERROR
        elif expected is not None and (stream.received_length > expected or (ended and stream.received_length != expected)):
            code = ErrorCode.PROTOCOL_ERROR  # a body longer or shorter than its Content-Length (RFC 9113 §8.1.1)
        if code is not None:
            self._stream_error(stream_id, code, events)
            self.acknowledge(stream_id, flow_controlled)
            return
        events.append(DataReceived(stream_id, payload, flow_controlled))
        if ended:
            self._end_remote(stream_id, stream, events)

    def _on_headers(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if stream_id == 0 or not stream_id & 1:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
        if flags & PADDED:
            payload = _unpad(payload)
        self_dependent = False
        if flags & PRIORITY_FLAG:
            if len(payload) < 5:
                raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "HEADERS too short for its priority")
            self_dependent = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == stream_id  # RFC 9113 §5.3.1
            payload = payload[5:]
        if len(payload) > self._max_header_list_size + _BLOCK_SLACK:
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, "a header block over the header list limit")
        if not flags & END_HEADERS:
            self._block = _HeaderBlock(stream_id, flags, self_dependent, payload)
            return
        self._header_block(stream_id, flags, payload, events, self_dependent=self_dependent)

    def _on_continuation(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        block = self._block
        if block is None or block.stream_id != stream_id:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "CONTINUATION outside a header block")
        block.continuations += 1
        if block.continuations > MAX_CONTINUATIONS:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"more than {MAX_CONTINUATIONS} CONTINUATION frames in a header block")
        block.size += len(payload)
        if block.size > self._max_header_list_size + _BLOCK_SLACK:
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, "a header block over the header list limit")
        block.fragments.append(payload)
        if flags & END_HEADERS:
            self._block = None
            self._header_block(stream_id, block.flags, b"".join(block.fragments), events, self_dependent=block.self_dependent)

    def _decode(self, block: bytes) -> list[tuple[str, str, int, int]]:
        try:
            return self._decoder.decode(block)
        except CompressionError as exc:
            raise ProtocolError(ErrorCode.COMPRESSION_ERROR, str(exc)) from None
        except HeaderListTooLarge as exc:
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, str(exc)) from None

    def _header_block(self, stream_id: int, flags: int, block: bytes, events: list[Event], *, self_dependent: bool) -> None:
        """A whole header block: a new request, or trailers. Every block is decoded, even one
        whose stream is refused: the HPACK table is the connection's."""
        fields = self._decode(block)
        ended = bool(flags & END_STREAM)
        stream = self._streams.get(stream_id)
        if stream is not None:  # trailers (RFC 9113 §8.1)
            if stream.remote_ended:
                self._stream_error(stream_id, ErrorCode.STREAM_CLOSED, events)
            elif not ended or self_dependent or not trailers_are_valid(fields):
                self._stream_error(stream_id, ErrorCode.PROTOCOL_ERROR, events)
            elif stream.expected_length is not None and stream.received_length != stream.expected_length:
                self._stream_error(stream_id, ErrorCode.PROTOCOL_ERROR, events)
            else:
                self._end_remote(stream_id, stream, events)
            return
        if stream_id <= self.highest_stream_id:
            if stream_id in self._resets:
                return  # trailers of a stream reset before they arrived
            raise ProtocolError(ErrorCode.STREAM_CLOSED, f"HEADERS on closed stream {stream_id}")
        self.highest_stream_id = stream_id
        if (self._refuse_after is not None and stream_id > self._refuse_after) or len(self._streams) >= self._max_streams:
            self._stream_error(stream_id, ErrorCode.REFUSED_STREAM, events)
            return
        try:
            head = request_head(fields)
        except MalformedRequest:
            self._stream_error(stream_id, ErrorCode.PROTOCOL_ERROR, events)
            return
        if self_dependent:
            self._stream_error(stream_id, ErrorCode.PROTOCOL_ERROR, events)
            return
        stream = _Stream(self._initial_send_window, self._stream_window)
        if ended:
            stream.remote_ended = True
        else:
            for name, value in head.headers:
                if name == "content-length":
                    # isascii: "²" is a digit to str.isdigit, not to int()
                    if not (value.isascii() and value.isdigit()) or (stream.expected_length is not None and int(value) != stream.expected_length):
                        self._stream_error(stream_id, ErrorCode.PROTOCOL_ERROR, events)
                        return
                    stream.expected_length = int(value)
        self._streams[stream_id] = stream
        events.append(RequestReceived(stream_id, head, ended))

    def _on_priority(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0")
        if len(payload) != 5:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "PRIORITY not of 5 bytes")
        if int.from_bytes(payload[:4], "big") & 0x7FFFFFFF == stream_id:  # RFC 9113 §5.3.1
            if stream_id > self.highest_stream_id:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"idle stream {stream_id} depends on itself")
            self._stream_error(stream_id, ErrorCode.PROTOCOL_ERROR, events)

    def _on_rst_stream(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if len(payload) != 4:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "RST_STREAM not of 4 bytes")
        if stream_id > self.highest_stream_id:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"RST_STREAM of idle stream {stream_id}")
        if self._streams.pop(stream_id, None) is not None:
            events.append(StreamReset(stream_id, int.from_bytes(payload, "big"), True))

    def _on_settings(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if stream_id != 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "a SETTINGS acknowledgement with a payload")
            return
        if len(payload) % 6:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6 bytes")
        window_changed = False
        for offset in range(0, len(payload), 6):
            setting, value = _SETTING.unpack_from(payload, offset)
            if setting == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1")
                delta = value - self._initial_send_window
                self._initial_send_window = value
                for stream in self._streams.values():
                    stream.send_window += delta
                    if stream.send_window > MAX_WINDOW:
                        raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "a stream's window over 2^31-1")
                window_changed = window_changed or delta > 0
            elif setting == SETTINGS_MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME_SIZE <= value <= _LARGEST_FRAME_SIZE:
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"SETTINGS_MAX_FRAME_SIZE of {value}")
                self.max_send_frame_size = value
            elif setting == SETTINGS_ENABLE_PUSH:
                if value > 1:
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"SETTINGS_ENABLE_PUSH of {value}")
            elif setting == SETTINGS_HEADER_TABLE_SIZE and value < self._table_size:
                # The answers' encoder uses no dynamic table, but a decoder may insist on hearing
                # that the table shrank (RFC 7541 §4.2): the smallest size, before the next block.
                self._table_size = value
                self._table_update = _size_update(value)
            # SETTINGS_MAX_CONCURRENT_STREAMS limits pushes (none); SETTINGS_MAX_HEADER_LIST_SIZE
            # is advisory; unknown settings are ignored (RFC 9113 §6.5.2)
        self._out.append(_frame(SETTINGS, ACK, 0))
        if window_changed:
            events.append(WindowOpened(0))

    def _on_push_promise(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE from a client")

    def _on_ping(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if stream_id != 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "PING not of 8 bytes")
        if not flags & ACK:
            self._out.append(_frame(PING, ACK, 0, payload))

    def _on_goaway(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if stream_id != 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream")
        if len(payload) < 8:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes")
        last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        events.append(ConnectionTerminated(int.from_bytes(payload[4:8], "big"), last))

    def _on_window_update(self, flags: int, stream_id: int, payload: bytes, events: list[Event]) -> None:
        if len(payload) != 4:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "WINDOW_UPDATE not of 4 bytes")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if stream_id == 0:
            if not increment:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "a WINDOW_UPDATE of 0 for the connection")
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "the connection's window over 2^31-1")
            events.append(WindowOpened(0))
            return
        stream = self._streams.get(stream_id)
        if stream is None:
            if stream_id > self.highest_stream_id:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"WINDOW_UPDATE of idle stream {stream_id}")
            return  # a stream closed meanwhile
        if not increment:
            self._stream_error(stream_id, ErrorCode.PROTOCOL_ERROR, events)
            return
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            self._stream_error(stream_id, ErrorCode.FLOW_CONTROL_ERROR, events)
            return
        events.append(WindowOpened(stream_id))

    # -- stream states -----------------------------------------------------------------------

    def _end_remote(self, stream_id: int, stream: _Stream, events: list[Event]) -> None:
        stream.remote_ended = True
        events.append(StreamEnded(stream_id))
        if stream.local_ended:
            del self._streams[stream_id]

    def _end_local(self, stream_id: int, stream: _Stream) -> None:
        stream.local_ended = True
        if stream.remote_ended:
            del self._streams[stream_id]

    def _stream_error(self, stream_id: int, code: ErrorCode, events: list[Event]) -> None:
        self._out.append(_frame(RST_STREAM, 0, stream_id, code.to_bytes(4, "big")))
        self._remember_reset(stream_id)
        if self._streams.pop(stream_id, None) is not None:
            events.append(StreamReset(stream_id, code, False))

    def _remember_reset(self, stream_id: int) -> None:
        resets = self._resets
        resets[stream_id] = None
        if len(resets) > _REMEMBERED_RESETS:
            del resets[next(iter(resets))]

    # -- sending -----------------------------------------------------------------------------

    def window(self, stream_id: int) -> int:
        """Bytes of DATA the stream may send now (its window and the connection's). Raises
        StreamClosed."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_ended:
            raise StreamClosed(stream_id)
        return min(stream.send_window, self._send_window)

    def send_headers(self, stream_id: int, block: bytes, *, end: bool) -> None:
        """Queue an answer's header block (HPACK-encoded), with END_STREAM when `end`. Raises
        StreamClosed."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_ended:
            raise StreamClosed(stream_id)
        if self._table_update:
            block, self._table_update = self._table_update + block, b""
        flags = END_STREAM if end else 0
        size = self.max_send_frame_size
        if len(block) <= size:
            self._out.append(_FRAME_HEADER.pack(len(block) << 8 | HEADERS, flags | END_HEADERS, stream_id))
            self._out.append(block)
        else:
            self._out.append(_frame(HEADERS, flags, stream_id, block[:size]))
            for start in range(size, len(block), size):
                last = start + size >= len(block)
                self._out.append(_frame(CONTINUATION, END_HEADERS if last else 0, stream_id, block[start : start + size]))
        if end:
            self._end_local(stream_id, stream)

    def send_data(self, stream_id: int, data: bytes | memoryview, *, end: bool) -> int:
        """Queue as much of `data` as the windows allow, in frames of at most the client's
        SETTINGS_MAX_FRAME_SIZE; END_STREAM with the last byte when `end` and all of it fits.
        Returns the bytes queued. Raises StreamClosed."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_ended:
            raise StreamClosed(stream_id)
        size = len(data)
        if not size and not end:
            return 0
        room = stream.send_window if stream.send_window < self._send_window else self._send_window
        if size > room:
            size = room if room > 0 else 0
            end = False
            if not size:
                return 0
        out, frame = self._out, self.max_send_frame_size
        flags = END_STREAM if end else 0
        if size <= frame:
            out.append(_FRAME_HEADER.pack(size << 8 | DATA, flags, stream_id))
            if size:
                out.append(data if size == len(data) else data[:size])
        else:
            view = memoryview(data)
            for start in range(0, size, frame):
                chunk = view[start : min(start + frame, size)]
                out.append(_FRAME_HEADER.pack(len(chunk) << 8 | DATA, flags if start + frame >= size else 0, stream_id))
                out.append(chunk)
        stream.send_window -= size
        self._send_window -= size
        if end:
            self._end_local(stream_id, stream)
        return size

    def end_stream(self, stream_id: int) -> None:
        """End the front's side of a stream (an empty DATA frame with END_STREAM); nothing if it
        is closed already."""
        stream = self._streams.get(stream_id)
        if stream is not None and not stream.local_ended:
            self._out.append(_FRAME_HEADER.pack(DATA, END_STREAM, stream_id))
            self._end_local(stream_id, stream)

    def reset_stream(self, stream_id: int, code: ErrorCode) -> None:
        """Close a stream with RST_STREAM; nothing if it is closed already."""
        if self._streams.pop(stream_id, None) is not None:
            self._out.append(_frame(RST_STREAM, 0, stream_id, code.to_bytes(4, "big")))
            self._remember_reset(stream_id)

    def acknowledge(self, stream_id: int, size: int) -> None:
        """`size` flow-controlled bytes of a stream were consumed: give them back to the client
        (WINDOW_UPDATE) once half a window has accumulated, for the connection and, while the
        client may still send on it, the stream."""
        if size <= 0:
            return
        self._unacked += size
        if self._unacked >= self._connection_window // 2:
            self._out.append(_frame(WINDOW_UPDATE, 0, 0, self._unacked.to_bytes(4, "big")))
            self._recv_window += self._unacked
            self._unacked = 0
        stream = self._streams.get(stream_id)
        if stream is not None and not stream.remote_ended:
            stream.unacked += size
            if stream.unacked >= self._stream_window // 2:
                self._out.append(_frame(WINDOW_UPDATE, 0, stream_id, stream.unacked.to_bytes(4, "big")))
                stream.recv_window += stream.unacked
                stream.unacked = 0

    def goaway(self, code: ErrorCode, *, last_stream_id: int | None = None) -> None:
        """Queue GOAWAY: streams above `last_stream_id` (default: the last the client opened)
        are refused from now on, those at or below it may end."""
        last = self.highest_stream_id if last_stream_id is None else last_stream_id
        self._refuse_after = last if self._refuse_after is None else min(last, self._refuse_after)
        self._out.append(_frame(GOAWAY, 0, 0, last.to_bytes(4, "big") + code.to_bytes(4, "big")))


def _unpad(payload: bytes) -> bytes:
    """A padded frame's content (RFC 9113 §6.1): without its pad length byte and padding."""
    if not payload:
        raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "a padded frame without its pad length")
    padding = payload[0]
    if padding >= len(payload):
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "padding as long as the frame")
    return payload[1 : len(payload) - padding]


def _size_update(size: int) -> bytes:
    """An HPACK dynamic table size update (RFC 7541 §6.3)."""
    if size < 0x1F:
        return bytes((0x20 | size,))
    out = bytearray((0x3F,))
    size -= 0x1F
    while size >= 0x80:
        out.append((size & 0x7F) | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out)


# frame type -> its handler, for the types RFC 9113 defines (others are ignored)
_HANDLERS = (
    ServerConnection._on_data,
    ServerConnection._on_headers,
    ServerConnection._on_priority,
    ServerConnection._on_rst_stream,
    ServerConnection._on_settings,
    ServerConnection._on_push_promise,
    ServerConnection._on_ping,
    ServerConnection._on_goaway,
    ServerConnection._on_window_update,
    ServerConnection._on_continuation,
)
