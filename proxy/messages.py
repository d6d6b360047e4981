"""The request pipeline's own types: what a front end (HTTP/1.1 by aiohttp, HTTP/2 by h2) hands
the pipeline, and how the pipeline answers. Nothing here knows which protocol carries them.

- `Request`: method, raw path and query, decoded query, headers, the verified client
  certificate, and the body as a stream (`Body`).
- `ResponseWriter`: answers either whole (`respond`) or as a stream (`start`, `write`, `end`);
  a write the client does not take within its timeout drops the client (`ClientGone`).
- `Exchange`: one request on its way down the chain, with what the steps learned about it
  (RequestInfo, identity, route) and what is recorded for metrics.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
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


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole answer: status, headers and body bytes."""

    status: int
    body: bytes = b""
    headers: Headers | None = None
    content_type: str | None = "application/json"


class ResponseWriter(Protocol):
    """How the pipeline answers. Exactly one of `respond` or `start` is called per request."""

    @property
    def status(self) -> int | None:
        """The status sent (None while nothing was sent)."""

    @property
    def started(self) -> bool:
        """Whether a streamed answer has begun (headers sent): it can no longer be replaced."""

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


@dataclass(slots=True)
class Exchange:
    """One request going down the chain (`proxy.pipeline.chain`). Steps fill in what they
    learn; `route_kind` and `target` label its metrics and are set as soon as they are known, so
    a request its client abandons is still counted under its route."""

    request: Request
    writer: ResponseWriter
    info: RequestInfo
    long_running: bool
    identity: Identity | None = None
    route: Route | None = None
    body: bytes | None = None  # read by a step that needed it (a create routed by its body's name)
    route_kind: str = "reject"
    target: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    async def respond(self, answer: Answer) -> None:
        await self.writer.respond(answer)
