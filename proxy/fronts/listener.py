"""The listener: one port, both protocols. Each TLS connection is handed to the HTTP/2 front when
ALPN chose `h2` and to the HTTP/1.1 front otherwise (`http/1.1`, no ALPN, or plain TCP), as Go's
net/http does for kube-apiserver. Connections are counted per protocol for the metrics
(`partition_proxy_connections`: open now; `partition_proxy_connections_accepted_total`).
Both fronts read through the thread's read buffer (`proxy.read_buffer`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import Counter
from typing import Any

from proxy.context import OpenStreams
from proxy.fronts.drain import drain
from proxy.fronts.http1 import Http1Front
from proxy.fronts.http2 import Http2Front
from proxy.read_buffer import BufferedReads

HTTP2 = "h2"
HTTP1 = "http/1.1"
ALPN_PROTOCOLS = [HTTP2, HTTP1]  # the server's preference, offered in TLS


def offer_alpn(context: ssl.SSLContext, *, http2: bool) -> None:
    """Make `context` offer h2 (when enabled) and http/1.1 by ALPN."""
    context.set_alpn_protocols(ALPN_PROTOCOLS if http2 else [HTTP1])


class _Negotiated(asyncio.Protocol):
    """Lives only until the TLS handshake is done, then hands the transport to the front end of
    the protocol ALPN chose."""

    __slots__ = ("_listener",)

    def __init__(self, listener: Listener) -> None:
        self._listener = listener

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        protocol: asyncio.BaseProtocol
        if alpn == HTTP2 and self._listener.http2 is not None:
            protocol = BufferedReads(self._listener.http2.protocol())
            self._listener.accepted[HTTP2] += 1
        else:
            protocol = BufferedReads(self._listener.http1.protocol())
            self._listener.accepted[HTTP1] += 1
        transport.set_protocol(protocol)
        protocol.connection_made(transport)


class Listener:
    """The front ends behind one port; `protocol` is the server's protocol factory."""

    def __init__(self, http1: Http1Front, http2: Http2Front | None) -> None:
        self.http1 = http1
        self.http2 = http2
        self.accepted: Counter[str] = Counter()

    def protocol(self) -> asyncio.BaseProtocol:
        return _Negotiated(self)

    def open_connections(self) -> dict[str, int]:
        return {HTTP1: self.http1.open_connections, HTTP2: len(self.http2.connections) if self.http2 is not None else 0}

    async def shutdown(self, grace: float, *, streams: OpenStreams, drain_seconds: float) -> None:
        """Let every connection go, one by one over up to `drain_seconds` (`proxy.fronts.drain`):
        its streams end cleanly, then GOAWAY (HTTP/2) or a close once its request in flight is
        answered (HTTP/1.1). Then the streams and connections left (those that came during the
        drain) end at once. Each connection's requests in flight get `grace` seconds after its
        turn; returns within about `drain_seconds + grace`."""
        http1, http2 = self.http1, self.http2
        fronts: list[Http1Front | Http2Front] = [http1, *([http2] if http2 is not None else [])]
        turns = [(front, conn) for front in fronts for conn in front.open()]
        stopping: list[asyncio.Task[None]] = []

        def let_go(turn: tuple[Http1Front | Http2Front, Any]) -> None:
            front, conn = turn
            streams.end_connection(conn)
            stopping.append(asyncio.create_task(front.let_go(conn, grace)))

        await drain(turns, let_go, seconds=drain_seconds)
        streams.end_all()
        await asyncio.gather(*stopping, *(front.shutdown(grace) for front in fronts))
