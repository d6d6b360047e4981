"""The watch cache: one per configured cache (and one per protobuf twin), merging every partition
of its role. A façade over its two parts, which is what reflectors, request handlers and metrics
hold (kube-apiserver's `Cacher` composes the same two: k8s.io/apiserver/pkg/storage/cacher/
cacher.go over watch_cache.go):

    proxy.cache.store.CacheStore       objects, indexes, the ring of recent events, the RV vector
    proxy.cache.dispatcher.Dispatcher  the cache watchers each event is offered to

The store hands each event it makes to the dispatcher within the same plain `def` (STYLE §8),
so a change and its fan-out are one atomic step. Reads and writes are the store's (documented
there); registering cache watchers is the dispatcher's. Which caches exist, their protobuf twins
and their reflectors are `proxy.cache.cache_set`'s. No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from config.models import CacheConfig
from proxy.cache.dispatcher import Dispatcher, Watcher
from proxy.cache.formats import JSON, CachedObject, ObjectFormat
from proxy.cache.store import CachedEvent, CacheStore, Key
from routing import rv as rvcodec
from routing.cache_policy import CacheSpec
from routing.decide import OwnsFn
from routing.selectors import TRIGGER_FIELDS, FieldSelector, LabelSelector

__all__ = ["WatchCache"]


class WatchCache:
    """See the module docstring; the arguments are `CacheStore`'s. `filling`: its reflectors
    were started (a protobuf twin waits for its first client: proxy.cache.cache_set)."""

    def __init__(
        self,
        *,
        spec: CacheConfig,
        codec: rvcodec.RVCodec,
        label_selector: LabelSelector,
        field_selector: FieldSelector,
        on_node: Callable[[str, str | None], None] | None = None,
        keep: OwnsFn | None = None,
        format: ObjectFormat = JSON,
    ) -> None:
        self._dispatcher = Dispatcher(TRIGGER_FIELDS.get((spec.group, spec.resource), ""))
        self._store = CacheStore(spec=spec, codec=codec, label_selector=label_selector, field_selector=field_selector,
                                 handler=self._dispatcher, on_node=on_node, keep=keep, format=format)
        self.filling = False

    # -- what the cache is ------------------------------------------------------------------

    @property
    def spec(self) -> CacheConfig:
        return self._store.spec

    @property
    def format(self) -> ObjectFormat:
        """How objects are kept and written (proxy.cache.formats)."""
        return self._store.format

    @property
    def codec(self) -> rvcodec.RVCodec:
        """The RV space of the cache's role (replaced by `rebase`)."""
        return self._store.codec

    @property
    def label_selector(self) -> LabelSelector:
        return self._store.label_selector

    @property
    def field_selector(self) -> FieldSelector:
        return self._store.field_selector

    @property
    def space(self) -> tuple[str, ...]:
        return self._store.space

    @property
    def trigger_field(self) -> str:
        """The field objects and cache watchers are indexed by ("" for none)."""
        return self._store.trigger_field

    def policy_spec(self) -> CacheSpec:
        return self._store.policy_spec()

    # -- read-only views (CacheStore) -------------------------------------------------------

    @property
    def kind(self) -> str:
        return self._store.kind

    @property
    def api_version(self) -> str:
        return self._store.api_version

    @property
    def objects(self) -> Mapping[Key, CachedObject]:
        return self._store.objects

    @property
    def vector(self) -> tuple[int, ...]:
        return self._store.vector

    def position(self, partition: str) -> int:
        return self._store.position(partition)

    @property
    def relists(self) -> tuple[int, ...]:
        return self._store.relists

    @property
    def bytes_total(self) -> int:
        return self._store.bytes_total

    @property
    def ring_size(self) -> int:
        return self._store.ring_size

    def has_synced(self, partition: str) -> bool:
        return self._store.has_synced(partition)

    @property
    def is_synced(self) -> bool:
        return self._store.is_synced

    @property
    def rv(self) -> str:
        return self._store.rv

    def item_kind(self) -> str:
        return self._store.item_kind()

    def get(self, namespace: str, name: str, slot: int | None = None) -> bytes | None:
        return self._store.get(namespace, name, slot)

    # -- ingest (reflectors: proxy.cache.reflector.Store) -----------------------------------

    def start_filling(self) -> None:
        """Its reflectors start now (`CacheStore.start_filling`)."""
        self.filling = True
        self._store.start_filling()

    def apply(self, partition: str, kind: str, obj: Any) -> None:
        self._store.apply(partition, kind, obj)

    def bookmark(self, partition: str, native: int) -> None:
        self._store.bookmark(partition, native)

    def bookmark_line(self, stamp: str, *, initial_events_end: bool = False) -> bytes:
        return self._store.bookmark_line(stamp, initial_events_end=initial_events_end)

    def replace(self, partition: str, items: Iterable[Any], list_rv: int, *, kind: str, api_version: str) -> None:
        self._store.replace(partition, items, list_rv, kind=kind, api_version=api_version)

    def begin_list(self, partition: str, *, kind: str, api_version: str) -> None:
        self._store.begin_list(partition, kind=kind, api_version=api_version)

    def list_page(self, partition: str, items: Iterable[Any]) -> None:
        self._store.list_page(partition, items)

    def end_list(self, partition: str, list_rv: int) -> None:
        self._store.end_list(partition, list_rv)

    def rebase(self, codec: rvcodec.RVCodec) -> tuple[str, ...]:
        return self._store.rebase(codec)

    def retire(self, partition: str) -> int:
        return self._store.retire(partition)

    # -- reads (request handlers) -----------------------------------------------------------

    def matching(
        self,
        label_selector: LabelSelector,
        field_selector: FieldSelector,
        namespace: str = "",
        *,
        slot: int | None = None,
        name: str = "",
    ) -> list[CachedObject]:
        return self._store.matching(label_selector, field_selector, namespace, slot=slot, name=name)

    def share_bytes(self, slot: int, label_selector: LabelSelector, field_selector: FieldSelector, namespace: str = "") -> bytes:
        return self._store.share_bytes(slot, label_selector, field_selector, namespace)

    def list_bytes(self, objects: list[CachedObject]) -> bytes:
        return self._store.list_bytes(objects)

    def list_chunks(self, objects: list[CachedObject], *, batch: int) -> Iterator[bytes]:
        return self._store.list_chunks(objects, batch=batch)

    def resumable(self, vector: tuple[int, ...]) -> bool:
        return self._store.resumable(vector)

    def reached(self, vector: tuple[int, ...]) -> bool:
        return self._store.reached(vector)

    def too_old(self, vector: tuple[int, ...]) -> bool:
        return self._store.too_old(vector)

    def events_after(self, vector: tuple[int, ...]) -> list[CachedEvent]:
        return self._store.events_after(vector)

    # -- cache watchers (Dispatcher) --------------------------------------------------------

    @property
    def watcher_count(self) -> int:
        return self._dispatcher.watcher_count

    def add_watcher(self, watcher: Watcher) -> None:
        self._dispatcher.add_watcher(watcher)

    def remove_watcher(self, watcher: Watcher) -> None:
        self._dispatcher.remove_watcher(watcher)

    def debug(self) -> dict[str, Any]:
        """The figures /debug/caches reports for this cache."""
        return self._store.debug(watchers=self.watcher_count)
