"""The fan-out of a watch cache's events to its cache watchers (kube-apiserver's cacher dispatch:
`Cacher.dispatchEvent` over `indexedWatchers`, k8s.io/apiserver/pkg/storage/cacher/cacher.go).

Owns the set of cache watchers of one watch cache, indexed as the cacher indexes them: those
that select one `metadata.name` (a kubelet's own Node) by that name, the others in one set, so an
event reaches only the watchers that can want it. It does not own the events (the store makes
each once: `proxy.cache.store`) nor the watchers' queues (`proxy.cache.cache_watcher`): it hands
every watcher the same event, and each decides what to queue.

Concurrency: plain defs with no `await` (STYLE §8), called within the store's atomic change. A
watcher never makes the dispatch wait: it queues with `put_nowait` semantics or is terminated
(`CacheWatcher.offer`). Iteration is over a copy, so a watcher may leave while being told.
"""

from __future__ import annotations

from typing import Protocol

from proxy.cache.store import CachedEvent
from routing.selectors import FieldSelector, LabelSelector

__all__ = ["Dispatcher", "Watcher"]


class Watcher(Protocol):
    """What the dispatcher needs of a cache watcher (proxy.cache.cache_watcher.CacheWatcher)."""

    label_selector: LabelSelector
    field_selector: FieldSelector
    name: str  # the metadata.name the watcher selects, "" for any (the dispatcher's name index)

    def offer(self, event: CachedEvent) -> None: ...  # pragma: no cover
    def offer_bookmark(self, line: bytes, stamp: str) -> None: ...  # pragma: no cover
    def terminate(self, message: str) -> None: ...  # pragma: no cover


class Dispatcher:
    """See the module docstring. The store's `EventHandler` (proxy.cache.store)."""

    def __init__(self) -> None:
        self._watchers_by_name: dict[str, set[Watcher]] = {}
        self._watchers_any: set[Watcher] = set()

    @property
    def watcher_count(self) -> int:
        """Cache watchers registered now."""
        return len(self._watchers_any) + sum(len(w) for w in self._watchers_by_name.values())

    def add_watcher(self, watcher: Watcher) -> None:
        """Tell `watcher` every event from now on (by its name when it selects one)."""
        if watcher.name:
            self._watchers_by_name.setdefault(watcher.name, set()).add(watcher)
        else:
            self._watchers_any.add(watcher)

    def remove_watcher(self, watcher: Watcher) -> None:
        """Tell `watcher` nothing more (no error when it was not registered)."""
        if watcher.name:
            group = self._watchers_by_name.get(watcher.name)
            if group is not None:
                group.discard(watcher)
                if not group:
                    del self._watchers_by_name[watcher.name]
        else:
            self._watchers_any.discard(watcher)

    def dispatch(self, event: CachedEvent) -> None:
        """Offer one event to the watchers of its object's name, then to every other."""
        for watcher in tuple(self._watchers_by_name.get(event.obj.name, ())):
            watcher.offer(event)
        for watcher in tuple(self._watchers_any):
            watcher.offer(event)

    def bookmark(self, line: bytes, stamp: str) -> None:
        """Offer a BOOKMARK `line` at proxy RV `stamp` to every watcher (those that asked for
        bookmarks queue it)."""
        for watcher in tuple(self._watchers_any):
            watcher.offer_bookmark(line, stamp)
        for group in tuple(self._watchers_by_name.values()):
            for watcher in tuple(group):
                watcher.offer_bookmark(line, stamp)

    def terminate_all(self, message: str) -> None:
        """End every watcher with a 410 Expired ERROR event carrying `message`: each must relist."""
        for watcher in (*self._watchers_any, *(w for group in self._watchers_by_name.values() for w in group)):
            watcher.terminate(message)
