"""A client for the HTTP/2 front's tests: python-hyper's h2 library (sans I/O) as the client,
wired to a `ServerConnection` by handing bytes across, and hand-made frames for what h2 refuses
to send."""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events

from proxy.fronts.http2_headers import AnswerEncoder
from proxy.fronts.http2_protocol import Event, ServerConnection

STREAM_WINDOW = 1024 * 1024
AUTHORITY = "proxy.test:6443"


def frame(kind: int, stream_id: int, payload: bytes = b"", flags: int = 0) -> bytes:
    """A frame built by hand (RFC 9113 §4.1)."""
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream_id.to_bytes(4, "big") + payload


def frames_of(wire: bytes) -> list[tuple[int, int, int, bytes]]:
    """The frames in bytes a server sent: (type, flags, stream id, payload)."""
    out = []
    while wire:
        length = int.from_bytes(wire[:3], "big")
        out.append((wire[3], wire[4], int.from_bytes(wire[5:9], "big"), wire[9 : 9 + length]))
        wire = wire[9 + length :]
    return out


def request_headers(path: str = "/api/v1/namespaces", method: str = "GET", **extra: str) -> list[tuple[str, str]]:
    return [(":method", method), (":path", path), (":scheme", "https"), (":authority", AUTHORITY), *extra.items()]


class Peers:
    """The h2 client and the server side of one connection, the server's preface sent and
    read, the client's preface and SETTINGS received."""

    def __init__(self, *, max_concurrent_streams: int = 100, max_header_list_size: int = 256 * 1024,
                 client_settings: dict[int, int] | None = None, validate: bool = True) -> None:
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8", validate_outbound_headers=validate,
                                           normalize_outbound_headers=validate, validate_inbound_headers=True)
        self.client = h2.connection.H2Connection(config)
        self.server = ServerConnection(max_concurrent_streams=max_concurrent_streams, max_header_list_size=max_header_list_size,
                                       stream_window=STREAM_WINDOW, connection_window=65_535 + STREAM_WINDOW)
        self.encoder = AnswerEncoder()
        self.server.initiate()
        self.client.initiate_connection()
        if client_settings:
            self.client.update_settings(client_settings)
        assert self.to_server() == []
        self.to_client()  # the server's SETTINGS: the client acknowledges them
        self.to_server()

    def to_server(self, extra: bytes = b"") -> list[Event]:
        """Everything the client queued (and `extra` raw bytes) into the server: its events."""
        return self.server.receive(self.client.data_to_send() + extra)

    def to_client(self) -> list[h2.events.Event]:
        return self.client.receive_data(self.server.data_to_send())

    def request(self, path: str = "/api/v1/namespaces", *, end: bool = True, **extra: str) -> int:
        stream_id: int = self.client.get_next_available_stream_id()
        self.client.send_headers(stream_id, request_headers(path, **extra), end_stream=end)
        return stream_id

    def answer(self, stream_id: int, status: int = 200, body: bytes = b"", **headers: Any) -> None:
        block = self.encoder.encode(status, list(headers.items()), content_type="application/json", content_length=len(body))
        self.server.send_headers(stream_id, block, end=not body)
        if body:
            assert self.server.send_data(stream_id, body, end=True) == len(body)


def of(events: list[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


class Transport:
    """What the connection writes, and how full its buffer looks."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.all = bytearray()  # every byte ever written
        self.closed = False
        self.buffered = 0  # bytes the client has not read, as the test says

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(bytes(data))
        self.all += data

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def take(self) -> bytes:
        data = b"".join(self.writes)
        self.writes.clear()
        return data
