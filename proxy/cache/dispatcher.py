"""The fan-out of a watch cache's events to its cache watchers (kube-apiserver's cacher dispatch:
`Cacher.dispatchEvent` over `indexedWatchers`, k8s.io/apiserver/pkg/storage/cacher/cacher.go).

Owns the set of cache watchers of one watch cache, indexed as the cacher indexes them: those
that select one `metadata.name` (a kubelet's own Node) by that name; those whose field selector
demands one value of the cache's trigger field (a kubelet's `spec.nodeName=<node>` pod watch:
routing.selectors.TRIGGER_FIELDS) by that value, and an event goes to the watchers of its
object's value and, when the event changed it, of its previous value (the cacher's
`triggerValues`); the others in one set. So an event reaches only the watchers that can want it:
a pod's event costs one offer per watcher of its node, not one per kubelet. It does not own the events (the store makes
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
    trigger: str | None  # the trigger field's value it selects, None for any (the value index)

    def offer(self, event: CachedEvent) -> None: ...  # pragma: no cover
    def offer_bookmark(self, line: bytes, stamp: str) -> None: ...  # pragma: no cover
    def terminate(self, message: str) -> None: ...  # pragma: no cover


class Dispatcher:
    """See the module docstring. The store's `EventHandler` (proxy.cache.store)."""

    def __init__(self, trigger_field: str = "") -> None:
        self._trigger_field = trigger_field  # "" when the cache's resource has none
        self._watchers_by_name: dict[str, set[Watcher]] = {}
        self._watchers_by_value: dict[str, set[Watcher]] = {}
        self._watchers_any: set[Watcher] = set()

    @property
    def watcher_count(self) -> int:
        """Cache watchers registered now."""
        return len(self._watchers_any) + sum(len(w) for w in (*self._watchers_by_name.values(), *self._watchers_by_value.values()))

    def _group_of(self, watcher: Watcher) -> tuple[dict[str, set[Watcher]], str] | None:
        """The index holding `watcher` and its key there; None for the set of the others."""
        if watcher.name:
            return self._watchers_by_name, watcher.name
        if watcher.trigger is not None and self._trigger_field:
            return self._watchers_by_value, watcher.trigger
        return None

    def add_watcher(self, watcher: Watcher) -> None:
        """Tell `watcher` every event from now on (by its name or trigger value when it
        selects one)."""
        group = self._group_of(watcher)
        if group is None:
            self._watchers_any.add(watcher)
        else:
            group[0].setdefault(group[1], set()).add(watcher)

    def remove_watcher(self, watcher: Watcher) -> None:
        """Tell `watcher` nothing more (no error when it was not registered)."""
        group = self._group_of(watcher)
        if group is None:
            self._watchers_any.discard(watcher)
            return
        index, key = group
        members = index.get(key)
        if members is not None:
            members.discard(watcher)
            if not members:
                del index[key]

    def dispatch(self, event: CachedEvent) -> None:
        """Offer one event to the watchers of its object's name, to those of its trigger
        values (now and before the event), then to every other."""
        for watcher in tuple(self._watchers_by_name.get(event.obj.name, ())):
            watcher.offer(event)
        if self._watchers_by_value:
            value = event.obj.fields.get(self._trigger_field, "")
            for watcher in tuple(self._watchers_by_value.get(value, ())):
                watcher.offer(event)
            if event.prev_fields is not None:
                previous = event.prev_fields.get(self._trigger_field, "")
                if previous != value:
                    for watcher in tuple(self._watchers_by_value.get(previous, ())):
                        watcher.offer(event)
        for watcher in tuple(self._watchers_any):
            watcher.offer(event)

    def _every_watcher(self) -> list[Watcher]:
        return [*self._watchers_any, *(w for index in (self._watchers_by_name, self._watchers_by_value)
                                       for group in index.values() for w in group)]

    def bookmark(self, line: bytes, stamp: str) -> None:
        """Offer a BOOKMARK `line` at proxy RV `stamp` to every watcher (those that asked for
        bookmarks queue it)."""
        for watcher in self._every_watcher():
            watcher.offer_bookmark(line, stamp)

    def terminate_all(self, message: str) -> None:
        """End every watcher with a 410 Expired ERROR event carrying `message`: each must relist."""
        for watcher in self._every_watcher():
            watcher.terminate(message)
