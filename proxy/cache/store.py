"""The store of a watch cache: its objects, their indexes and the ring of recent events, merging
every partition of the cache's role (kube-apiserver's `watchCache`:
k8s.io/apiserver/pkg/storage/cacher/watch_cache.go).

Owns, per cached object, its bytes in the cache's format (`proxy.cache.formats`: compact JSON,
or enveloped protobuf in a cache's protobuf twin), transformed once: managedFields and the
last-applied annotation stripped by default, kind/apiVersion set, every native resourceVersion
in it turned into the object-form proxy RV of its partition, which never expires; plus a small
index (key, labels, selectable fields, owner's native RV, the sorted keys, one name across
partitions); a bounded ring of recent events for resuming watches; and the RV vector it has
reached. It does no I/O and knows no cache watcher: each event it makes is handed, in the same
plain `def` that made it, to its `EventHandler` (`proxy.cache.dispatcher.Dispatcher`, as
watchCache's `eventHandler` is the cacher's dispatch). It does not own the reflectors that feed
it (`proxy.cache.reflector`) nor the cache's protobuf twin (`proxy.cache.cache_set`).

Concurrency: every method that changes state is a plain `def` (no `await` inside), so each runs
atomically on the event loop (STYLE §8). Readers get immutable bytes.

Events carry the vector-form RV of the position after them (their `stamp`), written into the
event's line once. A vector no epoch of the shared table can encode (the table fell far behind)
ends every cache watcher with 410 (`EventHandler.terminate_all`) and empties the ring: clients
relist once it caught up.

Partitions join and retire at runtime (config.models.PartitionState): slots are append-only.
`rebase` takes the role's new codec: a partition that joined gets a new slot, and its first LIST
reaches open cache watchers as ADDED events (its floor stays 0: the ring holds everything of it,
so a client RV from before it joined, where its field reads 0, resumes and gets them). `retire`
turns a retired partition's objects into DELETED events at one synthetic native RV past the
last it sent, so a client resuming from any RV issued while it lived gets them too.

Resuming: the ring keeps, per partition, a floor: the native RV after which it holds every
event of that partition. A client vector R can be resumed when floor[i] <= R[i] <= vector[i] for
every partition i; the events to replay are the ring's events whose native RV is above R's
field for their partition, in ring order (so stamps strictly increase). A vector another
process issued may be incomparable with this ring's stamps; those events are replayed at the
merge of the two (`events_after`).
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from config.models import CacheConfig
from proxy.cache.formats import JSON, CachedObject, ObjectFormat
from routing import rv as rvcodec
from routing.cache_policy import CacheSpec
from routing.decide import OwnsFn
from routing.selectors import TRIGGER_FIELDS, FieldSelector, LabelSelector, trigger_value

__all__ = ["CacheStore", "CachedEvent", "CachedObject", "EventHandler", "Key"]

Key = tuple[int, str, str]  # (slot, namespace, name)

# the message of the 410 that ends every cache watcher when no epoch fits the cache's position
_TABLE_BEHIND = "too old resource version: the proxy's resourceVersion table is behind"


@dataclass(slots=True)
class CachedEvent:
    """One event, encoded once. `line` is the event as the cache's format writes it (a JSON
    WatchEvent line, or a protobuf watch frame) for `type`; `prev_*` are the selectable attributes
    of the object before the event (None for ADDED). `prev_raw` is the object's bytes before the
    event when its labels or fields changed (only then can it leave a watcher's selection, which
    is told with the previous state), else None."""

    type: str
    obj: CachedObject
    slot: int
    native_rv: int
    stamp: str
    line: bytes
    prev_labels: dict[str, str] | None
    prev_fields: dict[str, str] | None
    prev_raw: bytes | None = None


class EventHandler(Protocol):
    """Where the store's events go, as they are made (watch_cache.go's `eventHandler`): the
    fan-out to cache watchers (`proxy.cache.dispatcher.Dispatcher`). Plain defs: each runs
    within the store's atomic change."""

    def dispatch(self, event: CachedEvent) -> None: ...  # pragma: no cover
    def bookmark(self, line: bytes, stamp: str) -> None: ...  # pragma: no cover
    def terminate_all(self, message: str) -> None: ...  # pragma: no cover


