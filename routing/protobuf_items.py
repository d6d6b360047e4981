"""What a watch cache needs of one Kubernetes protobuf object, and the bytes it serves. Pure.

Owns: the facts a cache indexes an object by, read from its message without decoding the rest
(`item_facts`: namespace, name, resourceVersion, labels, and the fields a field selector reads,
as the nested dict `routing.selectors.selectable_fields` takes); the object stripped as the
cache keeps it (`strip_item`: managedFields and the last-applied annotation dropped); the
resources whose field selectors can be evaluated on protobuf (`readable`); watch frames, bookmarks,
ERROR events and lists built around stored objects (`event_frame`, `bookmark_frame`,
`error_frame`, `list_pieces`). Does not own the wire primitives, RV rewriting or envelopes
(`routing.protobuf`).

Field numbers (k8s.io/apimachinery v0.36.3 pkg/apis/meta/v1/generated.proto, message
ObjectMeta): name 1, namespace 3, resourceVersion 6, labels 11 and annotations 12 (map entries:
key 1, value 2), managedFields 17. Per resource, the fields a field selector reads beyond
metadata (k8s.io/api v0.36.3 core/v1/generated.proto): Node spec 2 > NodeSpec unschedulable 4;
Pod spec 2 > PodSpec restartPolicy 3, serviceAccountName 8, nodeName 10, hostNetwork 11,
schedulerName 19; Pod status 3 > PodStatus phase 1, podIP 6, nominatedNodeName 11; Secret
type 3. Resources whose field set is metadata only (`selectors.reads_only_metadata`) need none.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from routing import protobuf as pb
from routing.protobuf import _expect_ld, _fields, _head, _ld, _text, _varint
from routing.selectors import reads_only_metadata

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"

_STRING, _BOOL = "string", "bool"
# (group, resource) -> (JSON path, protobuf field numbers, scalar type) of each field a field
# selector reads beyond metadata (module docstring for the sources).
_FIELD_PATHS: Final[dict[tuple[str, str], tuple[tuple[tuple[str, ...], tuple[int, ...], str], ...]]] = {
    ("", "nodes"): ((("spec", "unschedulable"), (2, 4), _BOOL),),
    ("", "pods"): (
        (("spec", "restartPolicy"), (2, 3), _STRING),
        (("spec", "serviceAccountName"), (2, 8), _STRING),
        (("spec", "nodeName"), (2, 10), _STRING),
        (("spec", "hostNetwork"), (2, 11), _BOOL),
        (("spec", "schedulerName"), (2, 19), _STRING),
        (("status", "phase"), (3, 1), _STRING),
        (("status", "podIP"), (3, 6), _STRING),
        (("status", "nominatedNodeName"), (3, 11), _STRING),
    ),
    ("", "secrets"): ((("type",), (3,), _STRING),),
}


def readable(group: str, resource: str) -> bool:
    """Whether a cache of this resource can index its protobuf objects: its field set is
    metadata only, or every field of it is in the table above."""
    return (group, resource) in _FIELD_PATHS or reads_only_metadata(group, resource)


@dataclass(frozen=True, slots=True)
class ItemFacts:
    namespace: str
    name: str
    resource_version: str
    labels: dict[str, str]
    doc: dict[str, Any]  # {"metadata": {name, namespace}, + the selectable fields' paths}


def _map_entry(data: bytes, start: int, end: int) -> tuple[str, str]:
    key = value = ""
    for _s, f, wire, vs, ve in _fields(data, start, end):
        if f == 1:
            _expect_ld(f, wire)
            key = _text(data, vs, ve)
        elif f == 2:
            _expect_ld(f, wire)
            value = _text(data, vs, ve)
    return key, value


_Occurrences = list[tuple[int, int, int]]  # (wire type, value start, value end) of each occurrence of a field
_Path = tuple[tuple[str, ...], tuple[int, ...], str]  # a _FIELD_PATHS entry: JSON path, field numbers, type


@dataclass(frozen=True, slots=True)
class _Plan:
    """How `item_facts` walks a resource's messages, worked out once per resource: `top`, the
    top-level fields to collect (metadata and the first field of every path); `below`, for each
    embedded message a path enters, the fields read in it."""

    paths: tuple[_Path, ...]
    top: tuple[int, ...]
    below: tuple[tuple[int, frozenset[int]], ...]


def _plan(paths: tuple[_Path, ...]) -> _Plan:
    """Raises ValueError for a path of more than 2 fields (none in the table: the walk reads
    top-level fields and fields of messages embedded at the top, nothing deeper)."""
    for json_path, numbers, _type in paths:
        if not 1 <= len(numbers) <= 2:
            raise ValueError(f"field selector path {'.'.join(json_path)}: {len(numbers)} fields, at most 2 are read")
    firsts = dict.fromkeys(numbers[0] for _j, numbers, _t in paths if len(numbers) == 2)
    below = tuple((first, frozenset(n[1] for _j, n, _t in paths if len(n) == 2 and n[0] == first)) for first in firsts)
    return _Plan(paths, tuple(dict.fromkeys((1, *(numbers[0] for _j, numbers, _t in paths)))), below)


_PLANS: Final[dict[tuple[str, str], _Plan]] = {key: _plan(paths) for key, paths in _FIELD_PATHS.items()}
_METADATA_ONLY: Final = _plan(())


def _path_values(item: bytes, top: dict[int, _Occurrences], plan: _Plan) -> list[Any]:
    """The value at each of `plan.paths` (None where absent; the last occurrence wins, as gogo
    decodes), with one walk of each message: `top` holds the occurrences of the top-level
    fields (one walk of `item`), and each embedded message the paths enter is walked once for
    all of them (a pod's eight field selector paths: 3 walks instead of 16)."""
    below: dict[int, dict[int, _Occurrences]] = {}
    for first, seconds in plan.below:
        fields: dict[int, _Occurrences] = {number: [] for number in seconds}
        below[first] = fields
        for wire, vs, ve in top[first]:
            _expect_ld(first, wire)
            for _s, f, fwire, fvs, fve in _fields(item, vs, ve):
                occurrences = fields.get(f)
                if occurrences is not None:
                    occurrences.append((fwire, fvs, fve))
    return [_last_scalar(item, numbers[-1], top[numbers[0]] if len(numbers) == 1 else below[numbers[0]][numbers[1]], type_)
            for _json_path, numbers, type_ in plan.paths]


def _last_scalar(data: bytes, number: int, found: _Occurrences, type_: str) -> Any:
    """The value of the last occurrence of field `number` (None when there is none): a repeated
    scalar's last occurrence wins, as gogo decodes."""
    if not found:
        return None
    wire, vs, ve = found[-1]
    if type_ == _BOOL:
        if wire != 0:
            raise pb.ProtobufError(f"field {number}: wire type {wire}, expected a varint")
        return _varint(data, vs, ve)[0] != 0
    _expect_ld(number, wire)
    return _text(data, vs, ve)


def item_facts(item: bytes, group: str, resource: str) -> ItemFacts:
    """The facts of an object's message (a list item, or an envelope's raw). Absent strings are
    "". Raises ProtobufError for a malformed message."""
    plan = _PLANS.get((group, resource), _METADATA_ONLY)
    top: dict[int, _Occurrences] = {number: [] for number in plan.top}
    for _s, f, wire, vs, ve in _fields(item, 0, len(item)):
        occurrences = top.get(f)
        if occurrences is not None:
            occurrences.append((wire, vs, ve))
    meta = []
    for wire, vs, ve in top[1]:
        _expect_ld(1, wire)
        meta.append((vs, ve))
    strings = {1: "", 3: "", 6: ""}
    labels: dict[str, str] = {}
    for start, end in meta:
        for _s, f, wire, vs, ve in _fields(item, start, end):
            if f in strings:
                _expect_ld(f, wire)
                strings[f] = _text(item, vs, ve)
            elif f == 11:
                _expect_ld(f, wire)
                key, value = _map_entry(item, vs, ve)
                labels[key] = value
    name, namespace = strings[1], strings[3]
    doc: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace}}
    for (json_path, _numbers, _type), value in zip(plan.paths, _path_values(item, top, plan)):
        if value is None:
            continue
        node = doc
        for key in json_path[:-1]:
            node = node.setdefault(key, {})
        node[json_path[-1]] = value
    return ItemFacts(namespace=namespace, name=name, resource_version=strings[6], labels=labels, doc=doc)


