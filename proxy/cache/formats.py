"""How a watch cache stores and writes objects, and how a reflector reads them: JSON (every
cache) or protobuf (a cache's protobuf twin, for clients that ask protobuf first, as kubelets and
every client-go component do). kube-apiserver answers a client in the first media type of its
Accept header that it can serve (apiserver pkg/endpoints/handlers/negotiation); the twin lets the
cache do the same.

Each format owns both directions of its wire:

- reading a partition (`proxy.cache.reflector`, which knows no wire format, as client-go's
  Reflector does not): the Accept header of a LIST and of a WATCH (`content_type`,
  `watch_content_type`), a LIST page's bytes decoded into a `ListPage` (`decode_list`), one
  watch event's bytes (a JSON line, or a protobuf frame's payload) into an `UpstreamEvent`
  (`decode_event`);
- keeping and serving (`proxy.cache.store`, `proxy.cache.serve`): what a reflector decoded
  turned into a `CachedObject` once (`meta`, `record`), and the bytes the cache serves around
  stored objects: watch events, bookmarks, 410 ERROR events and lists.

JSON objects arrive decoded (dicts); protobuf objects arrive as their message bytes (a list
item, or a watch event's envelope `raw`) and are kept enveloped (`k8s\\0` + Unknown), as a GET
answers them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from config.models import CacheConfig
from routing import protobuf as pb
from routing import protobuf_items as pbi
from routing import rv as rvcodec
from routing.selectors import selectable_fields
from routing.status import expired, watch_error_event
from routing.translate import PROTOBUF, cached_json_object, cached_protobuf_item, stamped_json, stamped_protobuf

LAST_APPLIED = pbi.LAST_APPLIED


@dataclass(slots=True)
class CachedObject:
    slot: int
    namespace: str
    name: str
    native_rv: int
    labels: dict[str, str]
    fields: dict[str, str]
    raw: bytes  # the object as served (compact JSON, or enveloped protobuf), RVs in object form (routing.rv)


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a partition's LIST, decoded: the list's kind (`NodeList`) and apiVersion,
    its native resourceVersion, the continue token ("" on the last page) and the items as the
    format's `record` takes them (dicts, or protobuf messages)."""

    kind: str
    api_version: str
    resource_version: str
    continue_token: str
    items: Sequence[Any]


@dataclass(frozen=True, slots=True)
class UpstreamEvent:
    """One watch event of a partition, decoded (client-go's watch.Event). `type` ADDED, MODIFIED
    or DELETED: `object` as the format's `record` takes it; BOOKMARK: `resource_version`, the
    native RV the partition reached (digits, else not a position); ERROR: the Status's `code`
    (410: the RV is gone, relist) and `message`."""

    type: str
    object: Any = None
    resource_version: str = ""
    code: int = 0
    message: str = ""


def exact_bytes(data: bytes) -> bytes:
    """A copy of `data` in an object of exactly its size. orjson returns its output buffer
    over-allocated (tracemalloc: ~8 KiB held for a 2.3 KiB node), which a cache that keeps the
    bytes for hours would pay for every object; copying once costs microseconds."""
    return bytes(memoryview(data))


def _interned(pairs: dict[str, str]) -> dict[str, str]:
    # Label keys and values repeat across objects (os, arch, zone, instance type): interned,
    # each string is held once however many objects carry it.
    return {sys.intern(k): sys.intern(v) for k, v in pairs.items()}


def _interned_values(fields: dict[str, str]) -> dict[str, str]:
    # Selectable fields' keys are routing.selectors' own constants, one object already; their
    # values repeat across objects (a node's name in each of its pods, a phase).
    return {k: sys.intern(v) for k, v in fields.items()}


def event_line(kind: str, raw: bytes, stamp: str = "") -> bytes:
    """A JSON WatchEvent line around already-encoded object bytes (a copy, no re-encoding), with
    the object's own resourceVersion set to `stamp` when given."""
    if stamp:
        raw = stamped_json(raw, stamp)
    return b'{"type":"' + kind.encode() + b'","object":' + raw + b"}\n"


