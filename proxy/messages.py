"""The request pipeline's own types: what a front end (HTTP/1.1 by aiohttp, HTTP/2 by the proxy's
own framing layer) hands the pipeline, and how the pipeline answers. Nothing here knows which
protocol carries them.

- `Request`: method, raw path and query, decoded query, headers, the verified client
  certificate, and the body as a stream (`Body`).
- `ResponseWriter`: answers either whole (`respond`) or as a stream (`start`, `write`, `end`);
  a write the client does not take within its timeout drops the client (`ClientGone`).
- `Exchange`: one request on its way down the chain, with what the steps learned about it
  (RequestInfo, identity, route) and what is recorded for metrics.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from multidict import CIMultiDict, CIMultiDictProxy

from proxy.identity import Identity
from routing.decide import Route
from routing.requestinfo import RequestInfo

Headers = CIMultiDict[str] | CIMultiDictProxy[str]


class ClientGone(ConnectionResetError):
    """The client went away, or did not take a write within its timeout (then it was dropped)."""


class Body(Protocol):
    """A request body as it arrives."""

    @property
    def can_read(self) -> bool:
        """Whether the request has a body at all (Content-Length > 0 or chunked)."""

    async def read(self, limit: int) -> bytes:
        """The whole body, or its first `limit` bytes + 1 when it is longer (the caller answers
        413 then)."""

    def chunks(self) -> AsyncIterator[bytes]:
        """The body in the pieces it arrives in (forwarded as it comes)."""


@dataclass(slots=True)
class Request:
    """One client request, as the front end received it.

    raw_path: the path exactly as sent (percent-encoded); query_string: the raw query;
    query: its decoded parameters (first value of each); peercert: the verified client
    certificate in `ssl.SSLSocket.getpeercert()` shape, or None; protocol: `http/1.1` or `h2`.
    """

    method: str
    raw_path: str
    query_string: str
    query: Mapping[str, str]
    headers: CIMultiDictProxy[str]
    body: Body
    peercert: dict[str, Any] | None
    content_length: int | None
    protocol: str = "http/1.1"

    @property
    def raw_path_qs(self) -> str:
        return f"{self.raw_path}?{self.query_string}" if self.query_string else self.raw_path

    def slimmed(self) -> Request:
        """The request without its headers, query and body: what a stream that lives on without
        its task keeps (an idle watch should cost as little as possible)."""
        return Request(self.method, self.raw_path, "", _NO_QUERY, _NO_HEADERS, NO_BODY, None, self.content_length, self.protocol)


class NoBody:
    """The body of a request that has none."""

    __slots__ = ()

    @property
    def can_read(self) -> bool:
        return False

    async def read(self, limit: int) -> bytes:
        return b""

    async def chunks(self) -> AsyncIterator[bytes]:
        return
        yield b""


NO_BODY = NoBody()
_NO_QUERY: Mapping[str, str] = {}
_NO_HEADERS: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole answer: status, headers and body bytes."""

    status: int
    body: bytes = b""
    headers: Headers | None = None
    content_type: str | None = "application/json"


class LineSource(Protocol):
    """Lines to stream to a client that arrive without being awaited (a cache watcher): the
    stream's front end registers a sink and gets, synchronously, each line as it comes."""

    @property
    def terminated(self) -> bool:
        """Nothing comes after the last line pushed (a 410 ERROR event, or the end marker b"")."""

    def attach(self, sink: Callable[[bytes], None]) -> list[bytes]:
        """From now on give each line to `sink` (called synchronously, never awaited); returns
        the lines queued before."""

    def detach(self) -> None:
        """The stream ended: let go of the sink (nothing more is pushed to it)."""


class WebSocketChannel(Protocol):
    """A client's WebSocket once its upgrade is complete: binary messages both ways."""

    async def receive(self) -> bytes | None:
        """The next binary (or text, as bytes) message; None once the client closed."""

    async def send(self, data: bytes) -> None:
        """Send one binary message. Raises ClientGone."""

    async def close(self, code: int = 1000, message: bytes = b"") -> None:
        """Close with a WebSocket close code (1000: normal)."""