def strip_item(item: bytes, *, managed_fields: bool, last_applied: bool) -> bytes:
    """The object's message without metadata.managedFields and/or the last-applied annotation
    (as the JSON cache keeps objects); `item` itself when there is nothing to drop. Raises
    ProtobufError for a malformed message."""
    if not managed_fields and not last_applied:
        return item
    out: list[bytes] = []
    changed = False
    for fs, f, wire, vs, ve in _fields(item, 0, len(item)):
        if f != 1:
            out.append(item[fs:ve])
            continue
        _expect_ld(f, wire)
        kept: list[bytes] = []
        for ms, g, gwire, gs, ge in _fields(item, vs, ve):
            if managed_fields and g == 17:
                changed = True
                continue
            if last_applied and g == 12:
                _expect_ld(g, gwire)
                if _map_entry(item, gs, ge)[0] == LAST_APPLIED:
                    changed = True
                    continue
            kept.append(item[ms:ge])
        out.append(_ld(1, b"".join(kept)))
    return b"".join(out) if changed else item


def event_frame(kind: str, obj: bytes) -> bytes:
    """A whole watch frame (length + WatchEvent) of an enveloped object."""
    return pb.encode_frame(pb.encode_watch_event(kind, obj))


def bookmark_frame(api_version: str, kind: str, stamp: str, *, initial_events_end: bool = False) -> bytes:
    """A BOOKMARK frame whose object holds only `stamp` (and the initial-events-end annotation:
    KEP-3157, as the apiserver cacher marks the end of sendInitialEvents)."""
    annotations = {INITIAL_EVENTS_END: "true"} if initial_events_end else {}
    obj = pb.bookmark_object(api_version=api_version, kind=kind, resource_version=stamp, annotations=annotations)
    return event_frame("BOOKMARK", obj)


