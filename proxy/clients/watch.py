"""One layered watch reader, shared by the reflectors and the union watches (client-go's
`RetryWatcher` and reflector `watchHandler`, asyncio edition).

A `WatchStream` keeps one upstream watch open for as long as its reader wants it:
- `open()` sends the first request and returns its answer's headers (the caller decides what a
  non-200 means before it starts streaming anything downstream);
- `events()` yields each event as the partition sent it: a JSON line (newline-terminated) or a
  protobuf frame payload (`routing.protobuf`, without its length prefix), in the encoding the
  partition answered (`protobuf` says which);
- a stream that ends normally (kube-apiserver ends every watch after its timeout) is reopened
  after a short pause; one that breaks, stays silent past the inactivity timeout, or whose
  partition is unavailable, is reopened with jittered exponential backoff (a partition marked down
  is tried again when its breaker's window ends). Every (re)open asks
  `query()` for its query string, so it resumes from wherever the caller has got to, and always
  asks for bookmarks (`allowWatchBookmarks=true`), which keep a quiet stream from looking dead;
- a reopen answered with a non-200 raises its `APIError` (a 410: the caller relists or tells its
  client to). ERROR events inside a stream are the caller's to read.

The clock is not injected here but the pause is (`sleep`), so tests run backoff without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from multidict import CIMultiDict

from proxy.clients.errors import PartitionMarkedDown, PartitionUnavailable, StreamBroken, api_error
from proxy.clients.partition import PartitionClient, RequestClass, UpstreamResponse
from proxy.identity import Identity
from routing import protobuf as pb
from routing.translate import Encoding, encoding_of


@dataclass(frozen=True, slots=True)
class Backoff:
    """Pauses before a reopen (seconds): `after_end` after a stream ended normally; after a
    failure `first`, doubled per failure in a row up to `most`; each pause jittered by +-50 %
    so many streams of one partition do not reopen in step."""

    after_end: float = 0.2
    first: float = 0.5
    most: float = 30.0

    def after_window(self, reopens_in: float) -> float:
        """The pause of a reader whose partition is marked down: until the breaker's window ends,
        plus up to `after_end` (jitter, so a partition's streams do not all try at once; the
        first is its half-open trial, the others wait for its verdict)."""
        return reopens_in + random.uniform(0.0, self.after_end) + (self.after_end if reopens_in == 0.0 else 0.0)

    def pause(self, failures: int) -> float:
        base = self.after_end if failures == 0 else min(self.first * 2 ** (failures - 1), self.most)
        return base * random.uniform(0.5, 1.5)


class _Lines:
    """Newline-delimited JSON watch events (`k8s.io/apimachinery/pkg/runtime/serializer/json`),
    with no cap on a line's length (an event is as large as its object)."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        self._pending += chunk
        if b"\n" not in chunk:
            return []
        *lines, self._pending = self._pending.split(b"\n")
        return [line + b"\n" for line in lines if line.strip()]


def with_bookmarks(query: str) -> str:
    """`query` asking for bookmarks (the watch reader's inactivity timeout relies on them)."""
    if "allowWatchBookmarks=true" in query:
        return query
    return f"{query}&allowWatchBookmarks=true" if query else "allowWatchBookmarks=true"


class WatchStream:
    """See the module docstring. `query()` is called before each (re)open; `headers` and
    `identity` are sent with each (the proxy's own credential is added by the client)."""

    def __init__(
        self,
        client: PartitionClient,
        path: str,
        *,
        query: Callable[[], str],
        headers: CIMultiDict[str] | dict[str, str] | None = None,
        identity: Identity | None = None,
        backoff: Backoff = Backoff(),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.client = client
        self.path = path
        self._query = query
        self._headers = headers
        self._identity = identity
        self._backoff = backoff
        self._sleep = sleep
        self._exit = contextlib.AsyncExitStack()
        self._answer: UpstreamResponse | None = None
        self.protobuf = False
        self.opened = 0  # watches opened (the first and every reopen)

    @property
    def content_type(self) -> str:
        """The Content-Type of the open answer ("" when none is open)."""
        return self._answer.content_type if self._answer is not None else ""

    async def open(self) -> UpstreamResponse:
        """Send the request and return the answer once its headers arrived. Raises
        PartitionUnavailable. The caller reads a non-200 answer's body itself."""
        await self._exit.aclose()
        self._exit = contextlib.AsyncExitStack()
        answer = await self._exit.enter_async_context(
            self.client.request(
                "GET", self.path, query=with_bookmarks(self._query()), headers=self._headers, identity=self._identity,
                kind=RequestClass.WATCH,
            )
        )
        self._answer = answer
        self.opened += 1
        if answer.status == 200:
            self.protobuf = encoding_of(answer.content_type) is Encoding.PROTOBUF
        return answer

    async def events(self) -> AsyncIterator[bytes]:
        """Events as they come, reopening as the module docstring says, until the caller stops.
        Raises APIError when a reopen is refused (the first answer is the caller's to judge:
        call `open()` first, or let this open it and raise on a non-200)."""
        failures = 0
        try:
            while True:
                try:
                    answer = self._answer or await self.open()
                    if answer.status != 200:
                        raise api_error(self.client.name, answer.status, await answer.read())
                    async for event in self._read(answer):
                        failures = 0  # a stream that delivers is healthy: the next failure starts over
                        yield event
                    pause = self._backoff.pause(failures)
                except PartitionMarkedDown as exc:
                    pause = self._backoff.after_window(exc.reopens_in)
                except (PartitionUnavailable, StreamBroken, pb.ProtobufError):
                    failures += 1
                    pause = self._backoff.pause(failures)
                    if self.client.is_marked_down:  # this failure opened its breaker: no later than the window's end
                        pause = min(pause, self._backoff.after_window(self.client.breaker.remaining()))
                await self._exit.aclose()
                self._answer = None
                await self._sleep(pause)
        finally:
            await self.close()

    async def _read(self, answer: UpstreamResponse) -> AsyncIterator[bytes]:
        if self.protobuf:
            frames = pb.FrameReader()
            async for chunk in answer.chunks():
                for frame in frames.feed(chunk):
                    yield frame
        else:
            lines = _Lines()
            async for chunk in answer.chunks():
                for line in lines.feed(chunk):
                    yield line

    async def close(self) -> None:
        """Drop the open stream, if any."""
        if self._answer is not None:
            self._answer.close()
            self._answer = None
        await self._exit.aclose()
