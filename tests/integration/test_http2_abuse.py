"""Malformed frames and floods against the HTTP/2 front (raw frames over a real TLS connection to
the proxy in front of the real federation): each is answered with GOAWAY or RST_STREAM, never
a crash, and the proxy's memory stays bounded; a normal client is served right after each.

The classes: rapid reset (CVE-2023-44487), CONTINUATION flood (CVE-2024-27316), oversized
header lists, control-frame floods left unread (CVE-2019-9512 and kin), and frames the
protocol forbids."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import h2.errors
import h2.events
import pytest
from hyperframe.frame import ContinuationFrame, HeadersFrame, PingFrame, RstStreamFrame, WindowUpdateFrame

from tests.federation import Kube
from tests.h2client import H2Client

RSS_BOUND_MIB = 64  # growth over every case of this module


def _rss_mib(kube: Kube) -> float:
    assert kube.proxy.popen is not None
    for line in Path(f"/proc/{kube.proxy.popen.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@pytest.fixture(scope="module")
def rss_before(kube: Kube) -> Iterator[float]:
    before = _rss_mib(kube)
    yield before
    assert _rss_mib(kube) - before < RSS_BOUND_MIB
    assert kube.proxy.popen is not None and kube.proxy.popen.poll() is None, "the proxy is still running"


def client(kube: Kube) -> H2Client:
    return H2Client("127.0.0.1", kube.proxy.port, kube.client_ssl())


def still_serving(kube: Kube) -> None:
    c = client(kube)
    try:
        answer = c.request("GET", "/api/v1/namespaces/kube-system")
        assert answer.status == 200 and b'"kube-system"' in answer.body
    finally:
        c.close()


def test_rapid_reset_gets_goaway_enhance_your_calm(kube: Kube, rss_before: float) -> None:
    c = client(kube)
    for i in range(1000):
        stream_id = 1 + 2 * i
        c.conn.send_headers(stream_id, [(":method", "GET"), (":path", "/api/v1/pods?watch=1"), (":scheme", "https"),
                                        (":authority", c.authority)], end_stream=True)
        c.conn.reset_stream(stream_id)
    c.flush()
    closed = c.wait_closed()
    c.close()
    assert closed.goaway == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    still_serving(kube)


def test_a_continuation_flood_is_refused(kube: Kube, rss_before: float) -> None:
    c = client(kube)
    block = c.conn.encoder.encode([(":method", "GET"), (":path", "/api/v1/namespaces"), (":scheme", "https"), (":authority", c.authority)])
    headers = HeadersFrame(1)
    headers.data = block
    headers.flags.add("END_STREAM")  # no END_HEADERS: CONTINUATION frames must follow
    flood = [headers]
    for _ in range(10_000):
        frame = ContinuationFrame(1)
        frame.data = b"\x00" * 16
        flood.append(frame)
    try:
        c.send_frames(flood)
    except OSError:
        pass  # the proxy hung up while we were still sending: that is the point
    closed = c.wait_closed()
    c.close()
    assert closed.goaway == h2.errors.ErrorCodes.PROTOCOL_ERROR
    still_serving(kube)


def test_a_header_list_over_the_limit_is_refused(kube: Kube, rss_before: float) -> None:
    c = client(kube)
    with pytest.raises(ConnectionError, match="GOAWAY"):
        c.request("GET", "/api/v1/namespaces", headers={"x-big": "y" * (300 * 1024)})  # over the 256 KiB list limit
    c.close()
    still_serving(kube)


def test_a_ping_flood_that_never_reads_its_acks_is_disconnected(kube: Kube, rss_before: float) -> None:
    c = client(kube)
    ping = PingFrame(0)
    ping.opaque_data = b"12345678"
    burst = ping.serialize() * 10_000
    try:
        for _ in range(200):  # 2 million PINGs, 34 MB, none of whose ACKs is read
            c.send_raw(burst)
    except OSError:
        pass  # disconnected mid-flood
    closed = c.wait_closed(timeout=30)
    c.close()
    assert closed.goaway in (None, h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)  # the GOAWAY may sit behind unread ACKs
    still_serving(kube)


def raw_frame(kind: int, stream_id: int, payload: bytes, flags: int = 0) -> bytes:
    """A frame built by hand (RFC 9113 §4.1), for frames hyperframe refuses to build."""
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream_id.to_bytes(4, "big") + payload


@pytest.mark.parametrize(
    ("name", "frames", "code"),
    [
        ("DATA on stream 0", raw_frame(0x0, 0, b"x"), h2.errors.ErrorCodes.PROTOCOL_ERROR),
        ("window past 2^31-1", WindowUpdateFrame(0, window_increment=2**31 - 1).serialize() * 2, h2.errors.ErrorCodes.FLOW_CONTROL_ERROR),
        ("RST_STREAM of an idle stream", RstStreamFrame(7).serialize(), h2.errors.ErrorCodes.PROTOCOL_ERROR),
        ("SETTINGS of a wrong length", raw_frame(0x4, 0, b"\x00\x01\x00"), h2.errors.ErrorCodes.FRAME_SIZE_ERROR),
    ],
)
def test_frames_the_protocol_forbids_get_goaway_with_their_error(kube: Kube, rss_before: float, name: str, frames: bytes, code: int) -> None:
    c = client(kube)
    c.send_raw(frames)
    closed = c.wait_closed()
    c.close()
    assert closed.goaway == code, name
    still_serving(kube)


def test_a_frame_announcing_16_mib_is_refused_before_its_bytes_arrive(kube: Kube, rss_before: float) -> None:
    """h2 checks a frame's length once the frame is whole; the proxy checks the header at once,
    so 64 bytes of 0xff cannot make it wait for (and buffer) 16 MiB."""
    c = client(kube)
    c.send_raw(b"\xff" * 64)
    closed = c.wait_closed(timeout=5)
    c.close()
    assert closed.goaway == h2.errors.ErrorCodes.FRAME_SIZE_ERROR
    still_serving(kube)


def test_a_request_without_its_pseudo_headers_is_reset_and_the_connection_goes_on(kube: Kube, rss_before: float) -> None:
    c = H2Client("127.0.0.1", kube.proxy.port, kube.client_ssl(), validate=False)
    c.conn.send_headers(1, [(":method", "GET"), (":scheme", "https"), (":authority", c.authority)], end_stream=True)  # no :path
    c.flush()
    closed = c.wait_closed(timeout=5)
    c.close()
    resets = [e for e in closed.events if isinstance(e, h2.events.StreamReset)]
    assert resets or closed.goaway == h2.errors.ErrorCodes.PROTOCOL_ERROR
    still_serving(kube)