class ResponseWriter(Protocol):
    """How the pipeline answers. Exactly one of `respond` or `start` is called per request."""

    @property
    def status(self) -> int | None:
        """The status sent (None while nothing was sent)."""

    @property
    def started(self) -> bool:
        """Whether a streamed answer has begun (headers sent): it can no longer be replaced."""

    @property
    def connection(self) -> object:
        """The client connection the answer goes out on, as a key (hashable, the same for every
        request on that connection): a shutdown drains connection by connection."""

    async def respond(self, answer: Answer) -> None:
        """Send a whole answer."""

    async def start(self, status: int, headers: Headers, *, content_type: str | None = None) -> None:
        """Begin a streamed answer (chunked in HTTP/1.1, DATA frames in HTTP/2). Raises
        ClientGone."""

    async def write(self, data: bytes) -> None:
        """Send bytes of a streamed answer; a client that does not take them within the write
        timeout is dropped. Raises ClientGone."""

    async def end(self) -> None:
        """End a streamed answer cleanly (a closed client is not an error here)."""

    async def accept_websocket(self, protocol: str) -> WebSocketChannel | None:
        """Complete the client's WebSocket upgrade (RFC 6455) choosing subprotocol `protocol`;
        None when this front end cannot (HTTP/2: clients upgrade over HTTP/1.1)."""

    async def accept_upgrade(self, head: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """Take the connection over for an HTTP/1.1 upgrade to another protocol than WebSocket
        (SPDY/3.1): write `head` (the whole 101 answer: status line, headers, blank line) and
        return the connection as a byte stream, closed by the caller; None when this front end
        cannot (HTTP/2 has no Upgrade). Raises ClientGone."""

    def detach(self, source: LineSource, *, deadline: float, on_end: Callable[[str], None]) -> bool:
        """Stream `source` on without the request's task, if this front end can (after `start`):
        its lines are written as they arrive, the stream ends at `deadline` (loop time), when
        the source terminates, or when the client goes away; then `on_end(outcome)` is called
        once. False when it cannot: the caller keeps streaming itself."""


class Outcome:
    """How an exchange ended: answered (`DONE`), its client went away first (`GONE`), or an
    exception no step expected (`FAILED`: the front end answers 500)."""

    DONE = "done"
    GONE = "gone"
    FAILED = "failed"


@dataclass(slots=True)
class Exchange:
    """One request going down the pipeline (`proxy.pipeline.chain`). Steps fill in what they
    learn; `route_kind` and `target` label its metrics and are set as soon as they are known, so
    a request its client abandons is still counted under its route.

    What a step holds for the request's lifetime (an in-flight slot, an open-watch count, a cache
    watcher) is given back by a release registered with `hold`, run by `close` when the exchange
    ends, in reverse order, exactly once; `outcome` is set before they run. Normally the pipeline
    closes the exchange when its task ends; a watch whose front end streams it on without the
    task (`ResponseWriter.detach`) is closed by that front end when the stream ends."""

    request: Request
    writer: ResponseWriter
    info: RequestInfo
    long_running: bool
    identity: Identity | None = None
    route: Route | None = None
    body: bytes | None = None  # read by a step that needed it (a create routed by its body's name)
    route_kind: str = "reject"
    target: str = ""
    detached: bool = False
    outcome: str = ""  # how it ended (Outcome), set by `close`
    # (release, *args) per hold: one tuple, not a closure, because a watch keeps its holds for
    # its whole life (tracemalloc at 300 kubelets: 6.9 KB of holds per kubelet became 2.8 KB;
    # a (release, args) pair 4.7 KB). Calling them back costs ~0.25 us more per request than
    # closures did (timeit): 0.1 % of a routed request, for ~2 % of a kubelet's memory.
    _releases: list[tuple[Any, ...]] = field(default_factory=list)

    async def respond(self, answer: Answer) -> None:
        await self.writer.respond(answer)

    def detach(self) -> None:
        """A front end took the stream on without the request's task: it closes the exchange
        when the stream ends. The request's headers, query and body are let go (the releases
        that remain need none of them)."""
        self.detached = True
        self.request = self.request.slimmed()
        self.body = None

    def hold(self, release: Callable[..., object], *args: Any) -> None:
        """Register `release(*args)`, to give back what a step holds when the exchange ends
        (plain def). A release that needs to know how it ended reads `outcome`."""
        self._releases.append((release, *args))

    def close(self, outcome: str) -> None:
        """End the exchange with `outcome` (Outcome): run every release, last registered first
        (plain def, once)."""
        if not self.outcome:
            self.outcome = outcome
        releases, self._releases = self._releases, []
        for entry in reversed(releases):
            if len(entry) == 2:  # the usual shapes called without slicing the tuple (every request)
                entry[0](entry[1])
            elif len(entry) == 3:
                entry[0](entry[1], entry[2])
            else:
                entry[0](*entry[1:])
