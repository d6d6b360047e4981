"""Merging the answers of several partitions into one union list or one union watch. Pure.

Union list: each partition's compact JSON body gets its resourceVersions translated into proxy
RVs naming that partition's slot (`translate_single`), items (or Table rows) that the partition
does not own are dropped, and the rest are concatenated under one list whose RV is the vector of
every partition's list RV (DESIGN §5).

Union watch: `WatchMerge` consumes one upstream event line at a time, tagged with the partition
that sent it, keeps the RV vector, and returns the lines to write downstream:
- an event's object RV becomes the vector after that event (the owner's slot = its native RV);
- upstream bookmarks advance the vector; a merged BOOKMARK is written only when the client asked
  (`allowWatchBookmarks`), every slot is known, and the vector moved (RVs strictly increase);
- `k8s.io/initial-events-end` bookmarks of the partitions are swallowed and ONE merged one is
  written once every partition has finished its initial events (KEP-3157; client-go's reflector
  replaces its store on that bookmark, so a partial one would drop objects);
- an upstream ERROR ends the union watch: 410 becomes a complete `Expired` Status so the client
  relists; other errors are passed on as they came.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from routing import rv as rvcodec
from routing.rvrewrite import rewrite_rvs, set_all_rvs
from routing.status import expired, watch_error_event

INITIAL_EVENTS_END = "k8s.io/initial-events-end"

# keep(partition, object) -> whether the union keeps an object that `partition` sent.
KeepFn = Callable[[str, dict[str, Any]], bool]


def object_meta(obj: dict[str, Any]) -> dict[str, Any]:
    """metadata of an object, or of the single row object of a Table (kubectl get -w)."""
    if obj.get("kind") == "Table":
        rows = obj.get("rows") or []
        if rows and isinstance(rows[0].get("object"), dict):
            return rows[0]["object"].get("metadata") or {}
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def native_rv(obj: dict[str, Any]) -> int:
    """The native resourceVersion of an upstream object (0 when absent or not numeric)."""
    value = object_meta(obj).get("resourceVersion") or (obj.get("metadata") or {}).get("resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() else 0


def translate_single(epoch: int, slots: int, slot: int) -> Callable[[bytes], bytes | None]:
    """A translator for `rewrite_rvs`: native RV -> proxy RV naming only `slot`."""

    def translate(native: bytes) -> bytes | None:
        value = int(native)
        if value == 0:
            return None  # "0" means "any" and stays "0"
        return rvcodec.encode(epoch, rvcodec.single_slot(slots, slot, value)).encode()

    return translate


@dataclass(frozen=True, slots=True)
class PartitionList:
    """One partition's 2xx answer to a union list."""

    partition: str
    slot: int
    body: bytes


def merge_lists(parts: Sequence[PartitionList], *, epoch: int, slots: int, keep: KeepFn | None) -> bytes:
    """Merge partition lists (or Tables) into one compact JSON list. Raises ValueError if a body
    is not a JSON list."""
    vector = [0] * slots
    merged: dict[str, Any] | None = None
    rows_key = "items"
    out_items: list[Any] = []
    for part in parts:
        doc = orjson.loads(rewrite_rvs(part.body, translate_single(epoch, slots, part.slot)))
        if not isinstance(doc, dict):
            raise ValueError(f"{part.partition}: list answer is not an object")
        list_rv = doc.get("metadata", {}).get("resourceVersion", "")
        if list_rv and list_rv != "0":
            vector[part.slot] = rvcodec.decode(list_rv, epoch=epoch, slots=slots)[part.slot]
        if merged is None:
            merged = doc
            rows_key = "rows" if doc.get("kind") == "Table" else "items"
        for item in doc.get(rows_key) or ():
            target = item.get("object", {}) if rows_key == "rows" else item
            if keep is None or keep(part.partition, target):
                out_items.append(item)
    if merged is None:
        raise ValueError("no partition answered")
    meta = dict(merged.get("metadata") or {})
    meta.pop("continue", None)
    meta.pop("remainingItemCount", None)
    if all(vector):
        meta["resourceVersion"] = rvcodec.encode(epoch, vector)
    merged["metadata"] = meta
    merged[rows_key] = out_items
    return orjson.dumps(merged)


@dataclass(slots=True)
class WatchMerge:
    """The state of one union watch (see module docstring). Not thread-safe; one per stream.

    space: the partitions of the RV space (slot order); start: the starting vector (zeros when
    the client started from "" or "0"); initial: partitions still sending initial events;
    client_initial_events: the client asked sendInitialEvents=true (write the merged end bookmark);
    bookmarks: the client asked allowWatchBookmarks=true.
    """

    epoch: int
    space: tuple[str, ...]
    start: tuple[int, ...]
    initial: set[str]
    client_initial_events: bool
    bookmarks: bool
    keep: KeepFn | None = None
    vector: list[int] = field(default_factory=list)
    last_written: str = ""
    finished: bool = False
    _template: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.vector = list(self.start)

    @property
    def rv(self) -> str:
        """The current vector as a proxy RV."""
        return rvcodec.encode(self.epoch, self.vector)

    def _bookmark(self, *, end: bool) -> bytes:
        obj = dict(self._template or {"kind": "", "apiVersion": ""})
        meta: dict[str, Any] = {"resourceVersion": self.rv}
        if end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        obj["metadata"] = meta
        self.last_written = self.rv
        return orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"

    def on_line(self, partition: str, line: bytes) -> list[bytes]:
        """Consume one upstream event line; return the lines to write downstream."""
        if self.finished:
            return []
        event = orjson.loads(line)
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            self.finished = True
            if obj.get("code") == 410:
                message = f"partition {partition}: {obj.get('message', 'too old resource version')}"
                return [watch_error_event(expired(message))]
            return [orjson.dumps(event) + b"\n"]
        slot = self.space.index(partition)
        native = native_rv(obj)
        self.vector[slot] = max(self.vector[slot], native)
        if kind == "BOOKMARK":
            self._template = {"kind": obj.get("kind", ""), "apiVersion": obj.get("apiVersion", "")}
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            if annotations.get(INITIAL_EVENTS_END) == "true" and partition in self.initial:
                self.initial.discard(partition)
                if not self.initial and self.client_initial_events:
                    return [self._bookmark(end=True)]
                return []
            if self.bookmarks and not self.initial and all(self.vector):
                if rvcodec.compare(self.rv, self.last_written) > 0:
                    return [self._bookmark(end=False)]
            return []
        if self.keep is not None and not self.keep(partition, obj):
            return []
        stamp = rvcodec.encode(self.epoch, rvcodec.with_slot(self.vector, slot, native))
        if rvcodec.compare(stamp, self.last_written) > 0:
            self.last_written = stamp
        return [set_all_rvs(line.rstrip(b"\n"), stamp.encode()) + b"\n"]
