"""Open watches per identity (a limit against abuse): a client that opens watch after watch
gets 429 beyond `limits.max_watches_per_identity` instead of pinning the proxy's memory and the
partitions' watches. Request line, header and body sizes are checked by the pipeline's
`Limits` step; slow readers are dropped by the front ends' writers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


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
