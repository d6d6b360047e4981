"""Merging the answers of several partitions into one union list or one union watch. Pure.

Union list: each partition's JSON body (compact or indented) gets its native resourceVersions
turned into object-form proxy RVs of that partition (`routing.rv`), items (or Table rows) that
the partition does not own are dropped, and the rest are joined under one list whose RV is the
vector of every partition's list RV.

Union watch: `WatchMerge` consumes one upstream event at a time, tagged with the partition that
sent it, keeps the RV vector, and returns what to write downstream:
- an event's own RV becomes the vector after that event (vector form); other RV fields in it
  (an Event's involvedObject, ...) become object-form RVs of the partition that sent it;
- while a partition still sends its initial events (a streaming list, KEP-3157), its ADDED
  events carry the object's own RV in object form: they are not in RV order (kube-apiserver's
  initial events are not either, and client-go does not resume from them);
- upstream bookmarks advance the vector; a merged BOOKMARK is written only when the client asked
  (`allowWatchBookmarks`), every slot is known, and the vector moved (RVs strictly increase);
- `k8s.io/initial-events-end` bookmarks of the partitions are swallowed and ONE merged one is
  written once every partition has finished its initial events (client-go's reflector replaces
  its store on that bookmark, so a partial one would drop objects);
- an upstream ERROR ends the union watch: 410 becomes a complete `Expired` Status so the client
  relists; other errors are passed on as they came.
- an event whose vector no epoch of the shared table can encode yet raises `RVUnencodable` and
  leaves the state as it was before the event, so the caller can wait for the table to catch up
  and offer the same event again; `expire()` ends the watch with 410 when it gives up (the client
  relists once the replicas have published a new epoch). A merged bookmark that cannot be encoded
  is skipped (bookmarks are advisory), except the initial-events-end one, which raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from routing import protobuf as pb
from routing.decide import KeepFn, object_meta
from routing import rv as rvcodec
from routing.rvjson import find_own_rv, find_values, replace_spans, translate_natives
from routing.status import expired, watch_error_event
from routing.translate import object_translator

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


# Where a JSON watch event's own resourceVersion is: the object's metadata, and for a Table
# event (kubectl get -w) the row objects as well.
_EVENT_OWN_RV = (("object", "metadata", "resourceVersion"),)
_TABLE_EVENT_OWN_RV = (("object", "metadata", "resourceVersion"), ("object", "rows", "*", "object", "metadata", "resourceVersion"))


def native_rv(obj: dict[str, Any]) -> int:
    """The native resourceVersion of an upstream object (0 when absent or not numeric)."""
    value = object_meta(obj).get("resourceVersion") or (obj.get("metadata") or {}).get("resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() and len(value) < 20 else 0


@dataclass(frozen=True, slots=True)
class PartitionList:
    """One partition's 2xx answer to a union list."""

    partition: str
    slot: int
    body: bytes


def merge_lists(parts: Sequence[PartitionList], *, codec: rvcodec.RVCodec, keep: KeepFn | None) -> bytes:
    """Merge partition lists (or Tables) into one compact JSON list. Raises ValueError if a body
    is not a JSON list; RVUnencodable if no epoch fits the list RV vector."""
    vector = [0] * len(codec.space)
    merged: dict[str, Any] | None = None
    rows_key = "items"
    out_items: list[Any] = []
    for part in parts:
        try:
            doc = orjson.loads(translate_natives(part.body, object_translator(codec, part.slot)))
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{part.partition}: list answer is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ValueError(f"{part.partition}: list answer is not an object")
        list_rv = (doc.get("metadata") or {}).get("resourceVersion", "")
        if list_rv and list_rv != "0":
            vector[part.slot] = codec.decode(list_rv)[part.slot]
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
    if codec.is_complete(vector):
        meta["resourceVersion"] = codec.encode(vector)
    merged["metadata"] = meta
    merged[rows_key] = out_items
    return orjson.dumps(merged)