@dataclass(slots=True)
class _Listing:
    """A LIST in progress for one partition."""

    first_sync: bool
    seen: set[Key] = field(default_factory=set)
    changed: list[tuple[int, Key, Any]] = field(default_factory=list)


class CacheStore:
    """See the module docstring. `codec` is the RV space of the cache's role: its partitions in
    slot order and the shared epoch table. `handler` gets every event. `on_node(name, partition)`
    is told where a node is (None: gone) for the node index; `keep(partition, namespace, name)`
    whether `partition` owns an object (routing.decide.owner_by_key). State is private:
    reflectors change it through the ingest methods, request handlers read it through the
    read-only views."""

    def __init__(
        self,
        *,
        spec: CacheConfig,
        codec: rvcodec.RVCodec,
        label_selector: LabelSelector,
        field_selector: FieldSelector,
        handler: EventHandler,
        on_node: Callable[[str, str | None], None] | None = None,
        keep: OwnsFn | None = None,
        format: ObjectFormat = JSON,
    ) -> None:
        self.spec = spec
        self.format = format  # how objects are kept and written (proxy.cache.formats)
        self.codec = codec
        self.label_selector = label_selector
        self.field_selector = field_selector
        self._handler = handler
        self._on_node = on_node  # node name -> owning RP (None: gone)
        # keep(partition, namespace, name): whether `partition` owns the object; a union of tenant
        # partitions drops the copies of system namespaces every TP has (routing.decide.owner_by_key).
        self._keep = keep
        n = len(codec.space)
        self._kind = ""
        self._api_version = ""
        self._objects: dict[Key, CachedObject] = {}
        self._vector = [0] * n
        self._floor = [0] * n
        self._synced: set[str] = set()
        self._ring: deque[CachedEvent] = deque(maxlen=spec.history)
        self._bytes = 0
        self._relists = [0] * n
        self._events = 0
        self._sorted_keys: list[Key] | None = None
        # the trigger index (routing.selectors.TRIGGER_FIELDS: a pod's spec.nodeName): value ->
        # keys of the objects holding it, so a kubelet's list reads its node's pods only
        self.trigger_field = TRIGGER_FIELDS.get((spec.group, spec.resource), "")
        self._by_trigger: dict[str, set[Key]] = {}
        self._namespaced = False  # some object has a namespace: a name alone is no key
        self._listing: dict[str, _Listing] = {}
        self._joining: set[str] = set()  # partitions added at runtime whose first LIST is not in yet

    # -- read-only views -------------------------------------------------------------------

    @property
    def space(self) -> tuple[str, ...]:
        """The role's partitions in slot order (retired ones too)."""
        return self.codec.space

    @property
    def kind(self) -> str:
        """The list kind the partitions answered (`NodeList`), "" before the first LIST."""
        return self._kind

    @property
    def api_version(self) -> str:
        return self._api_version

    @property
    def objects(self) -> Mapping[Key, CachedObject]:
        """Every cached object by (slot, namespace, name): a read-only view."""
        return MappingProxyType(self._objects)

    @property
    def vector(self) -> tuple[int, ...]:
        """The native RV each partition has reached, in slot order."""
        return tuple(self._vector)

    def position(self, partition: str) -> int:
        """The native RV `partition` has reached (where its reflector's watch resumes)."""
        return self._vector[self.space.index(partition)]

    @property
    def relists(self) -> tuple[int, ...]:
        """Relists after 410 per partition, in slot order."""
        return tuple(self._relists)

    @property
    def bytes_total(self) -> int:
        """Bytes of every cached object's JSON."""
        return self._bytes

    @property
    def ring_size(self) -> int:
        """Events held for resuming watches."""
        return len(self._ring)

    def has_synced(self, partition: str) -> bool:
        """Whether `partition`'s first LIST is in."""
        return partition in self._synced

    @property
    def is_synced(self) -> bool:
        """Every live partition's first LIST is in (one joining at runtime does not count: the
        cache goes on serving while its objects arrive as ADDED events)."""
        return all(self.space[i] in self._synced or self.space[i] in self._joining for i in self.codec.live_slots)

    @property
    def rv(self) -> str:
        """The cache's current position as a proxy RV ("" until every live partition's first
        LIST is in, or while no epoch of the table can encode it; a joining partition's field
        reads 0 until its LIST is in)."""
        if not self.is_synced or not any(self._vector):
            return ""
        try:
            return self.codec.encode(self._vector)
        except rvcodec.RVUnencodable:
            return ""

    def policy_spec(self) -> CacheSpec:
        """What routing.cache_policy needs to know of this cache."""
        return CacheSpec(
            group=self.spec.group,
            resource=self.spec.resource,
            namespace=self.spec.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            codec=self.codec,
        )

    def item_kind(self) -> str:
        """The kind of one item (`Node` of `NodeList`), "" before the first LIST."""
        return self._kind.removesuffix("List") if self._kind else ""

    def get(self, namespace: str, name: str, slot: int | None = None) -> bytes | None:
        """The stored bytes of one object (of partition `slot`, or of any), None when absent."""
        for candidate in range(len(self.space)) if slot is None else (slot,):
            obj = self._objects.get((candidate, namespace, name))
            if obj is not None:
                return obj.raw
        return None

    # -- ingest (reflectors) ---------------------------------------------------------------

    def start_filling(self) -> None:
        """Its reflectors start now. An empty store (a protobuf twin filled at its first client)
        waits for every partition's first LIST, even one that joined before: nothing of it was
        served yet."""
        if not self._synced:
            self._joining.clear()

    def _record(self, slot: int, obj: Any, native: int) -> CachedObject:
        record = self.format.record(self.spec, self.codec, slot, obj, native, api_version=self._api_version, item_kind=self.item_kind())
        if record.namespace:
            self._namespaced = True
        return record

    def _matches_cache(self, obj: CachedObject) -> bool:
        return self.label_selector.matches(obj.labels) and self.field_selector.matches(obj.fields)

    def _emit(self, kind: str, slot: int, native: int, obj: Any, old: CachedObject | None) -> None:
        """Apply one change of partition `slot` at native RV `native` and hand it to the
        handler. `obj` is the object after the change (for DELETED: its last state), None for a
        synthetic DELETED of `old` after a relist."""
        stamp = self._advance(slot, native)
        selected = self._selected(kind, slot, native, obj, old)
        if selected is None:
            return
        kind, record = selected
        stored = self._hold(kind, slot, record, old)
        if stored is None:
            return
        if self._on_node is not None:
            self._on_node(record.name, self.space[slot] if stored != "DELETED" else None)
        self._append(CachedEvent(
            type=stored,
            obj=record,
            slot=slot,
            native_rv=native,
            stamp=stamp,
            line=self.format.event(stored, record.raw, stamp),
            prev_labels=old.labels if old is not None else None,
            prev_fields=old.fields if old is not None else None,
            prev_raw=old.raw if old is not None and (old.labels != record.labels or old.fields != record.fields) else None,
        ))

    def _advance(self, slot: int, native: int) -> str:
        """Move partition `slot` to `native`; the event's stamp: the vector with `native` in
        that slot, "" when no epoch can encode it."""
        self._vector[slot] = max(self._vector[slot], native)
        at = list(self._vector)
        at[slot] = native
        try:
            return self.codec.encode(at)
        except rvcodec.RVUnencodable:
            return ""

    def _selected(self, kind: str, slot: int, native: int, obj: Any,
                  old: CachedObject | None) -> tuple[str, CachedObject] | None:
        """(event type, the object as the event carries it) within the cache's selection; None
        when the change does not concern the cache."""
        if obj is not None:
            record = self._record(slot, obj, native)
            if kind != "DELETED" and not self._matches_cache(record):
                if old is None:
                    return None  # never was in the cache's selection
                # Moved out of it: DELETED with the object's previous state at this event's RV,
                # as the apiserver cacher tells a watcher whose selector it stops matching
                # (cacheWatcher.convertToWatchEvent; clients such as kwok filter deletions by
                # the deleted object's labels).
                return "DELETED", dataclasses.replace(old, native_rv=native)
            return kind, record
        if old is not None:
            return kind, dataclasses.replace(old, native_rv=native)
        return None

    def _hold(self, kind: str, slot: int, record: CachedObject, old: CachedObject | None) -> str | None:
        """Keep or drop `record`; the event's type (ADDED or MODIFIED by what was held, or
        DELETED), None for a DELETED of an object not held."""
        key = (slot, record.namespace, record.name)
        if kind == "DELETED":
            removed = self._objects.pop(key, None)
            if removed is None:
                return None
            self._bytes -= len(removed.raw)
            self._sorted_keys = None
            self._unindex(key, removed)
            return kind
        if old is None:
            kind = "ADDED"
            self._sorted_keys = None
        else:
            kind = "MODIFIED"
            self._bytes -= len(old.raw)
            self._unindex(key, old)
        self._objects[key] = record
        self._bytes += len(record.raw)
        self._index(key, record)
        return kind

    def _index(self, key: Key, obj: CachedObject) -> None:
        if self.trigger_field:
            self._by_trigger.setdefault(obj.fields.get(self.trigger_field, ""), set()).add(key)

    def _unindex(self, key: Key, obj: CachedObject) -> None:
        if self.trigger_field:
            value = obj.fields.get(self.trigger_field, "")
            keys = self._by_trigger.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_trigger[value]

    def _append(self, event: CachedEvent) -> None:
        """Put the event in the ring (the evicted one raises its partition's floor) and hand it
        to the handler; an event without a stamp ends every watcher instead."""
        if len(self._ring) == self._ring.maxlen:
            evicted = self._ring[0]
            self._floor[evicted.slot] = max(self._floor[evicted.slot], evicted.native_rv)
        self._events += 1
        if not event.stamp:
            self._unencodable()
            return
        self._ring.append(event)
        self._handler.dispatch(event)

    def _unencodable(self) -> None:
        """No epoch fits the cache's position: every watcher must relist, and no RV issued
        before this point can be resumed from the ring."""
        self._ring.clear()
        self._floor = list(self._vector)
        self._handler.terminate_all(_TABLE_BEHIND)

    def apply(self, partition: str, kind: str, obj: Any) -> None:
        """Apply one upstream watch event (ADDED, MODIFIED or DELETED) of `partition`; `obj` as
        the cache's format takes it (a decoded JSON object, or a protobuf object's message)."""
        slot = self.space.index(partition)
        namespace, name, native = self.format.meta(self.spec, obj)
        if not self._owned(partition, namespace, name):
            self._vector[slot] = max(self._vector[slot], native)
            return
        key = (slot, namespace, name)
        old = self._objects.get(key)
        self._emit(kind, slot, native, obj, old)

    def _owned(self, partition: str, namespace: str, name: str) -> bool:
        """Whether `partition` owns the object (routing.decide.owner_by_key)."""
        return self._keep is None or self._keep(partition, namespace, name)

    def bookmark(self, partition: str, native: int) -> None:
        """An upstream bookmark: the partition has reached `native`. The handler is told (cache
        watchers that asked for bookmarks get one) when the whole vector moved."""
        slot = self.space.index(partition)
        if native <= self._vector[slot]:
            return
        self._vector[slot] = native
        stamp = self.rv
        if not self.is_synced or not stamp:
            return
        self._handler.bookmark(self.bookmark_line(stamp), stamp)

    def bookmark_line(self, stamp: str, *, initial_events_end: bool = False) -> bytes:
        """A BOOKMARK event at proxy RV `stamp` in the cache's format."""
        return self.format.bookmark(self._api_version, self.item_kind(), stamp, initial_events_end=initial_events_end)

    def replace(self, partition: str, items: Iterable[Any], list_rv: int, *, kind: str, api_version: str) -> None:
        """A whole LIST of `partition` at native RV `list_rv`: `begin_list`, one page, `end_list`."""
        self.begin_list(partition, kind=kind, api_version=api_version)
        self.list_page(partition, items)
        self.end_list(partition, list_rv)

    def begin_list(self, partition: str, *, kind: str, api_version: str) -> None:
        """Start a LIST of `partition` (initial sync, or relist after 410), read page by page
        so the partition's objects are never all decoded at once."""
        self._kind, self._api_version = kind or self._kind, api_version or self._api_version
        # a partition that joins at runtime is listed like a relist: its objects become events
        self._listing[partition] = _Listing(first_sync=partition not in self._synced and partition not in self._joining)

    def list_page(self, partition: str, items: Iterable[Any]) -> None:
        """One page of the LIST. On the initial sync objects are stored at once (there are no
        watchers of this partition's past to tell); on a relist only changed objects are kept
        until `end_list` turns them into events."""
        listing = self._listing[partition]
        slot = self.space.index(partition)
        for obj in items:
            namespace, name, native = self.format.meta(self.spec, obj)
            if not self._owned(partition, namespace, name):
                continue
            key = (slot, namespace, name)
            listing.seen.add(key)
            old = self._objects.get(key)
            if old is not None and old.native_rv == native:
                continue
            if not listing.first_sync:
                listing.changed.append((native, key, obj))
                continue
            self._vector[slot] = max(self._vector[slot], native)
            record = self._record(slot, obj, native)
            if self._matches_cache(record):
                if old is not None:  # listed again after a relist began? the initial sync holds none
                    self._bytes -= len(old.raw)
                    self._unindex(key, old)
                self._objects[key] = record
                self._bytes += len(record.raw)
                self._index(key, record)
                self._sorted_keys = None
                if self._on_node is not None:
                    self._on_node(record.name, partition)

    def end_list(self, partition: str, list_rv: int) -> None:
        """Finish the LIST at its snapshot RV. On a relist, the difference to what the cache
        held becomes synthetic events (ADDED/MODIFIED in native RV order, then DELETED at
        `list_rv`), so cache watchers never relist because of an upstream hiccup. A partition
        that joined at runtime is listed the same way: everything it holds arrives as ADDED."""
        listing = self._listing.pop(partition)
        slot = self.space.index(partition)
        if partition in self._joining:
            self._joining.discard(partition)
            self._synced.add(partition)
            listing.first_sync = False
        elif not listing.first_sync:
            self._relists[slot] += 1
        if not listing.first_sync:
            for native, key, obj in sorted(listing.changed, key=lambda c: c[0]):
                self._emit("MODIFIED", slot, native, obj, self._objects.get(key))
            for key in [k for k in self._objects if k[0] == slot and k not in listing.seen]:
                self._emit("DELETED", slot, list_rv, None, self._objects[key])
        self._sorted_keys = None
        self._vector[slot] = max(self._vector[slot], list_rv)
        if listing.first_sync:
            self._floor[slot] = list_rv
            self._synced.add(partition)

    # -- the partition set changes (proxy.partition_set) --------------------------------------

    def rebase(self, codec: rvcodec.RVCodec) -> tuple[str, ...]:
        """Take the role's codec after a partition-set change. Its space must start with the
        current one (slots are append-only); partitions past it join (an empty slot, listed
        by their reflector like a relist). Partitions the codec marks retired are retired here.
        Returns the partitions that joined. Raises ValueError for a space that is not an
        extension of the current one."""
        joined = rvcodec.joined_partitions(self.space, codec)
        grown = len(codec.space) - len(self.space)
        self._vector += [0] * grown
        self._floor += [0] * grown
        self._relists += [0] * grown
        self._joining.update(joined)
        self.codec = codec
        for partition in codec.retired:
            if partition in self._synced or partition in self._joining:
                self.retire(partition)
        return joined

    def retire(self, partition: str) -> int:
        """Drop a retired partition's objects: each becomes a DELETED event at one native RV
        past the last the partition sent (a synthetic position in a slot nobody reads again),
        so resuming from any RV issued while it lived replays them. Returns the events."""
        slot = self.space.index(partition)
        self._synced.discard(partition)
        self._joining.discard(partition)
        self._listing.pop(partition, None)
        gone = [key for key in self._objects if key[0] == slot]
        native = self._vector[slot] + 1
        for key in gone:
            self._emit("DELETED", slot, native, None, self._objects[key])
        self._vector[slot] = max(self._vector[slot], native)
        return len(gone)

    # -- reads (request handlers) ----------------------------------------------------------

    def matching(
        self,
        label_selector: LabelSelector,
        field_selector: FieldSelector,
        namespace: str = "",
        *,
        slot: int | None = None,
        name: str = "",
    ) -> list[CachedObject]:
        """Objects matching the selectors (and the namespace, partition slot and name when
        given), in (partition, namespace, name) order. One name (a kubelet's own Node, a
        `metadata.name=` selector) is looked up by key, one per partition, not searched for:
        50,000 kubelets listing their Node would otherwise each walk 50,000 objects; nor is one
        value of the trigger field (a kubelet's `spec.nodeName=<node>` pods)."""
        value = trigger_value(self.trigger_field, field_selector)
        if name and (namespace or not self._namespaced):
            slots = range(len(self.space)) if slot is None else (slot,)
            keys: Iterable[Key] = [key for key in ((s, namespace, name) for s in slots) if key in self._objects]
        elif value is not None:
            keys = sorted(self._by_trigger.get(value, ()))
        else:
            if self._sorted_keys is None:
                self._sorted_keys = sorted(self._objects)
            keys = self._sorted_keys
        out = []
        for key in keys:
            obj = self._objects[key]
            if (namespace and obj.namespace != namespace) or (slot is not None and obj.slot != slot) or (name and obj.name != name):
                continue
            if label_selector.matches(obj.labels) and field_selector.matches(obj.fields):
                out.append(obj)
        return out

    def share_bytes(self, slot: int, label_selector: LabelSelector, field_selector: FieldSelector, namespace: str = "") -> bytes:
        """One partition's share as that partition would answer a LIST: its matching objects
        under its native list RV (a union list's stand-in for a partition that is down)."""
        objects = self.matching(label_selector, field_selector, namespace, slot=slot)
        return b"".join(self._list_pieces(objects, str(self._vector[slot]), batch=len(objects) or 1))

    def list_bytes(self, objects: list[CachedObject]) -> bytes:
        """A `<Kind>List` joining stored bytes; its RV is the cache's vector."""
        return b"".join(self.list_chunks(objects, batch=len(objects) or 1))

    def list_chunks(self, objects: list[CachedObject], *, batch: int) -> Iterator[bytes]:
        """The same list as `list_bytes`, in pieces of `batch` objects, so a large list is
        written without ever being one buffer (8 concurrent 20,000-node lists held 1.2 GiB
        as whole bodies: bench/list_nodes.py)."""
        return self._list_pieces(objects, self.rv, batch=batch)

    def _list_pieces(self, objects: list[CachedObject], list_rv: str, *, batch: int) -> Iterator[bytes]:
        return self.format.list_pieces(self._api_version, self._kind, list_rv, objects, batch=batch)

    def resumable(self, vector: tuple[int, ...]) -> bool:
        """Whether the ring holds every event after `vector` (see the module docstring). For a
        retired partition that means its DELETED events: a client that saw its objects cannot
        resume here if this process never held them (its field 0 here, as after a restart)."""
        return all(f <= r <= v for f, r, v in zip(self._floor, vector, self._vector))

    def too_old(self, vector: tuple[int, ...]) -> bool:
        """Whether a watch from `vector` cannot be resumed because the ring no longer (or, after
        a restart, never) held the events after it in some live partition, while the cache is
        past it everywhere: kube-apiserver's cacher answers such a watch 410 Expired ("too old
        resource version", watch_cache.go getAllEventsSinceLocked) and the client relists."""
        return self.reached(vector) and any(vector[i] < self._floor[i] for i in self.codec.live_slots)

    def reached(self, vector: tuple[int, ...]) -> bool:
        """Whether the cache is at or past `vector` in every live partition."""
        return all(vector[i] <= self._vector[i] for i in self.codec.live_slots)

    def events_after(self, vector: tuple[int, ...]) -> list[CachedEvent]:
        """The ring's events after `vector`, in ring order (call when `resumable(vector)`).

        `vector` may come from another process (a worker or replica) whose caches saw the
        partitions' events interleaved otherwise: a replayed event's stamp can then be behind it
        in some slot and encode to a smaller RV than the one the client holds (fields are most
        significant first). Such events are replayed at the merge of their stamp and `vector`,
        each field the greater: the client has seen everything up to `vector` already, so that
        names the same position, and the RVs it receives keep growing (KEP-5504's order). Ring
        stamps only grow, so when the first replayed event's stamp covers `vector` all do."""
        events = [e for e in self._ring if e.native_rv > vector[e.slot]]
        if not events or self._covers(events[0].stamp, vector):
            return events
        return [self._restamped(e, vector) for e in events]

    def _covers(self, stamp: str, vector: tuple[int, ...]) -> bool:
        """Whether `stamp` is at or past `vector` in every slot (an undecodable stamp: yes)."""
        try:
            at = self.codec.decode(stamp)
        except rvcodec.RVError:
            return True
        return all(a >= v for a, v in zip(at, vector))

    def _restamped(self, event: CachedEvent, vector: tuple[int, ...]) -> CachedEvent:
        """`event` at the merge of its stamp and `vector` (events_after); as it was when no
        epoch encodes that merge."""
        try:
            merged = [max(a, v) for a, v in zip(self.codec.decode(event.stamp), vector)]
            stamp = self.codec.encode(merged)
        except rvcodec.RVError:
            return event
        return dataclasses.replace(event, stamp=stamp, line=self.format.event(event.type, event.obj.raw, stamp))

    def debug(self, *, watchers: int) -> dict[str, Any]:
        """The figures /debug/caches reports for this cache (`watchers`: its cache watchers)."""
        oldest = self._ring[0].stamp if self._ring else ""
        newest = self._ring[-1].stamp if self._ring else ""
        return {
            "name": self.spec.name,
            "format": self.format.name,
            "resource": f"{self.spec.group or 'core'}/{self.spec.version}/{self.spec.resource}",
            "labelSelector": self.spec.label_selector,
            "fieldSelector": self.spec.field_selector,
            "synced": self.is_synced,
            "objects": len(self._objects),
            "bytes": self._bytes,
            "watchers": watchers,
            "ring": {"events": len(self._ring), "capacity": self.spec.history, "oldest": oldest, "newest": newest},
            "partitions": {
                p: {"resourceVersion": self._vector[i], "floor": self._floor[i], "relists": self._relists[i]}
                for i, p in enumerate(self.space)
            },
            "events": self._events,
            "at": time.time(),
        }
