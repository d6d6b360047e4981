"""Kubernetes protobuf bodies at the wire level: resourceVersions, union lists, watch frames. Pure.

Owns: finding and replacing resourceVersion (RV) strings inside Kubernetes protobuf bodies
(answers from kube-apiserver and request bodies from clients) without a protobuf library and
without decoding whole objects (`rewrite_rvs`, `rewrite_item_rvs`); splitting and building lists
for union lists (`list_items`, `item_meta`, `list_meta_rv`, `build_list`); framing, decoding and
encoding watch events for union watches (`FrameReader`, `encode_frame`, `decode_watch_event`,
`encode_watch_event`, `object_rv`, `object_annotations`, `object_item_meta`, `bookmark_object`,
`status_object`, `status_fields`); `metadata.name` of a create body (`object_name`). Does not
own what RVs become (`routing.rv`, `routing.translate`), JSON and YAML bodies
(`routing.rvjson`), or any I/O.

Wire format (proto2, as gogo-protobuf writes it for Kubernetes):

- An object or list body: the 4 magic bytes `k8s\\0`, then a `runtime.Unknown` message
  (k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go, `protoEncodingPrefix` and
  `doEncode`). Unknown (apimachinery pkg/runtime/generated.proto, message Unknown): 1 typeMeta
  (TypeMeta: 1 apiVersion, 2 kind), 2 raw (the object's own message), 3 contentEncoding,
  4 contentType. kube-apiserver writes all four fields, in that order, the last two empty
  (runtime/types_proto.go `NestedMarshalTo`).
- Objects: in every built-in top-level type field 1 is `metadata` (meta/v1 ObjectMeta); lists
  have `metadata` (meta/v1 ListMeta) at 1 and `items` at 2. Checked by script over every
  generated.proto of k8s.io/api, apimachinery, apiextensions-apiserver, kube-aggregator and
  metrics v0.36.3: 181 messages carry ObjectMeta at 1 and 155 `...List` messages follow the list
  rule; the exceptions are meta/v1 APIGroupList and APIResourceList (discovery, no RVs), meta/v1
  Status (ListMeta at 1) and meta.k8s.io/v1beta1 PartialObjectMetadataList, which has `items`
  at 1 and `metadata` at 2 (apimachinery pkg/apis/meta/v1beta1/generated.proto); all are handled.
- RV fields: ObjectMeta.resourceVersion = 6, ListMeta.resourceVersion = 2, annotations = 12
  (a map: entries with key 1, value 2) (apimachinery pkg/apis/meta/v1/generated.proto, messages
  ObjectMeta, ListMeta); ObjectReference.resourceVersion = 6 (api core/v1/generated.proto);
  core/v1 Event involvedObject = 2, related = 13; core/v1 Binding target = 2 (api
  core/v1/generated.proto); events.k8s.io/v1 (and v1beta1) Event regarding = 8, related = 9 (api
  events/v1/generated.proto); DeleteOptions preconditions = 2, Preconditions.resourceVersion = 2
  (meta/v1 generated.proto); policy/v1 (and v1beta1) Eviction deleteOptions = 2 (api
  policy/v1/generated.proto); Status: metadata 1, status 2, message 3, reason 4, details 5,
  code 6 (meta/v1 generated.proto, message Status).
- Watch streams (`application/vnd.kubernetes.protobuf;stream=watch`): frames of a 4-byte
  big-endian length then the payload (apimachinery pkg/util/framer/framer.go,
  `lengthDelimitedFrameWriter`). The payload is a BARE meta/v1 WatchEvent message (1 type,
  2 object: runtime.RawExtension, whose field 1 `raw` holds the object), without magic or
  Unknown: the stream serializer is `protobuf.NewRawSerializer` (apimachinery
  pkg/runtime/serializer/codec_factory.go). The embedded object in `object.raw` is a FULL
  envelope, `k8s\\0` + Unknown: apiserver pkg/endpoints/handlers/watch.go builds the embedded
  encoder from `serializer.Serializer` (the enveloping protobuf.Serializer) and the outer one
  from `serializer.StreamSerializer.Serializer`; response.go `watchEncoder.doEncode` puts the
  embedded bytes into `WatchEvent.Object.Raw`. Confirmed on captured kube-apiserver v1.36.3
  streams (tests/routing/testdata/protobuf).
- meta/v1 Table is never served in protobuf (`+protobuf=false` in meta/v1/types.go, and
  apiserver pkg/endpoints/handlers/rest.go `AllowsMediaTypeTransform` allows Table only as JSON
  or YAML: kube-apiserver v1.36.3 answers 406), so Table bodies are left alone.

Decoding follows gogo's Unmarshal: a repeated occurrence of a singular string or bytes field
wins over earlier ones, occurrences of an embedded message merge. Rewriting visits every
occurrence, so a duplicated field cannot smuggle an untranslated RV past the proxy. Only the
fields on the path to an RV are descended into, so the depth walked is bounded by the layouts
above (at most 4 messages) whatever the input's nesting; varints are limited to 10 bytes, lengths
are checked against the enclosing message, wire types 3, 4, 6 and 7 (groups, invalid) are
rejected: malformed input raises ProtobufError, never IndexError, and never loops.

Speed (CPython 3.11.7 on the 2-core development machine, timeit, best of 3 at low load): the
cost is the number of fields walked (about 0.2 us each: the Unknown's 4, the object's top level,
every field of each ObjectMeta on the way), not the body size. rewrite_rvs of the captured
314-byte Lease: 5 us when fn changes nothing, 7 us when it rewrites the RV; an 891-byte Pod:
5.5 / 8 us; a 3-Pod PodList (LIST + 3 ITEM): 15 / 23 us; a ~1 KB pod watch frame decoded,
rewritten and encoded again: 13 us; decode_watch_event alone: 2 us.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Union

MAGIC = b"k8s\x00"
MAX_FRAME_BYTES = 16 * 1024 * 1024  # bytes; kube-apiserver's own request body limit is 3 MiB,
#                                     objects in etcd are below 1.5 MiB: 16 MiB leaves room for
#                                     any watch event while bounding a reader's buffer.
_MAX_FIELD = (1 << 29) - 1  # the largest field number protobuf allows
_MAX_VARINT_SHIFT = 63  # a varint has at most 10 bytes (the shift of the 10th is 63), as gogo


class ProtobufError(ValueError):
    """A body that is not a well-formed Kubernetes protobuf of the expected shape."""


class RVField(enum.Enum):
    """Where a resourceVersion sits in a Kubernetes object."""

    OWN = "own"  # metadata.resourceVersion of the top-level object (or of a watch event's object)
    LIST = "list"  # ListMeta.resourceVersion of a list
    ITEM = "item"  # metadata.resourceVersion of an item of a list
    # ObjectReference.resourceVersion inside an object: core/v1 Event involvedObject and related,
    # events.k8s.io Event regarding and related, core/v1 Binding target
    REFERENCE = "reference"
    # DeleteOptions.preconditions.resourceVersion (also inside policy Eviction.deleteOptions)
    PRECONDITION = "precondition"


RVFn = Callable[[RVField, str], "str | None"]
"""Called with where an RV sits and its value; returns the new value, or None to keep it."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """The runtime.Unknown around an object: its type and the object's own message bytes."""

    api_version: str
    kind: str
    raw: bytes
    content_encoding: str = ""
    content_type: str = ""