def merge_protobuf_lists(parts: Sequence[PartitionList], *, codec: rvcodec.RVCodec, keep: KeepFn | None) -> bytes:
    """`merge_lists` for Kubernetes protobuf lists (`routing.protobuf`): item bytes are copied,
    only their resourceVersion fields change. Raises ValueError (ProtobufError) for a body that
    is not a protobuf list; RVUnencodable if no epoch fits the list RV vector."""
    vector = [0] * len(codec.space)
    envelope: pb.Envelope | None = None
    items: list[bytes] = []
    for part in parts:
        translate = object_translator(codec, part.slot)

        def to_object(_: pb.RVField, value: str, translate: Callable[[int], bytes | None] = translate) -> str | None:
            number = rvcodec.parse_number(value)
            if number is None or not 0 < number < rvcodec.NATIVE_LIMIT:
                return None
            new = translate(number)
            return new.decode() if new is not None else None

        env, list_meta, raw_items = pb.list_items(part.body)
        list_rv = pb.list_meta_rv(list_meta)
        if list_rv.isdigit() and list_rv != "0":
            vector[part.slot] = int(list_rv)
        if envelope is None:
            envelope = env
        for item in raw_items:
            meta = pb.item_meta(item)
            if keep is not None and not keep(part.partition, {"metadata": {"namespace": meta.namespace, "name": meta.name}}):
                continue
            items.append(pb.rewrite_item_rvs(item, to_object))
    if envelope is None:
        raise ValueError("no partition answered")
    list_rv = codec.encode(vector) if codec.is_complete(vector) else ""
    return pb.build_list(envelope, list_rv, items)


