"""Limits against abuse (DESIGN §7): open watches per identity, and writes to clients that do
not read. Request line, header and body sizes are enforced where the request is parsed
(`proxy.app`)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Mapping
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web


class TooManyWatches(Exception):
    """The identity already holds its maximum of open watches."""


class WatchLimiter:
    """Counts open watches per user name. `hold()` raises TooManyWatches beyond the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: Counter[str] = Counter()

    @contextmanager
    def hold(self, user: str) -> Iterator[None]:
        if self.open[user] >= self.limit:
            raise TooManyWatches(user)
        self.open[user] += 1
        try:
            yield
        finally:
            self.open[user] -= 1
            if self.open[user] <= 0:
                del self.open[user]


async def write_or_drop(request: web.Request, response: web.StreamResponse, data: bytes, *, timeout: float) -> None:
    """Write to a client, dropping its connection if it does not take the bytes within
    `timeout` seconds (the transport buffer stays full while a client does not read).
    Raises ConnectionResetError when dropped, so the caller's stream ends and frees its state."""
    # asyncio.timeout, not wait_for: no Task per write (wait_for makes one on Python 3.11), and
    # the write rarely suspends at all (only when the transport's buffer is over its limit).
    try:
        async with asyncio.timeout(timeout):
            await response.write(data)
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()
        raise ConnectionResetError("client did not read its watch in time") from None


# seconds; a watch without timeoutSeconds lives a random time in [1800, 3600), as
# kube-apiserver picks from --min-request-timeout (apiserver endpoints/handlers/get.go).
DEFAULT_WATCH_SECONDS = (1800.0, 3600.0)


def watch_lifetime(query: Mapping[str, str]) -> float:
    """How long a watch served by the proxy lives (seconds): its timeoutSeconds, else random."""
    value = query.get("timeoutSeconds", "")
    return float(value) if value.isdigit() else random.uniform(*DEFAULT_WATCH_SECONDS)
