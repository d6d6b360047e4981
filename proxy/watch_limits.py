"""Open watches per identity (a limit against abuse): a client that opens watch after watch
gets 429 beyond `limits.max_watches_per_identity` instead of pinning the proxy's memory and the
partitions' watches. Request line, header and body sizes are checked by the pipeline's
`Limits` step; slow readers are dropped by the front ends' writers."""

from __future__ import annotations

from collections import Counter


class TooManyWatches(Exception):
    """The identity already holds its maximum of open watches."""


class WatchLimiter:
    """Counts open watches per user name."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: Counter[str] = Counter()

    def acquire(self, user: str) -> None:
        """Count one more open watch of `user` until `release`. Raises TooManyWatches beyond the
        limit (plain def: atomic)."""
        if self.open[user] >= self.limit:
            raise TooManyWatches(user)
        self.open[user] += 1

    def release(self, user: str) -> None:
        self.open[user] -= 1
        if self.open[user] <= 0:
            del self.open[user]