@dataclass(slots=True)
class WatchMerge:
    """The state of one union watch (see module docstring). Not thread-safe; one per stream.

    codec: the RV space's codec (partitions in slot order, the shared epoch table); start: the
    starting vector (zeros when the client started from "" or "0"); initial: partitions still
    sending initial events; client_initial_events: the client asked sendInitialEvents=true
    (write the merged end bookmark, when it also asked for bookmarks, as the apiserver cacher
    does); bookmarks: the client asked allowWatchBookmarks=true.
    """

    codec: rvcodec.RVCodec
    start: tuple[int, ...]
    initial: set[str]
    client_initial_events: bool
    bookmarks: bool
    keep: KeepFn | None = None
    # partitions the client has seen nothing of while the others flow (one that joined the
    # partition set, or whose field in the client's RV is 0): their initial events are in
    # `initial` too, but carry the merged position with their own field still 0 ("nothing seen
    # of it"), so a client resuming from one gets that partition's objects again rather than
    # missing some; their initial-events-end bookmark is not the client's
    joining: set[str] = field(default_factory=set)
    vector: list[int] = field(default_factory=list)
    last_written: str = ""
    finished: bool = False
    _template: tuple[str, str] = ("", "")  # (apiVersion, kind) of bookmarks

    def __post_init__(self) -> None:
        self.vector = list(self.start)

    @property
    def space(self) -> tuple[str, ...]:
        return self.codec.space

    @property
    def rv(self) -> str:
        """The current vector as a proxy RV. Raises RVUnencodable."""
        return self.codec.encode(self.vector)

    def rebase(self, codec: rvcodec.RVCodec) -> tuple[str, ...]:
        """Take the role's codec after a partition-set change (its space extends the current
        one: slots are append-only). Returns the live partitions that joined, which the caller
        starts with initial events (they are `joining` from now on). Raises ValueError."""
        joined = rvcodec.joined_partitions(self.space, codec)
        self.vector += [0] * (len(codec.space) - len(self.space))
        self.codec = codec
        self.joining.update(joined)
        self.initial.update(joined)
        return joined

    # -- shared state transitions -------------------------------------------------------------

    def _bookmark_rv(self, partition: str, native: int, *, end: bool) -> tuple[str, bool] | None:
        """Advance on an upstream bookmark; return (rv, is_end) of the merged bookmark to write,
        or None."""
        slot = self.space.index(partition)
        self.vector[slot] = max(self.vector[slot], native)
        if end and partition in self.joining:
            self.joining.discard(partition)
            self.initial.discard(partition)
            return None  # the client's own initial events ended long ago
        if end and partition in self.initial:
            if self.initial == {partition} and self.client_initial_events and self.bookmarks:  # cacher: only when asked
                rv = self.rv  # raises RVUnencodable before any state changes: the bookmark can be retried
                self.initial.discard(partition)
                self.last_written = rv
                return rv, True
            self.initial.discard(partition)
            return None
        if self.bookmarks and not self.initial and self.codec.is_complete(self.vector):
            try:
                rv = self.rv
            except rvcodec.RVUnencodable:
                return None  # advisory: the next event or bookmark carries the position
            if rvcodec.compare(rv, self.last_written) > 0:
                self.last_written = rv
                return rv, False
        return None

    def _event_rv(self, partition: str, kind: str, native: int) -> str:
        """Advance on an upstream event; return the RV to stamp on it."""
        slot = self.space.index(partition)
        if kind == "ADDED" and partition in self.initial:
            if partition in self.joining:
                # The merged position, this partition's field still 0 (see `joining`).
                stamp = self.codec.encode(self.vector)
                if rvcodec.compare(stamp, self.last_written) > 0:
                    self.last_written = stamp
                return stamp
            # An initial event: the object's own RV (initial events are in no RV order).
            return self.codec.object_rv(slot, native) if native else ""
        stamp = self.codec.encode(rvcodec_with_slot(self.vector, slot, native))  # raises before any change
        self.vector[slot] = max(self.vector[slot], native)
        if rvcodec.compare(stamp, self.last_written) > 0:
            self.last_written = stamp
        return stamp

    # -- JSON ---------------------------------------------------------------------------------

    def expire(self, reason: str, *, protobuf: bool) -> list[bytes]:
        """End the watch with a 410 Expired ERROR event (a JSON line, or a framed protobuf event)."""
        self.finished = True
        message = f"resourceVersion cannot be encoded: {reason}"
        if protobuf:
            return [pb.encode_frame(pb.encode_watch_event("ERROR", pb.status_object(code=410, reason="Expired", message=message)))]
        return [watch_error_event(expired(message))]

    def on_line(self, partition: str, line: bytes) -> list[bytes]:
        """Consume one upstream JSON event line; return the lines to write downstream. Raises
        RVUnencodable (state unchanged: offer the line again once the table caught up)."""
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
        native = native_rv(obj)
        if kind == "BOOKMARK":
            self._template = (obj.get("apiVersion", ""), obj.get("kind", ""))
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            out = self._bookmark_rv(partition, native, end=annotations.get(INITIAL_EVENTS_END) == "true")
            return [self._json_bookmark(*out)] if out is not None else []
        if self.keep is not None and not self.keep(partition, obj):
            self.vector[self.space.index(partition)] = max(self.vector[self.space.index(partition)], native)
            return []
        stamp = self._event_rv(partition, kind, native)
        slot = self.space.index(partition)
        translate = object_translator(self.codec, slot)
        line = line.rstrip(b"\n")
        if not stamp:
            return [translate_natives(line, translate) + b"\n"]
        if obj.get("kind") == "Table":
            body = translate_natives(line, translate)
            return [replace_spans(body, find_values(body, _TABLE_EVENT_OWN_RV), stamp.encode()) + b"\n"]
        # The own RV is replaced by the stamp; every other RV field becomes an object-form RV.
        own = find_own_rv(line, _EVENT_OWN_RV[0], str(native)) if native else None
        if own is None:
            return [translate_natives(line, translate) + b"\n"]
        start, end = own
        return [translate_natives(line[:start], translate) + stamp.encode() + translate_natives(line[end:], translate) + b"\n"]

    def _json_bookmark(self, rv: str, end: bool) -> bytes:
        api_version, kind = self._template
        meta: dict[str, Any] = {"resourceVersion": rv}
        if end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        return orjson.dumps({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": meta}}) + b"\n"

    # -- protobuf -----------------------------------------------------------------------------

    def on_frame(self, partition: str, frame: bytes) -> list[bytes]:
        """Consume one upstream protobuf watch frame (payload without its length); return the
        framed bytes to write downstream. Raises ValueError (ProtobufError) for a bad frame,
        RVUnencodable as `on_line` does."""
        if self.finished:
            return []
        event = pb.decode_watch_event(frame)
        kind, obj = event.type, event.object
        if kind == "ERROR":
            self.finished = True
            status = pb.status_fields(obj)
            if status.code == 410:
                message = f"partition {partition}: {status.message or 'too old resource version'}"
                return [pb.encode_frame(pb.encode_watch_event("ERROR", pb.status_object(code=410, reason="Expired", message=message)))]
            return [pb.encode_frame(frame)]
        rv_text = pb.object_rv(obj)
        native = int(rv_text) if rv_text.isdigit() and len(rv_text) < 20 else 0
        if kind == "BOOKMARK":
            env = pb.decode_envelope(obj)
            self._template = (env.api_version, env.kind)
            end = pb.object_annotations(obj).get(INITIAL_EVENTS_END) == "true"
            out = self._bookmark_rv(partition, native, end=end)
            if out is None:
                return []
            rv, is_end = out
            bookmark = pb.bookmark_object(
                api_version=env.api_version,
                kind=env.kind,
                resource_version=rv,
                annotations={INITIAL_EVENTS_END: "true"} if is_end else {},
            )
            return [pb.encode_frame(pb.encode_watch_event("BOOKMARK", bookmark))]
        if self.keep is not None:
            meta = pb.object_item_meta(obj)
            if not self.keep(partition, {"metadata": {"namespace": meta.namespace, "name": meta.name}}):
                self.vector[self.space.index(partition)] = max(self.vector[self.space.index(partition)], native)
                return []
        stamp = self._event_rv(partition, kind, native)
        translate = object_translator(self.codec, self.space.index(partition))

        def fn(where: pb.RVField, value: str) -> str | None:
            if where is pb.RVField.OWN and stamp:
                return stamp
            number = rvcodec.parse_number(value)
            if number is None or not 0 < number < rvcodec.NATIVE_LIMIT:
                return None
            new = translate(number)
            return new.decode() if new is not None else None

        return [pb.encode_frame(pb.encode_watch_event(kind, pb.rewrite_rvs(obj, fn, ordered=True)))]


def deleted_events(body: bytes, native: int, *, protobuf: bool) -> tuple[list[bytes], str]:
    """A partition's LIST answer (one page) as the DELETED watch events of its items, each
    item's own resourceVersion set to `native`: JSON event lines, or protobuf frame payloads
    (without their length), as `WatchMerge.on_line` and `on_frame` take a partition's events;
    with the page's continue token ("" on the last page). A union watch tells its client that a
    retired partition's objects are gone this way, as `WatchCache.retire` does for cache
    watchers. Raises ValueError (ProtobufError) for a body that is no list of objects (a Table
    among them: its rows are not objects)."""
    if protobuf:
        env, meta, items = pb.list_items(body)
        kind = env.kind.removesuffix("List")
        own = str(native)

        def fn(where: pb.RVField, value: str) -> str | None:
            return own if where is pb.RVField.ITEM else None

        return [pb.encode_watch_event("DELETED", pb.encode_envelope(pb.Envelope(
            api_version=env.api_version, kind=kind, raw=pb.rewrite_item_rvs(item, fn, api_version=env.api_version, kind=kind))))
            for item in items], pb.list_meta_continue(meta)
    doc = orjson.loads(body)
    kind = doc.get("kind", "") if isinstance(doc, dict) else ""
    if not kind.endswith("List") or kind == "List" or not isinstance(doc.get("items"), list):
        raise ValueError(f"{kind or 'the answer'} is not a list of objects")
    out = []
    for item in doc["items"]:
        item["kind"], item["apiVersion"] = kind.removesuffix("List"), doc.get("apiVersion", "")
        item.setdefault("metadata", {})["resourceVersion"] = str(native)
        out.append(orjson.dumps({"type": "DELETED", "object": item}) + b"\n")
    return out, str((doc.get("metadata") or {}).get("continue") or "")


def rvcodec_with_slot(vector: Sequence[int], slot: int, native: int) -> list[int]:
    """The vector with one slot replaced."""
    out = list(vector)
    out[slot] = native
    return out