class JsonFormat:
    """Compact JSON objects, newline-delimited JSON watch events."""

    name = "json"
    content_type = "application/json"
    watch_content_type = "application/json"

    def decode_list(self, body: bytes) -> ListPage:
        """A LIST page's JSON body. Raises ValueError (not JSON), KeyError (no
        metadata.resourceVersion)."""
        doc = orjson.loads(body)
        meta = doc.get("metadata") or {}
        items = doc.get("items") or []
        return ListPage(doc.get("kind", ""), doc.get("apiVersion", ""), meta["resourceVersion"], meta.get("continue", ""), items)

    def decode_event(self, line: bytes) -> UpstreamEvent:
        """One WatchEvent line. Raises ValueError (not JSON)."""
        event: Any = orjson.loads(line)
        kind: Any = event.get("type")
        obj: Any = event.get("object") or {}
        if kind == "ERROR":
            return UpstreamEvent(kind, code=obj.get("code"), message=f"{obj.get('message')}")
        if kind == "BOOKMARK":
            return UpstreamEvent(kind, resource_version=(obj.get("metadata") or {}).get("resourceVersion", ""))
        return UpstreamEvent(kind, object=obj)

    def meta(self, spec: CacheConfig, obj: dict[str, Any]) -> tuple[str, str, int]:
        """(namespace, name, native RV) of a decoded object of `spec`'s resource: what the cache
        keys, orders and filters owners by."""
        meta = obj.get("metadata") or {}
        return meta.get("namespace", ""), meta.get("name", ""), int(meta.get("resourceVersion") or 0)

    def record(self, spec: CacheConfig, codec: rvcodec.RVCodec, slot: int, obj: dict[str, Any], native: int,
               *, api_version: str, item_kind: str) -> CachedObject:
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        if spec.strip_managed_fields:
            meta.pop("managedFields", None)
        if spec.strip_last_applied:
            annotations = meta.get("annotations")
            if isinstance(annotations, dict) and LAST_APPLIED in annotations:
                del annotations[LAST_APPLIED]
                if not annotations:
                    del meta["annotations"]
        if "kind" not in obj and item_kind:
            obj["kind"] = item_kind
        if "apiVersion" not in obj and api_version:
            obj["apiVersion"] = api_version
        labels = meta.get("labels") or {}
        return CachedObject(
            slot=slot,
            namespace=sys.intern(meta.get("namespace", "")),
            name=meta.get("name", ""),
            native_rv=native,
            labels=_interned(labels) if isinstance(labels, dict) else {},
            fields=_interned_values(selectable_fields(spec.group, spec.resource, obj)),
            raw=exact_bytes(cached_json_object(obj, codec, slot)),
        )

    def event(self, kind: str, raw: bytes, stamp: str = "") -> bytes:
        return event_line(kind, raw, stamp)

    def bookmark(self, api_version: str, item_kind: str, stamp: str, *, initial_events_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": stamp}
        if initial_events_end:
            meta["annotations"] = {pbi.INITIAL_EVENTS_END: "true"}
        return orjson.dumps({"type": "BOOKMARK", "object": {"kind": item_kind, "apiVersion": api_version, "metadata": meta}}) + b"\n"

    def expired(self, message: str) -> bytes:
        return watch_error_event(expired(message))

    def list_pieces(self, api_version: str, kind: str, list_rv: str, objects: Sequence[CachedObject], *, batch: int) -> Iterator[bytes]:
        head = orjson.dumps({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": list_rv}})
        yield head[:-1] + b',"items":['
        for start in range(0, len(objects), batch):
            piece = b",".join(o.raw for o in objects[start : start + batch])
            yield piece if start == 0 else b"," + piece
        yield b"]}"


class ProtobufFormat:
    """Enveloped protobuf objects (`routing.protobuf`), length-prefixed watch frames. Only for
    resources whose selectable fields can be read from protobuf (`protobuf_items.readable`)."""

    name = "protobuf"
    content_type = PROTOBUF
    watch_content_type = f"{PROTOBUF};stream=watch"

    def decode_list(self, body: bytes) -> ListPage:
        """A LIST page's protobuf body (routing.protobuf). Raises ProtobufError."""
        env, list_meta, items = pb.list_items(body)
        return ListPage(env.kind, env.api_version, pb.list_meta_rv(list_meta), pb.list_meta_continue(list_meta), items)

    def decode_event(self, frame: bytes) -> UpstreamEvent:
        """One watch frame's payload (routing.protobuf). Raises ProtobufError for a frame that is
        not one (a partition that answered JSON to a protobuf watch included)."""
        event = pb.decode_watch_event(frame)
        if event.type == "ERROR":
            status = pb.status_fields(event.object)
            return UpstreamEvent(event.type, code=status.code, message=status.message)
        if event.type == "BOOKMARK":
            return UpstreamEvent(event.type, resource_version=pb.object_rv(event.object))
        return UpstreamEvent(event.type, object=pb.decode_envelope(event.object).raw)

    def __init__(self) -> None:
        # the facts `meta` read last, kept for `record` of the same object: a store reads an
        # object's meta, then records it (CacheStore.apply, list_page), and one walk of its
        # message serves both (a pod's facts cost ~23 us of pure Python)
        self._last: tuple[bytes, str, str, pbi.ItemFacts] | None = None

    def _facts(self, spec: CacheConfig, item: bytes) -> pbi.ItemFacts:
        last = self._last
        if last is not None and last[0] is item and last[1] == spec.group and last[2] == spec.resource:
            return last[3]
        facts = pbi.item_facts(item, spec.group, spec.resource)
        self._last = (item, spec.group, spec.resource, facts)
        return facts

    def meta(self, spec: CacheConfig, item: bytes) -> tuple[str, str, int]:
        """As JsonFormat.meta, for a protobuf object's message. Raises ProtobufError."""
        found = self._facts(spec, item)
        rv = found.resource_version
        return found.namespace, found.name, int(rv) if rv.isdigit() else 0

    def record(self, spec: CacheConfig, codec: rvcodec.RVCodec, slot: int, item: bytes, native: int,
               *, api_version: str, item_kind: str) -> CachedObject:
        facts = self._facts(spec, item)
        item = pbi.strip_item(item, managed_fields=spec.strip_managed_fields, last_applied=spec.strip_last_applied)
        item = cached_protobuf_item(item, codec, slot, api_version=api_version, kind=item_kind)
        return CachedObject(
            slot=slot,
            namespace=sys.intern(facts.namespace),
            name=facts.name,
            native_rv=native,
            labels=_interned(facts.labels),
            fields=_interned_values(selectable_fields(spec.group, spec.resource, facts.doc)),
            raw=pb.encode_envelope(pb.Envelope(api_version=api_version, kind=item_kind, raw=item)),
        )

    def event(self, kind: str, raw: bytes, stamp: str = "") -> bytes:
        if stamp:
            raw = stamped_protobuf(raw, stamp)
        return pbi.event_frame(kind, raw)

    def bookmark(self, api_version: str, item_kind: str, stamp: str, *, initial_events_end: bool = False) -> bytes:
        return pbi.bookmark_frame(api_version, item_kind, stamp, initial_events_end=initial_events_end)

    def expired(self, message: str) -> bytes:
        return pbi.error_frame(410, "Expired", message)

    def list_pieces(self, api_version: str, kind: str, list_rv: str, objects: Sequence[CachedObject], *, batch: int) -> Iterator[bytes]:
        return pbi.list_pieces(api_version, kind, list_rv, [o.raw for o in objects], batch=batch)


ObjectFormat = JsonFormat | ProtobufFormat
JSON = JsonFormat()
PROTOBUF_FORMAT = ProtobufFormat()