def error_frame(code: int, reason: str, message: str) -> bytes:
    """An ERROR frame carrying a Status (a 410 Expired ends a watch that must relist)."""
    return event_frame("ERROR", pb.status_object(code=code, reason=reason, message=message))


def list_pieces(api_version: str, kind: str, list_rv: str, objects: Sequence[bytes], *, batch: int) -> Iterator[bytes]:
    """An enveloped `kind` list (ListMeta{resourceVersion: list_rv}, then each enveloped object's
    message as an item) in pieces of `batch` objects, without ever holding the whole body: the
    lengths are known up front. Byte-identical to `pb.build_list` of the same items."""
    items = [_raw_span(obj) for obj in objects]
    meta = _ld(1, pb._list_meta(list_rv))
    raw_len = len(meta) + sum(len(_head(2, end - start)) + end - start for start, end in items)
    type_meta = _ld(1, api_version.encode()) + _ld(2, kind.encode())
    yield b"".join((pb.MAGIC, _ld(1, type_meta), _head(2, raw_len), meta))
    for first in range(0, len(objects), batch):
        piece: list[bytes | memoryview] = []
        for obj, (start, end) in zip(objects[first : first + batch], items[first : first + batch]):
            piece.append(_head(2, end - start))
            piece.append(memoryview(obj)[start:end])
        yield b"".join(piece)
    yield b"\x1a\x00\x22\x00"  # Unknown contentEncoding and contentType, empty


def _raw_span(obj: bytes) -> tuple[int, int]:
    _type_meta, raw = pb._unknown_spans(obj)
    if raw is None:
        raise pb.ProtobufError("object without raw")
    return raw
