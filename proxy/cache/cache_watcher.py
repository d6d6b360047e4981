"""A cache watcher: one client watch served from a watch cache.

Each watcher has a bounded queue of ready-to-write lines, filled by the watch cache (plain `def`,
no waiting) and taken whole by the writer (`next_batch`): a plain list and a future that exists
only while the writer waits, since an idle watch should cost as little as possible (an
asyncio.Queue is ~1.1 KiB before its first line). A watcher whose queue is full has fallen behind: it is
terminated with one ERROR event carrying a 410 `Expired` Status, so the client relists (or
resumes) and never stalls the other watchers (apiserver cacher: cacheWatcher.add terminates a
blocked watcher after a short timeout; here the budget is the queue).

Event types follow the cacher (`cacheWatcher.convertToWatchEvent`): an object that starts
matching the watcher's selectors arrives as ADDED, one that stops matching as DELETED carrying
its previous state (the one that matched), each at the event's resourceVersion.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from proxy.cache.formats import JSON, ObjectFormat
from proxy.cache.store import CachedEvent
from routing import rv as rvcodec
from routing.selectors import FieldSelector, LabelSelector

# lines; how far one watcher may fall behind before it is dropped. 1,000 events is about one
# event per node of a 1,000-node partition: a client that far behind should relist.
DEFAULT_QUEUE_SIZE = 1000


class CacheWatcher:
    __slots__ = ("label_selector", "field_selector", "name", "trigger", "namespace", "slot", "bookmarks", "_lines", "_limit", "_waiter",
                 "_sink", "_on_behind", "last_stamp", "terminated", "_format")

    def __init__(
        self,
        *,
        label_selector: LabelSelector,
        field_selector: FieldSelector,
        name: str = "",
        trigger: str | None = None,
        namespace: str = "",
        slot: int | None = None,
        bookmarks: bool = False,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        format: ObjectFormat = JSON,
        on_behind: Callable[[], None] | None = None,
    ) -> None:
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.name = name
        self.trigger = trigger  # the cache's trigger field value it selects (its dispatcher index)
        self.namespace = namespace
        self.slot = slot
        self.bookmarks = bookmarks
        self._lines: list[bytes] = []
        self._limit = queue_size
        self._waiter: asyncio.Future[None] | None = None
        self._sink: Callable[[bytes], None] | None = None
        self._on_behind = on_behind  # told when the watcher is closed for falling behind (metrics)
        self.last_stamp = ""
        self.terminated = False
        self._format = format  # the cache's: events it writes itself (ADDED/DELETED, 410) match

    def _matches(self, labels: dict[str, str] | None, fields: dict[str, str] | None) -> bool:
        if labels is None or fields is None:
            return False
        return self.label_selector.matches(labels) and self.field_selector.matches(fields)

    def offer(self, event: CachedEvent) -> None:
        """Queue the event's line if this watcher selects it (plain def: atomic)."""
        if self.terminated:
            return
        obj = event.obj
        if (self.namespace and obj.namespace != self.namespace) or (self.slot is not None and event.slot != self.slot):
            return
        cur = self._matches(obj.labels, obj.fields)
        prev = self._matches(event.prev_labels, event.prev_fields)
        if event.type == "DELETED":
            if not prev:
                return
            line = event.line
        elif cur and (prev or event.type == "ADDED"):
            line = event.line
        elif cur:
            line = self._format.event("ADDED", obj.raw, event.stamp)
        elif prev:
            line = self._format.event("DELETED", obj.raw if event.prev_raw is None else event.prev_raw, event.stamp)
        else:
            return
        self._put(line, event.stamp)

    def offer_bookmark(self, line: bytes, stamp: str) -> None:
        """Queue a bookmark if asked for and newer than anything sent. A full queue skips it
        (bookmarks are advisory) rather than terminating the watcher."""
        if self.terminated or not self.bookmarks or rvcodec.compare(stamp, self.last_stamp) <= 0:
            return
        if len(self._lines) < self._limit or self._sink is not None:
            self._push(line)
            self.last_stamp = stamp

    def _put(self, line: bytes, stamp: str) -> None:
        if len(self._lines) >= self._limit and self._sink is None:
            if not self.terminated and self._on_behind is not None:
                self._on_behind()
            self.terminate("the watcher fell behind: too old resource version")
            return
        self._push(line)
        if stamp and rvcodec.compare(stamp, self.last_stamp) > 0:
            self.last_stamp = stamp

    def _push(self, line: bytes) -> None:
        if self._sink is not None:
            self._sink(line)
            return
        self._lines.append(line)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def attach(self, sink: Callable[[bytes], None]) -> list[bytes]:
        """Push mode: from now on every line goes to `sink` as it comes (synchronously, from the
        cache's dispatch); the sink bounds what it buffers itself. Returns the lines queued so far."""
        self._sink = sink
        return self.take()

    def detach(self) -> None:
        """The stream ended: let go of the sink. Lines offered later are queued (the watcher is
        removed from its cache right after)."""
        self._sink = None

    @property
    def pending(self) -> int:
        """Lines queued and not yet taken."""
        return len(self._lines)

    def take(self) -> list[bytes]:
        """Every queued line, in order (plain def: the queue is empty after it)."""
        batch, self._lines = self._lines, []
        return batch

    async def next_batch(self) -> list[bytes]:
        """Wait until at least one line is queued, then take them all. After a 410 ERROR event or
        the end marker b"" (`terminated`), nothing more comes."""
        while not self._lines:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self.take()

    def terminate(self, message: str) -> None:
        """Drop what is queued and queue one 410 Expired ERROR event; nothing follows it."""
        if self.terminated:
            return
        self.terminated = True
        self._lines.clear()
        self._push(self._format.expired(message))

    def finish(self) -> None:
        """End the watch cleanly (shutdown): drop what is queued, queue the end marker b""."""
        if self.terminated:
            return
        self.terminated = True
        self._lines.clear()
        self._push(b"")