@dataclass(frozen=True, slots=True)
class ItemMeta:
    """The metadata of a list item that a union list needs to merge and order items."""

    namespace: str
    name: str
    resource_version: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A decoded watch frame: the event type and the embedded object exactly as on the wire
    (an enveloped object, `k8s\\0` + Unknown)."""

    type: str
    object: bytes


@dataclass(frozen=True, slots=True)
class StatusFields:
    """The fields of a meta/v1 Status that a watch ERROR event or an error answer is judged by."""

    status: str  # "Success" or "Failure"
    message: str
    reason: str  # a StatusReason: "Expired", "NotFound", ...
    code: int  # the HTTP status


# -- wire primitives ---------------------------------------------------------------------------


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after) of the varint at `pos`; at most 10 bytes, before `end`.
    The one- and two-byte varints (every length below 16 KiB) are read without the loop."""
    if pos + 1 < end:
        first = data[pos]
        if first < 0x80:
            return first, pos + 1
        second = data[pos + 1]
        if second < 0x80:
            return (first & 0x7F) | second << 7, pos + 2
    value = shift = 0
    while pos < end:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > _MAX_VARINT_SHIFT:
            raise ProtobufError("varint longer than 10 bytes")
    raise ProtobufError("truncated varint")


def _field(data: bytes, pos: int, end: int) -> tuple[int, int, int, int]:
    """(field number, wire type, value start, value end) of the field whose key is at `pos`.

    For wire type 2 the value is the payload after the length; for 0, 1 and 5 the raw bytes."""
    key = data[pos]
    if key < 0x80:
        pos += 1
    else:
        key, pos = _varint(data, pos, end)
    number, wire = key >> 3, key & 7
    if number == 0 or number > _MAX_FIELD:
        raise ProtobufError(f"invalid field number {number}")
    if wire == 2:
        if pos >= end:
            raise ProtobufError("truncated length")
        length = data[pos]
        if length < 0x80:
            pos += 1
        else:
            length, pos = _varint(data, pos, end)
        if length > end - pos:
            raise ProtobufError(f"field {number}: length {length} past the end of its message")
        return number, 2, pos, pos + length
    if wire == 0:
        return number, 0, pos, _varint(data, pos, end)[1]
    if wire == 1 or wire == 5:
        after = pos + (8 if wire == 1 else 4)
        if after > end:
            raise ProtobufError(f"field {number}: truncated fixed-size value")
        return number, wire, pos, after
    raise ProtobufError(f"field {number}: unsupported wire type {wire}")


# The field number of each one-byte key of a length-delimited field (wire type 2), else 0: the
# fast path of the field walks, which covers nearly every field on the way to an RV.
_LD_KEY = [key >> 3 if key & 7 == 2 and 8 <= key < 0x80 else 0 for key in range(256)]


def _fields(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int, int]]:
    """Every field of the message data[start:end]: (field start, then what `_field` gives)."""
    out = []
    pos = start
    while pos < end:
        number = _LD_KEY[data[pos]]
        if number and pos + 1 < end:  # fast path, the same in `_rewrite`
            length = data[pos + 1]
            if length < 0x80:
                vs = pos + 2
            else:
                length, vs = _varint(data, pos + 1, end)
            ve = vs + length
            if ve > end:
                raise ProtobufError(f"field {number}: length {length} past the end of its message")
            out.append((pos, number, 2, vs, ve))
        else:
            number, wire, vs, ve = _field(data, pos, end)
            out.append((pos, number, wire, vs, ve))
        pos = ve
    return out


