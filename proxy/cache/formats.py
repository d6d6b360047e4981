"""How a watch cache stores and writes objects: JSON (every cache) or protobuf (a cache's
protobuf twin, for clients that ask protobuf first, as kubelets and every client-go component
do). Each format turns what a reflector decoded into a `CachedObject` once, and builds the
bytes the cache serves around stored objects: watch events, bookmarks, 410 ERROR events and
lists. kube-apiserver answers a client in the first media type of its Accept header that it
can serve (apiserver pkg/endpoints/handlers/negotiation); the twin lets the cache do the same.

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
from routing.translate import PROTOBUF, cached_json, cached_protobuf_item, stamped_json, stamped_protobuf

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


def exact_bytes(data: bytes) -> bytes:
    """A copy of `data` in an object of exactly its size. orjson returns its output buffer
    over-allocated (tracemalloc: ~8 KiB held for a 2.3 KiB node), which a cache that keeps the
    bytes for hours would pay for every object; copying once costs microseconds."""
    return bytes(memoryview(data))


def _interned(pairs: dict[str, str]) -> dict[str, str]:
    # Label keys and values repeat across objects (os, arch, zone, instance type): interned,
    # each string is held once however many objects carry it.
    return {sys.intern(k): sys.intern(v) for k, v in pairs.items()}


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

    def meta(self, obj: dict[str, Any]) -> tuple[str, str, int]:
        """(namespace, name, native RV) of a decoded object: what the cache keys, orders and
        filters owners by."""
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
            fields=_interned(selectable_fields(spec.group, spec.resource, obj)),
            raw=exact_bytes(cached_json(orjson.dumps(obj), codec, slot)),
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

    def meta(self, item: bytes) -> tuple[str, str, int]:
        found = pb.item_meta(item)
        rv = found.resource_version
        return found.namespace, found.name, int(rv) if rv.isdigit() else 0

    def record(self, spec: CacheConfig, codec: rvcodec.RVCodec, slot: int, item: bytes, native: int,
               *, api_version: str, item_kind: str) -> CachedObject:
        facts = pbi.item_facts(item, spec.group, spec.resource)
        item = pbi.strip_item(item, managed_fields=spec.strip_managed_fields, last_applied=spec.strip_last_applied)
        item = cached_protobuf_item(item, codec, slot, api_version=api_version, kind=item_kind)
        return CachedObject(
            slot=slot,
            namespace=sys.intern(facts.namespace),
            name=facts.name,
            native_rv=native,
            labels=_interned(facts.labels),
            fields=_interned(selectable_fields(spec.group, spec.resource, facts.doc)),
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
