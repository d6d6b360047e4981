"""Deadlines of long-lived streams, in buckets of one second with one loop timer per bucket.

A watch served from a cache lives until its deadline (its `timeoutSeconds`, client-go picks 5-10
minutes) without a task of its own (`proxy.fronts.http2._Pushed`). A loop timer per watch costs
about 600 bytes (uvloop's TimerHandle and its libuv timer, tracemalloc), five per kubelet; an
entry in a bucket costs about 40. Deadlines spread over the 300 seconds client-go draws from, so
10,000 watches need about 300 timers.

A bucket's callbacks run when its second is over: a deadline fires at most
`DEADLINE_RESOLUTION` seconds late, never early. Plain defs, called on the loop's thread.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable

log = logging.getLogger("partition_proxy.deadlines")

# seconds: the width of a bucket, so how late a deadline may fire. A watch's end is minutes
# away and a client re-watches from its last resourceVersion either way: one second late is
# nothing to it, and it keeps the timers to one per second that holds a deadline.
DEADLINE_RESOLUTION = 1.0


class Deadlines:
    """Callbacks to run at loop times (module docstring). `add` returns the bucket a callback
    went into, which `discard` takes back to forget it before it runs."""

    __slots__ = ("_buckets",)

    def __init__(self) -> None:
        # bucket (loop time / DEADLINE_RESOLUTION, rounded up) -> its callbacks in the order added
        self._buckets: dict[int, dict[Callable[[], None], None]] = {}

    def __len__(self) -> int:
        """Callbacks waiting."""
        return sum(len(b) for b in self._buckets.values())

    def add(self, when: float, callback: Callable[[], None]) -> int:
        """Run `callback()` once the loop's time has passed `when` (seconds, `loop.time()`), at
        most DEADLINE_RESOLUTION later; the bucket to give `discard`. A callback added twice to
        one bucket runs once."""
        bucket = math.ceil(when / DEADLINE_RESOLUTION)
        callbacks = self._buckets.get(bucket)
        if callbacks is None:
            callbacks = self._buckets[bucket] = {}
            asyncio.get_running_loop().call_at(bucket * DEADLINE_RESOLUTION, self._expire, bucket)
        callbacks[callback] = None
        return bucket

    def discard(self, bucket: int, callback: Callable[[], None]) -> None:
        """Forget `callback` (added to `bucket`); one that already ran or was never added is
        ignored. An emptied bucket stays until its timer fires, so a later `add` to it makes no
        second timer."""
        callbacks = self._buckets.get(bucket)
        if callbacks is not None:
            callbacks.pop(callback, None)

    def _expire(self, bucket: int) -> None:
        for callback in self._buckets.pop(bucket, {}):
            try:
                callback()
            except Exception:  # one stream's failure must not keep the others of its second alive
                log.exception("a deadline's callback failed")