_ONE_BYTE = [bytes([i]) for i in range(0x80)]


def _encode_varint(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _head(number: int, length: int) -> bytes:
    """Key and length of a length-delimited field."""
    if number < 16 and length < 0x80:
        return bytes((number << 3 | 2, length))
    return _encode_varint(number << 3 | 2) + _encode_varint(length)


def _ld(number: int, payload: bytes) -> bytes:
    """A whole length-delimited field."""
    return _head(number, len(payload)) + payload


def _text(data: bytes, start: int, end: int) -> str:
    try:
        return data[start:end].decode()
    except UnicodeDecodeError as e:
        raise ProtobufError(f"string is not UTF-8: {e}") from None


def _bytes_of(body: bytes) -> bytes:
    return body if type(body) is bytes else bytes(body)


def _expect_ld(number: int, wire: int) -> None:
    if wire != 2:
        raise ProtobufError(f"field {number}: wire type {wire}, expected a length-delimited field")


def _merged(data: bytes, start: int, end: int, number: int) -> list[tuple[int, int]]:
    """Spans of every occurrence of the embedded-message field `number` (they merge)."""
    spans = []
    for _s, f, wire, vs, ve in _fields(data, start, end):
        if f == number:
            _expect_ld(f, wire)
            spans.append((vs, ve))
    return spans


def _last_string(data: bytes, spans: Sequence[tuple[int, int]], number: int) -> str | None:
    """The string field `number` of a message made of `spans` (last occurrence wins), or None."""
    found: tuple[int, int] | None = None
    for start, end in spans:
        for _s, f, wire, vs, ve in _fields(data, start, end):
            if f == number:
                _expect_ld(f, wire)
                found = (vs, ve)
    return None if found is None else _text(data, *found)


# -- envelope ----------------------------------------------------------------------------------


def _unknown_spans(data: bytes) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
    """(spans of every typeMeta, span of the last raw) of the Unknown after the magic."""
    if not data.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body: no k8s\\0 magic")
    type_meta: list[tuple[int, int]] = []
    raw: tuple[int, int] | None = None
    for _s, f, wire, vs, ve in _fields(data, len(MAGIC), len(data)):
        if f == 1:
            _expect_ld(f, wire)
            type_meta.append((vs, ve))
        elif f == 2:
            _expect_ld(f, wire)
            raw = (vs, ve)
    return type_meta, raw


def decode_envelope(body: bytes) -> Envelope:
    """The runtime.Unknown of an enveloped body (`k8s\\0` + Unknown).

    Missing fields decode as empty. Raises ProtobufError for a body without the magic, a
    malformed Unknown or TypeMeta, or strings that are not UTF-8."""
    data = _bytes_of(body)
    if not data.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body: no k8s\\0 magic")
    type_meta: list[tuple[int, int]] = []
    raw = b""
    strings = {3: "", 4: ""}
    for _s, f, wire, vs, ve in _fields(data, len(MAGIC), len(data)):
        if f == 1:
            _expect_ld(f, wire)
            type_meta.append((vs, ve))
        elif f == 2:
            _expect_ld(f, wire)
            raw = data[vs:ve]
        elif f in strings:
            _expect_ld(f, wire)
            strings[f] = _text(data, vs, ve)
    return Envelope(
        api_version=_last_string(data, type_meta, 1) or "",
        kind=_last_string(data, type_meta, 2) or "",
        raw=raw,
        content_encoding=strings[3],
        content_type=strings[4],
    )


def encode_envelope(env: Envelope) -> bytes:
    """`k8s\\0` + Unknown{typeMeta, raw, contentEncoding, contentType}, every field written and
    in that order as kube-apiserver does, so decoding then encoding its output is byte-identical."""
    type_meta = _ld(1, env.api_version.encode()) + _ld(2, env.kind.encode())
    return b"".join((
        MAGIC,
        _ld(1, type_meta),
        _head(2, len(env.raw)),
        env.raw,
        _ld(3, env.content_encoding.encode()),
        _ld(4, env.content_type.encode()),
    ))


# -- where RVs sit -----------------------------------------------------------------------------

# A layout: field number -> either the RVField of a string field, or the layout of an embedded
# message. Only the fields named are descended into.
_Layout = Mapping[int, Union["_Layout", RVField]]

_REFERENCE: _Layout = {6: RVField.REFERENCE}  # core/v1 ObjectReference.resourceVersion
_DELETE_OPTIONS: _Layout = {2: {2: RVField.PRECONDITION}}  # preconditions.resourceVersion
# (group, kind) -> the fields of ObjectReferences with RVs, besides metadata
_REFERENCES: Mapping[tuple[str, str], _Layout] = {
    ("", "Event"): {2: _REFERENCE, 13: _REFERENCE},  # involvedObject, related
    ("events.k8s.io", "Event"): {8: _REFERENCE, 9: _REFERENCE},  # regarding, related
    ("", "Binding"): {2: _REFERENCE},  # target
}
# meta/v1 kinds without RVs or without metadata at 1: discovery, Status, options, Table
_NO_RVS = frozenset({
    "Status", "APIVersions", "APIGroup", "APIGroupList", "APIResourceList", "WatchEvent",
    "Table", "TableOptions", "CreateOptions", "GetOptions", "ListOptions", "PatchOptions",
    "UpdateOptions",
})


def _object_layout(group: str, kind: str, rv_field: RVField) -> _Layout:
    return {1: {6: rv_field}, **_REFERENCES.get((group, kind), {})}


@functools.lru_cache(maxsize=512)
def _layout(api_version: str, kind: str) -> _Layout | None:
    """Where the RVs sit in the `raw` of an object of this type; None when it has none."""
    group = api_version.rpartition("/")[0]
    if kind in _NO_RVS:
        return None
    if kind == "DeleteOptions":  # registered in every group version
        return _DELETE_OPTIONS
    if kind == "Eviction" and group == "policy":
        return {1: {6: RVField.OWN}, 2: _DELETE_OPTIONS}
    if kind == "List":  # meta/v1 List: items are RawExtensions, not objects
        return {1: {2: RVField.LIST}}
    if kind.endswith("List"):
        meta, items = _list_fields(api_version, kind)
        item_layout = _object_layout(group, kind.removesuffix("List"), RVField.ITEM)
        return {meta: {2: RVField.LIST}, items: item_layout}
    return _object_layout(group, kind, RVField.OWN)


def _list_fields(api_version: str, kind: str) -> tuple[int, int]:
    """(ListMeta field, items field) of a list type."""
    if kind == "PartialObjectMetadataList" and api_version == "meta.k8s.io/v1beta1":
        return 2, 1
    return 1, 2


_Pieces = list[bytes | memoryview]


def _rewrite(data: bytes, view: memoryview, start: int, end: int, layout: _Layout, fn: RVFn, ordered: bool) -> tuple[_Pieces, int] | None:
    """The new content of the message data[start:end] as (pieces, total bytes), or None when
    `fn` changes nothing in it. Unchanged spans are memoryview slices of `data`. `ordered`: the
    fields are in field-number order, so the walk ends after the last field of `layout`."""
    pieces: _Pieces | None = None
    size = 0
    copied = pos = start
    get = layout.get
    last = max(layout) if ordered else _MAX_FIELD
    while pos < end:
        number = _LD_KEY[data[pos]]
        if number and pos + 1 < end:  # fast path, as in `_fields`
            length = data[pos + 1]
            if length < 0x80:
                vs = pos + 2
            else:
                length, vs = _varint(data, pos + 1, end)
            ve = vs + length
            if ve > end:
                raise ProtobufError(f"field {number}: length {length} past the end of its message")
            field_start, pos = pos, ve
            sub = get(number)
        else:
            number, wire, vs, ve = _field(data, pos, end)
            field_start, pos = pos, ve
            if (sub := get(number)) is not None:
                _expect_ld(number, wire)
        if sub is None:
            if number > last:
                break  # ordered: no field of the layout comes after this one
            continue
        if isinstance(sub, RVField):
            if vs == ve:  # empty: how Go writes an unset string
                continue
            old = _text(data, vs, ve)
            new = fn(sub, old)
            if new is None or new == old:
                continue
            payload = new.encode()
            inner: _Pieces = [payload]
            inner_size = len(payload)
        else:
            changed = _rewrite(data, view, vs, ve, sub, fn, ordered)
            if changed is None:
                continue
            inner, inner_size = changed
        if pieces is None:
            pieces = []
        if field_start > copied:
            pieces.append(view[copied:field_start])
            size += field_start - copied
        head = _head(number, inner_size)
        pieces.append(head)
        pieces.extend(inner)
        size += len(head) + inner_size
        copied = ve
    if pieces is not None and end > copied:
        pieces.append(view[copied:end])
        size += end - copied
    return None if pieces is None else (pieces, size)


def rewrite_rvs(
    body: bytes, fn: RVFn, *, default_api_version: str = "", default_kind: str = "", ordered: bool = False
) -> bytes:
    """`body` (`k8s\\0` + Unknown) with every non-empty RV replaced by `fn(where, value)`.

    Where the RVs are depends on the envelope's kind (and group):
    - `...List` kinds: LIST (ListMeta.resourceVersion), then ITEM for every item (and REFERENCE
      in the items of an EventList); meta/v1 `List`: LIST only;
    - DeleteOptions: PRECONDITION; policy Eviction: OWN and its deleteOptions' PRECONDITION;
    - core/v1 Event, events.k8s.io Event, core/v1 Binding: OWN and REFERENCE;
    - Status, discovery kinds, Table, option kinds: nothing (the body is returned as it is);
    - any other kind: OWN.
    kube-apiserver fills a missing kind or apiVersion from the endpoint (protobuf.go
    `copyKindDefaults`); `default_api_version`/`default_kind` play that role for request bodies.
    `fn` is not called for an absent or empty field, and an absent field stays absent. Returns
    `body` itself when `fn` changes nothing. `ordered`: the body's fields are in field-number
    order, as kube-apiserver (Go's generated marshallers) writes every message, so a message's
    walk stops after the last field that can hold an RV (answers; a client's body is walked
    whole). Enclosing length prefixes are re-encoded; every
    other byte is copied. Raises ProtobufError for a malformed body or a field on the path to an
    RV that has the wrong wire type or is not UTF-8; exceptions from `fn` propagate.
    """
    data = _bytes_of(body)
    if not data.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body: no k8s\\0 magic")
    fast = _rewrite_own_rv(data, fn, default_api_version, default_kind, ordered)
    if fast is not None:
        return body if fast is data else fast
    type_meta: list[tuple[int, int]] = []
    raws: list[tuple[int, int, int]] = []  # (field start, value start, value end) of each raw
    for field_start, number, wire, vs, ve in _fields(data, len(MAGIC), len(data)):
        if number == 1 or number == 2:
            _expect_ld(number, wire)
            if number == 1:
                type_meta.append((vs, ve))
            else:
                raws.append((field_start, vs, ve))
    if not raws:
        return body
    if len(type_meta) == 1:
        layout = _layout_of_type_meta(data[type_meta[0][0] : type_meta[0][1]], default_api_version,
                                      default_kind)
    else:
        layout = _layout(_last_string(data, type_meta, 1) or default_api_version,
                         _last_string(data, type_meta, 2) or default_kind)
    if layout is None:
        return body
    return _rewrite_raws(body, data, raws, layout, fn, ordered)


def _rewrite_raws(body: bytes, data: bytes, raws: list[tuple[int, int, int]], layout: _Layout, fn: RVFn, ordered: bool) -> bytes:
    """`body` with each raw (field start, value start, value end) rewritten by `_rewrite`;
    `body` itself when nothing changes."""
    view = memoryview(data)
    pieces: _Pieces = [MAGIC]
    copied = len(MAGIC)
    for field_start, vs, ve in raws:
        changed = _rewrite(data, view, vs, ve, layout, fn, ordered)
        if changed is None:
            continue
        pieces.append(view[copied:field_start])
        pieces.append(_head(2, changed[1]))
        pieces.extend(changed[0])
        copied = ve
    if copied == len(MAGIC):
        return body
    pieces.append(view[copied:])
    return b"".join(pieces)


_OWN_ONLY = {1: {6: RVField.OWN}}  # the layout of most objects: metadata.resourceVersion and nothing else
_TYPE_META_KEY = 1 << 3 | 2  # Unknown field 1 (TypeMeta), length-delimited
_RAW_KEY = 2 << 3 | 2  # Unknown field 2 (raw)
_ENVELOPE_TAIL = 16  # bytes after raw in kube-apiserver's envelope: contentEncoding, contentType (empty)
_METADATA_KEY = 1 << 3 | 2  # field 1 (ObjectMeta), length-delimited
_RV_KEY = 6 << 3 | 2  # ObjectMeta field 6 (resourceVersion), length-delimited


def _length(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """(the length varint at `pos`, the position after it): one byte without a call."""
    if pos < end:
        length = data[pos]
        if length < 0x80:
            return length, pos + 1
    return _varint(data, pos, end)


def _rewrite_own_rv(data: bytes, fn: RVFn, default_api_version: str, default_kind: str, ordered: bool) -> bytes | None:
    """`rewrite_rvs` of a body laid out as kube-apiserver and client-go write a single object,
    when its only RV is metadata.resourceVersion (most kinds), without the general walk: the
    envelope is TypeMeta (1) then raw (2) then the two short strings (3, 4), the object has one
    metadata field, and the metadata one resourceVersion. `data` itself when `fn` changes
    nothing; None when the body is not laid out so (the general walk then decides). `ordered`:
    as in `rewrite_rvs` (each walk stops at the field it looks for)."""
    end = len(data)
    pos = 4  # after the magic
    if end < pos + 2 or data[pos] != _TYPE_META_KEY:
        return None
    length = data[pos + 1]
    if length >= 0x80:
        return None
    type_meta_end = pos + 2 + length
    if type_meta_end + 2 > end or data[type_meta_end] != _RAW_KEY:
        return None
    raw_start = type_meta_end
    length, vs = _varint(data, raw_start + 1, end)
    ve = vs + length
    if ve > end or (ve != end and data[ve:] != _EMPTY_TAIL and (
            end - ve > _ENVELOPE_TAIL or any(number <= 2 for _, number, _, _, _ in _fields(data, ve, end)))):
        return None  # a second TypeMeta or raw: the general walk merges them
    if _layout_of_type_meta(data[pos + 2 : type_meta_end], default_api_version, default_kind) != _OWN_ONLY:
        return None
    meta = _first_only(data, vs, ve, _METADATA_KEY) if ordered else None
    if meta is None:
        meta = _only(data, vs, ve, _METADATA_KEY, ordered)
    if meta is None or meta is _ABSENT:
        return None if meta is None else data
    _, meta_vs, meta_ve = meta
    rv = _only(data, meta_vs, meta_ve, _RV_KEY, ordered)
    if rv is None or rv is _ABSENT:
        return None if rv is None else data
    rv_start, value_start, value_end = rv
    if value_start == value_end:
        return data
    old = _text(data, value_start, value_end)
    new = fn(RVField.OWN, old)
    if new is None or new == old:
        return data
    value = new.encode()
    field = _head(6, len(value)) + value
    meta_length = meta_ve - meta_vs - (value_end - rv_start) + len(field)
    meta_head = _head(1, meta_length)
    inner = (ve - vs) - (meta_ve - meta[0]) + len(meta_head) + meta_length
    return b"".join((data[:raw_start], _head(2, inner), data[vs:meta[0]], meta_head, data[meta_vs:rv_start], field,
                     data[value_end:]))


_ABSENT = (-1, -1, -1)
# kube-apiserver's envelope after raw: contentEncoding (3) and contentType (4), both empty
_EMPTY_TAIL = b"\x1a\x00\x22\x00"


def _first_only(data: bytes, start: int, end: int, key: int) -> tuple[int, int, int] | None:
    """`_only(..., ordered=True)` of a field that comes first in its message (ObjectMeta in an
    object written in field order): the one field whose key is `key` when it is at `start` and
    the next field's number is higher; None when it is not so laid out (`_only` then decides)."""
    if start + 1 >= end or data[start] != key:
        return None
    length, vs = _varint(data, start + 1, end)
    ve = vs + length
    if ve > end or (ve < end and data[ve] >> 3 <= key >> 3):
        return None
    return start, vs, ve


def _only(data: bytes, start: int, end: int, key: int, ordered: bool) -> tuple[int, int, int] | None:
    """(field start, value start, value end) of the one field of data[start:end] whose key is
    the one-byte length-delimited `key`; `_ABSENT` when there is none; None when there are
    several or the message cannot be read here. `ordered`: fields are in field-number order, so
    the walk stops at the first field past `key`."""
    found = _ABSENT
    pos = start
    number = key >> 3
    while pos < end:
        byte = data[pos]
        if byte < 0x80 and byte & 7 == 2:  # a length-delimited field with a one-byte key
            length = data[pos + 1] if pos + 1 < end else 0x80  # (inlined: this loop is on every request)
            if length < 0x80:
                vs = pos + 2
            else:
                length, vs = _varint(data, pos + 1, end)
            if byte == key:
                if found is not _ABSENT:
                    return None  # repeated: the general walk rewrites every occurrence
                found = (pos, vs, vs + length)
            elif ordered and byte > key:
                break
            pos = vs + length
        elif byte >> 3 == number:
            return None  # the field, with another wire type: malformed, the general walk says how
        elif ordered and byte > key:
            break
        else:
            try:
                pos = _field(data, pos, end)[3]
            except ProtobufError:
                return None
    return None if pos > end else found


_IDENTITY = {1: {5: RVField.REFERENCE, 6: RVField.OWN}}  # ObjectMeta's uid (5) and resourceVersion (6)


def with_identity(body: bytes, resource_version: str) -> bytes:
    """`body` (`k8s\\0` + Unknown of one object) as another partition may take it: its
    metadata.uid set to "" (Go reads an empty string as unset) and its resourceVersion, when it
    has one, set to `resource_version` (that partition's own, or "" for none): the uid and
    resourceVersion of the partition it was read from mean nothing there (a replicated write,
    proxy/handlers/replicate.py). Returns `body` itself when nothing changes. Raises
    ProtobufError for a body that is not an enveloped object."""
    data = _bytes_of(body)
    if not data.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body: no k8s\\0 magic")
    raws = []
    for field_start, number, wire, vs, ve in _fields(data, len(MAGIC), len(data)):
        if number == 2:
            _expect_ld(number, wire)
            raws.append((field_start, vs, ve))
    return _rewrite_raws(body, data, raws, _IDENTITY,
                         lambda where, value: resource_version if where is RVField.OWN else "", False)


@functools.lru_cache(maxsize=512)
def _layout_of_type_meta(type_meta: bytes, default_api_version: str, default_kind: str) -> _Layout | None:
    """`_layout` of the type in a TypeMeta message (cached by its bytes: one per type in use)."""
    spans = [(0, len(type_meta))]
    return _layout(_last_string(type_meta, spans, 1) or default_api_version,
                   _last_string(type_meta, spans, 2) or default_kind)


# -- union lists -------------------------------------------------------------------------------


def _is_list(kind: str) -> bool:
    return kind.endswith("List") and kind not in _NO_RVS and kind != "List"


def list_items(body: bytes) -> tuple[Envelope, bytes, list[bytes]]:
    """(envelope, ListMeta message bytes, each item's message bytes) of an enveloped list.

    Several ListMeta occurrences are returned concatenated (which is how they merge). Raises
    ProtobufError for a malformed body or a kind that is not a list of objects (not `...List`,
    or meta/v1 List, APIGroupList, APIResourceList)."""
    env = decode_envelope(body)
    if not _is_list(env.kind):
        raise ProtobufError(f"{env.api_version} {env.kind} is not a list of objects")
    meta_field, items_field = _list_fields(env.api_version, env.kind)
    raw = env.raw
    metas: list[bytes] = []
    items: list[bytes] = []
    for _s, f, wire, vs, ve in _fields(raw, 0, len(raw)):
        if f == meta_field:
            _expect_ld(f, wire)
            metas.append(raw[vs:ve])
        elif f == items_field:
            _expect_ld(f, wire)
            items.append(raw[vs:ve])
    return env, b"".join(metas), items


def item_meta(item: bytes) -> ItemMeta:
    """namespace, name and resourceVersion of a list item's message (its ObjectMeta, field 1).

    Absent fields are "". Raises ProtobufError for a malformed item."""
    data = _bytes_of(item)
    meta = _merged(data, 0, len(data), 1)
    found: dict[int, tuple[int, int]] = {}
    for start, end in meta:
        for _s, f, wire, vs, ve in _fields(data, start, end):
            if f == 1 or f == 3 or f == 6:
                _expect_ld(f, wire)
                found[f] = (vs, ve)
    name, namespace, rv = (_text(data, *found[f]) if f in found else "" for f in (1, 3, 6))
    return ItemMeta(namespace=namespace, name=name, resource_version=rv)


def list_meta_rv(list_meta: bytes) -> str:
    """ListMeta.resourceVersion of a ListMeta message (as `list_items` returns it), "" if absent.
    Raises ProtobufError for a malformed ListMeta."""
    data = _bytes_of(list_meta)
    return _last_string(data, [(0, len(data))], 2) or ""


def list_meta_continue(list_meta: bytes) -> str:
    """ListMeta.continue (field 3) of a ListMeta message, "" if absent. Raises ProtobufError."""
    data = _bytes_of(list_meta)
    return _last_string(data, [(0, len(data))], 3) or ""


def rewrite_item_rvs(item: bytes, fn: RVFn, *, api_version: str = "", kind: str = "") -> bytes:
    """A list item's message (as `list_items` returns it) with its ITEM resourceVersion, and the
    REFERENCE ones when the item's `api_version` and `kind` (e.g. "v1", "Event") have any,
    replaced by `fn` as `rewrite_rvs` does. Returns `item` itself when nothing changes. Raises
    ProtobufError for a malformed item."""
    data = _bytes_of(item)
    layout = _object_layout(api_version.rpartition("/")[0], kind, RVField.ITEM)
    changed = _rewrite(data, memoryview(data), 0, len(data), layout, fn, True)  # items come from kube-apiserver: ordered
    return item if changed is None else b"".join(changed[0])


def object_item_meta(obj: bytes) -> ItemMeta:
    """`item_meta` of an enveloped object (a watch event's object). Raises ProtobufError for a
    malformed envelope or metadata."""
    data = _bytes_of(obj)
    _type_meta, raw = _unknown_spans(data)
    return item_meta(b"" if raw is None else data[raw[0] : raw[1]])


def _list_meta(list_rv: str) -> bytes:
    """ListMeta{resourceVersion} exactly as gogo writes it: selfLink (1) and continue (3) are
    written empty, remainingItemCount (4) and shardInfo (5) are nil pointers and omitted."""
    return b"\x0a\x00" + _ld(2, list_rv.encode()) + b"\x1a\x00"


def build_list(env: Envelope, list_rv: str, items: Sequence[bytes]) -> bytes:
    """A new enveloped list of `env`'s type: ListMeta with only resourceVersion = `list_rv` (no
    continue, no remainingItemCount), then `items` (each an item's message bytes, as
    `list_items` returns them), then the fields of `env.raw` other than ListMeta and items as
    they were. Fields are written in number order, as kube-apiserver does, so a list it wrote
    without continue is rebuilt byte-identical. Raises ProtobufError when `env` is not a list
    type or `env.raw` is malformed."""
    if not _is_list(env.kind):
        raise ProtobufError(f"{env.api_version} {env.kind} is not a list of objects")
    meta_field, items_field = _list_fields(env.api_version, env.kind)
    raw = env.raw
    view = memoryview(raw)
    others: _Pieces = []
    pos = 0
    for _s, f, _wire, _vs, ve in _fields(raw, 0, len(raw)):
        if f != meta_field and f != items_field:
            others.append(view[pos:ve])
        pos = ve
    meta = [_ld(meta_field, _list_meta(list_rv))]
    item_fields: _Pieces = []
    for item in items:
        item_fields.append(_head(items_field, len(item)))
        item_fields.append(item)
    first, second = (meta, item_fields) if meta_field < items_field else (item_fields, meta)
    new_raw = b"".join([*first, *second, *others])
    return encode_envelope(Envelope(
        api_version=env.api_version, kind=env.kind, raw=new_raw,
        content_encoding=env.content_encoding, content_type=env.content_type,
    ))


# -- union watches -----------------------------------------------------------------------------


class FrameReader:
    """Splits a protobuf watch stream into frames: a 4-byte big-endian length, then the payload.

    `feed(chunk)` returns the payloads completed by `chunk`, in order. A frame announcing more
    than `max_frame_bytes` raises ProtobufError as soon as its length is read; the stream cannot
    be used after that. `buffered` is the number of bytes of an incomplete frame held."""

    __slots__ = ("_buf", "_max")

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf
        buf += chunk
        frames: list[bytes] = []
        pos, size = 0, len(buf)
        while size - pos >= 4:
            length = int.from_bytes(buf[pos : pos + 4], "big")
            if length > self._max:
                raise ProtobufError(f"watch frame of {length} bytes over the {self._max} limit")
            if size - pos - 4 < length:
                break
            with memoryview(buf) as view:
                frames.append(view[pos + 4 : pos + 4 + length].tobytes())
            pos += 4 + length
        if pos:
            del buf[:pos]
        return frames


def encode_frame(payload: bytes) -> bytes:
    """`payload` behind its 4-byte big-endian length. Raises ProtobufError past 4 GiB - 1."""
    if len(payload) > 0xFFFFFFFF:
        raise ProtobufError("frame over 4 GiB")
    return len(payload).to_bytes(4, "big") + payload


def decode_watch_event(frame: bytes) -> WatchEvent:
    """The WatchEvent in a frame payload (a bare meta/v1 WatchEvent: 1 type, 2 object, whose
    field 1 `raw` is the enveloped object). Raises ProtobufError for a malformed event or one
    without an object; neither the type nor the object is validated further."""
    data = _bytes_of(frame)
    type_ = ""
    obj: tuple[int, int] | None = None
    for _s, f, wire, vs, ve in _fields(data, 0, len(data)):
        if f == 1:
            _expect_ld(f, wire)
            type_ = _text(data, vs, ve)
        elif f == 2:
            _expect_ld(f, wire)
            for _s, g, gwire, gs, ge in _fields(data, vs, ve):  # RawExtension: 1 raw (last wins)
                if g == 1:
                    _expect_ld(g, gwire)
                    obj = (gs, ge)
    if obj is None:
        raise ProtobufError("watch event without an object")
    return WatchEvent(type=type_, object=data[obj[0] : obj[1]])


def encode_watch_event(type: str, obj: bytes) -> bytes:
    """A frame payload (without its length): WatchEvent{type, object: RawExtension{raw: obj}},
    byte-identical to kube-apiserver's encoding of the same event."""
    type_bytes = type.encode()
    return b"".join((
        _ld(1, type_bytes),
        _head(2, len(obj) + len(_head(1, len(obj)))),
        _head(1, len(obj)),
        obj,
    ))


def _object_meta_spans(data: bytes) -> list[tuple[int, int]]:
    """Spans of the ObjectMeta occurrences of an enveloped object ([] without raw)."""
    _type_meta, raw = _unknown_spans(data)
    return [] if raw is None else _merged(data, raw[0], raw[1], 1)


def object_rv(obj: bytes) -> str:
    """metadata.resourceVersion of an enveloped object, "" if absent.

    Raises ProtobufError for a malformed envelope or metadata."""
    data = _bytes_of(obj)
    return _last_string(data, _object_meta_spans(data), 6) or ""


def object_annotations(obj: bytes) -> dict[str, str]:
    """metadata.annotations of an enveloped object (e.g. `k8s.io/initial-events-end` on a
    bookmark), {} if absent. Raises ProtobufError for a malformed envelope or metadata."""
    data = _bytes_of(obj)
    out: dict[str, str] = {}
    for start, end in _object_meta_spans(data):
        for _s, f, wire, vs, ve in _fields(data, start, end):
            if f == 12:
                _expect_ld(f, wire)
                key = _last_string(data, [(vs, ve)], 1) or ""
                out[key] = _last_string(data, [(vs, ve)], 2) or ""
    return out


_NO_ANNOTATIONS: Mapping[str, str] = MappingProxyType({})


def bookmark_object(
    *, api_version: str, kind: str, resource_version: str,
    annotations: Mapping[str, str] = _NO_ANNOTATIONS,
) -> bytes:
    """An enveloped object of that type whose metadata holds only resourceVersion and
    `annotations` (sorted by key, as gogo writes maps): what a BOOKMARK event carries.

    kube-apiserver's bookmark object is a new empty object of the kind with those fields set
    (apiserver storage/cacher), so it also writes every other field at its zero value; a
    protobuf decoder reads the two encodings as the same object."""
    meta = _ld(6, resource_version.encode()) + b"".join(
        _ld(12, _ld(1, k.encode()) + _ld(2, annotations[k].encode())) for k in sorted(annotations)
    )
    return encode_envelope(Envelope(api_version=api_version, kind=kind, raw=_ld(1, meta)))


def status_object(*, code: int, reason: str, message: str) -> bytes:
    """An enveloped meta/v1 Status (apiVersion v1, kind Status, status "Failure") with `code`
    (an HTTP status), `reason` (a StatusReason such as "Expired") and `message`, without
    details; byte-identical to kube-apiserver's encoding of the same Status."""
    raw = b"".join((
        _ld(1, _list_meta("")),
        _ld(2, b"Failure"),
        _ld(3, message.encode()),
        _ld(4, reason.encode()),
        b"\x30" + _encode_varint(code & 0xFFFFFFFFFFFFFFFF),  # int32 varint: negatives sign-extend
    ))
    return encode_envelope(Envelope(api_version="v1", kind="Status", raw=raw))


def status_fields(obj: bytes) -> StatusFields:
    """status, message, reason and code of an enveloped meta/v1 Status (a watch ERROR event's
    object, an error answer). Raises ProtobufError when `obj` is malformed or not a Status."""
    env = decode_envelope(obj)
    if env.kind != "Status":
        raise ProtobufError(f"{env.api_version} {env.kind} is not a Status")
    raw = env.raw
    strings = {2: "", 3: "", 4: ""}
    code = 0
    for _s, f, wire, vs, ve in _fields(raw, 0, len(raw)):
        if f in strings:
            _expect_ld(f, wire)
            strings[f] = _text(raw, vs, ve)
        elif f == 6:
            if wire != 0:
                raise ProtobufError(f"Status code: wire type {wire}, expected a varint")
            code = _varint(raw, vs, ve)[0] & 0xFFFFFFFF  # int32, as gogo: the low 32 bits
            code -= (code & 0x80000000) << 1
    return StatusFields(status=strings[2], message=strings[3], reason=strings[4], code=code)


def token_review_token(body: bytes) -> str | None:
    """spec.token of an enveloped TokenReview (authentication.k8s.io/v1 generated.proto:
    TokenReview.spec = 2, TokenReviewSpec.token = 1), or None when absent or not decodable."""
    try:
        data = _bytes_of(body)
        _type_meta, raw = _unknown_spans(data)
        return None if raw is None else _last_string(data, _merged(data, raw[0], raw[1], 2), 1)
    except ProtobufError:
        return None


def object_name(body: bytes) -> str | None:
    """metadata.name of an enveloped object (a protobuf create body), or None when absent or
    not decodable. Used to route creates by name (kubelets register nodes in protobuf)."""
    try:
        return _last_string(_bytes_of(body), _object_meta_spans(_bytes_of(body)), 1)
    except ProtobufError:
        return None
