"""A small blocking HTTP/2 client for tests (the h2 library over a TLS socket): requests with a
`:path` sent exactly as given (fuzzing needs raw paths no URL library normalizes), and raw frames
for the abuse tests (floods, malformed frames)."""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from hyperframe.frame import Frame


@dataclass
class H2Answer:
    status: int
    headers: dict[str, str]
    body: bytes = b""
    reset: int | None = None  # RST_STREAM error code, when the server reset the stream


@dataclass
class Closed:
    """How the server ended the connection: its GOAWAY error code (None: no GOAWAY seen)."""

    goaway: int | None
    last_stream_id: int | None = None
    events: list[h2.events.Event] = field(default_factory=list)


class H2Client:
    def __init__(self, host: str, port: int, ctx: ssl.SSLContext, *, timeout: float = 15.0, validate: bool = True) -> None:
        ctx.set_alpn_protocols(["h2"])
        raw = socket.create_connection((host, port), timeout=timeout)
        self.sock = ctx.wrap_socket(raw, server_hostname=host)
        assert self.sock.selected_alpn_protocol() == "h2", self.sock.selected_alpn_protocol()
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8", validate_outbound_headers=validate,
                                           normalize_outbound_headers=validate)
        self.conn = h2.connection.H2Connection(config)
        self.conn.initiate_connection()
        self.flush()
        self.authority = f"{host}:{port}"

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frames(self, frames: list[Frame]) -> None:
        self.sock.sendall(b"".join(f.serialize() for f in frames))

    def request(self, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes | None = None) -> H2Answer:
        """One request; the answer once its stream ended or was reset. Raises ConnectionError when
        the server closed the connection first."""
        stream_id = self.conn.get_next_available_stream_id()
        block = [(":method", method), (":path", path), (":scheme", "https"), (":authority", self.authority)]
        block += list((headers or {}).items())
        self.conn.send_headers(stream_id, block, end_stream=not body)
        if body:
            self._send_body(stream_id, body)
        self.flush()
        answer = H2Answer(0, {})
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream_id:
                    hdrs = dict(event.headers)
                    answer.status, answer.headers = int(hdrs.pop(":status")), hdrs
                elif isinstance(event, h2.events.DataReceived) and event.stream_id == stream_id:
                    answer.body += event.data
                    self.conn.acknowledge_received_data(event.flow_controlled_length, stream_id)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream_id:
                    self.flush()
                    return answer
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream_id:
                    answer.reset = event.error_code
                    return answer
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise ConnectionError(f"GOAWAY {event.error_code}")
            self.flush()

    def _send_body(self, stream_id: int, body: bytes) -> None:
        view = memoryview(body)
        while view:
            window = self.conn.local_flow_control_window(stream_id)
            if window <= 0:
                self.flush()
                for event in self.conn.receive_data(self.sock.recv(65536)):
                    if isinstance(event, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                        return
                continue
            n = min(window, self.conn.max_outbound_frame_size, len(view))
            self.conn.send_data(stream_id, view[:n].tobytes(), end_stream=n == len(view))
            view = view[n:]

    def wait_closed(self, timeout: float = 15.0) -> Closed:
        """Read (answering nothing) until the server closes the connection; its GOAWAY, if any."""
        self.sock.settimeout(timeout)
        closed = Closed(None)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return closed
                try:
                    events = self.conn.receive_data(data)
                except h2.exceptions.ProtocolError:
                    continue
                for event in events:
                    closed.events.append(event)
                    if isinstance(event, h2.events.ConnectionTerminated):
                        closed.goaway, closed.last_stream_id = int(event.error_code), event.last_stream_id
        except (ConnectionError, ssl.SSLError, OSError):
            return closed

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
