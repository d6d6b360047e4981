"""THE place where resourceVersions cross the proxy: one entry per direction, dispatching on
the media type to the codec of each encoding (`routing.rvjson` for JSON and YAML of any
formatting, `routing.protobuf` for Kubernetes protobuf objects and watch frames). Pure. Every
caller goes through here: forwards (`answer_translator`, `stream_translator`,
`translate_request_body`), unions (`object_translator`, with routing.merge's vectors on top) and
watch caches (`cached_json`, `cached_json_object`, `cached_protobuf_item`, `stamped_json`, `stamped_protobuf`).

The invariant (docs/resource-versions.md): for a merged resource, every resourceVersion a
client receives is a proxy RV, and every resourceVersion the proxy sends a partition is that
partition's native RV, whatever the encoding and wherever the field sits.
- Requests: the RVs that act as preconditions (an update's metadata.resourceVersion, a JSON
  Patch test of it, DeleteOptions preconditions) are translated by `to_native`, which raises
  `RVError` for one it cannot translate (the caller answers 409 Conflict, as kube-apiserver does
  for a stale precondition). RVs in references are opaque to kube-apiserver and left alone.
- Answers: every native RV, at any depth, becomes the object-form proxy RV of the partition that
  answered (`to_proxy`). Union lists and watches put vectors on top (`routing.merge`).
- CBOR (KEP-4222; alpha and off by default in kube-apiserver 1.36) is negotiated away exactly as
  a kube-apiserver without it answers: not offered in Accept (406 when nothing else is
  acceptable), refused as a request body (415). No client ever sees an untranslated RV.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from typing import Any

import orjson

from routing import protobuf as pb
from routing import rv as rvcodec
from routing import rvjson

PROTOBUF = "application/vnd.kubernetes.protobuf"
_JSON_TYPES = frozenset(
    {
        "application/json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/json-patch+json",
    }
)
_YAML_TYPES = frozenset({"application/yaml", "application/apply-patch+yaml"})
_CBOR_TYPES = frozenset({"application/cbor", "application/cbor-seq", "application/apply-patch+cbor"})
# What kube-apiserver 1.36 serves with CBOR off, in the order its negotiation errors list them
# (k8s.io/apiserver/pkg/endpoints/handlers/negotiation: NewNotAcceptableError and
# NewUnsupportedMediaTypeError over the codec factory's supported media types).
SERVED_MEDIA_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")


class Encoding(enum.Enum):
    JSON = "json"
    YAML = "yaml"
    PROTOBUF = "protobuf"
    CBOR = "cbor"
    OTHER = "other"


def media_type(content_type: str) -> str:
    """`type/subtype` of a Content-Type, lower case, without parameters."""
    return content_type.split(";", 1)[0].strip().lower()


# distinct Content-Type and Accept values remembered by `encoding_of` and `without_cbor` (a
# handful are in use: clients send the same few media types on every request).
_MEDIA_CACHE = 256


@functools.lru_cache(maxsize=_MEDIA_CACHE)
def encoding_of(content_type: str) -> Encoding:
    media = media_type(content_type)
    if media in _JSON_TYPES:
        return Encoding.JSON
    if media in _YAML_TYPES:
        return Encoding.YAML
    if media == PROTOBUF:
        return Encoding.PROTOBUF
    if media in _CBOR_TYPES:
        return Encoding.CBOR
    return Encoding.OTHER


def is_watch_stream(content_type: str) -> bool:
    """True for protobuf watch framing (`...;stream=watch`)."""
    return "stream=watch" in content_type.replace(" ", "").lower()


# -- requests ------------------------------------------------------------------------------

ToNative = Callable[[str], str | None]


def translate_request_body(body: bytes, content_type: str, *, delete_options: bool, to_native: ToNative) -> bytes:
    """The body with its precondition RVs translated (see module docstring). Bodies of other
    media types pass unchanged (the partition judges them). Raises RVError from `to_native`,
    rvjson.BodyError / pb.ProtobufError for a body that cannot be decoded although it might
    carry a proxy RV."""
    encoding = encoding_of(content_type)
    if encoding in (Encoding.JSON, Encoding.YAML):

        def fn(_: rvjson.RVField, value: str) -> str | None:
            return to_native(value)

        return rvjson.translate_request(body, yaml_body=encoding is Encoding.YAML, delete_options=delete_options, fn=fn)
    if encoding is Encoding.PROTOBUF and body.startswith(pb.MAGIC):

        def pb_fn(where: pb.RVField, value: str) -> str | None:
            if where in (pb.RVField.OWN, pb.RVField.PRECONDITION):
                return to_native(value)
            return None  # references are opaque to kube-apiserver

        # A body without TypeMeta takes its kind from the endpoint, as in kube-apiserver.
        return pb.rewrite_rvs(body, pb_fn, default_kind="DeleteOptions" if delete_options else "")
    return body


# -- answers -------------------------------------------------------------------------------

ToProxy = Callable[[int], bytes | None]


def object_translator(codec: rvcodec.RVCodec, slot: int) -> ToProxy:
    """native -> object-form proxy RV of partition `slot` (docs/resource-versions.md)."""

    def translate(native: int) -> bytes | None:
        return codec.object_rv(slot, native).encode()

    return translate


def cached_json(body: bytes, codec: rvcodec.RVCodec, slot: int) -> bytes:
    """A JSON object of partition `slot` as a watch cache keeps it: every native RV in object form."""
    return rvjson.translate_natives(body, object_translator(codec, slot))


_RV_KEY = b'"resourceVersion"'
_RV_FIELD = b'"resourceVersion":"'  # as orjson writes it: compact


def cached_json_object(obj: dict[str, Any], codec: rvcodec.RVCodec, slot: int) -> bytes:
    """`cached_json(orjson.dumps(obj), codec, slot)`, byte for byte, for a decoded object:
    its own metadata.resourceVersion is put in object form in `obj` before it is encoded (so
    `obj` is changed), and the encoded bytes are scanned for other RVs (an Event's
    involvedObject, ...) only when they hold another resourceVersion key. Most kinds have
    none: a Lease renewal's event is then encoded without a regular-expression pass."""
    meta = obj.get("metadata")
    own = meta.get("resourceVersion") if isinstance(meta, dict) else None
    translated = False
    if type(own) is str and 0 < len(own) <= 19 and own.isascii() and own.isdigit():
        native = int(own)
        if 0 < native < rvcodec.NATIVE_LIMIT:
            meta["resourceVersion"] = codec.object_rv(slot, native)  # type: ignore[index]
            translated = True
    body = orjson.dumps(obj)
    if translated and body.count(_RV_KEY) == 1:
        return body
    return cached_json(body, codec, slot)


def cached_protobuf_item(item: bytes, codec: rvcodec.RVCodec, slot: int, *, api_version: str, kind: str) -> bytes:
    """A protobuf list item or event object of partition `slot` as a watch cache keeps it: every
    native RV in object form."""
    return pb.rewrite_item_rvs(item, protobuf_rv_fn(object_translator(codec, slot)), api_version=api_version, kind=kind)


_OWN_RV = ("metadata", "resourceVersion")


def stamped_json(raw: bytes, stamp: str) -> bytes:
    """A cached JSON object (compact, as `cached_json_object` writes it) with its own
    resourceVersion set to `stamp` (a watch event's vector: the position after the event), every
    other byte as it was. A cached object always has its own resourceVersion (kube-apiserver
    sets it on every object it stores), so a body with one resourceVersion key has it there,
    found without a regular expression."""
    if raw.count(_RV_KEY) == 1:
        start = raw.find(_RV_FIELD)
        end = raw.find(b'"', start + len(_RV_FIELD)) if start >= 0 else -1
        if end >= 0:
            return raw[: start + len(_RV_FIELD)] + stamp.encode() + raw[end:]
    own = rvjson.find_own_rv(raw, _OWN_RV, None)
    return raw if own is None else raw[: own[0]] + stamp.encode() + raw[own[1] :]


def stamped_protobuf(raw: bytes, stamp: str) -> bytes:
    """`stamped_json` of a cached protobuf object (`k8s\\0` + Unknown)."""
    return pb.rewrite_rvs(raw, lambda where, value: stamp if where is pb.RVField.OWN else None, ordered=True)


def protobuf_rv_fn(to_proxy: ToProxy, *, list_rv: ToProxy | None = None) -> Callable[[pb.RVField, str], str | None]:
    """An RV function for `routing.protobuf` rewriting that turns every native RV into
    `to_proxy(native)`, a list's own into `list_rv(native)` when given (a proxy RV already
    there, or "0", is kept)."""

    def fn(where: pb.RVField, value: str) -> str | None:
        if not value.isdigit() or len(value) > 19:
            return None  # already a proxy RV (a reference a client wrote), or not an RV
        native = int(value)
        if not native:
            return None
        new = list_rv(native) if list_rv is not None and where is pb.RVField.LIST else None
        if new is None:
            new = to_proxy(native)
        return new.decode() if new is not None else None

    return fn


def answer_translator(content_type: str, to_proxy: ToProxy, *, list_rv: ToProxy | None = None) -> Callable[[bytes], bytes] | None:
    """A whole-body translator for an answer of this media type, None when the body carries no
    RVs the proxy understands (text, discovery documents that are not objects...). `list_rv`:
    for a list (or Table) answer, what its own resourceVersion (ListMeta's) becomes instead of
    `to_proxy`'s (a position, not an object's RV: docs/resource-versions.md); JSON and protobuf."""
    encoding = encoding_of(content_type)
    if encoding is Encoding.JSON:
        if list_rv is not None:
            return lambda body: _json_list_answer(body, to_proxy, list_rv)
        return lambda body: rvjson.translate_natives(body, to_proxy)
    if encoding is Encoding.YAML:
        return lambda body: rvjson.translate_yaml_natives(body, to_proxy)
    if encoding is Encoding.PROTOBUF:
        fn = protobuf_rv_fn(to_proxy, list_rv=list_rv)
        return lambda body: pb.rewrite_rvs(body, fn, ordered=True) if body.startswith(pb.MAGIC) else body
    return None


_LIST_RV = ("metadata", "resourceVersion")


def _json_list_answer(body: bytes, to_proxy: ToProxy, list_rv: ToProxy) -> bytes:
    """A JSON list answer translated: every native RV by `to_proxy`, then its own (the list's)
    by `list_rv`."""
    span = rvjson.find_own_rv(body, _LIST_RV, None)
    native = body[span[0] : span[1]] if span is not None else b""
    out = rvjson.translate_natives(body, to_proxy)
    if not native.isdigit() or native == b"0":
        return out
    new = list_rv(int(native))
    span = rvjson.find_own_rv(out, _LIST_RV, None)
    if new is None or span is None:
        return out  # the object form to_proxy gave it
    return out[: span[0]] + new + out[span[1] :]


class StreamTranslator:
    """Translates a watch stream chunk by chunk: JSON events are newline-delimited, protobuf
    events are length-prefixed frames. `feed` returns the complete translated events so far;
    `end` what is left (a last JSON line without its newline)."""

    def __init__(self, content_type: str, to_proxy: ToProxy) -> None:
        self._protobuf = encoding_of(content_type) is Encoding.PROTOBUF
        self._to_proxy = to_proxy
        self._pending = b""
        self._frames = pb.FrameReader() if self._protobuf else None
        self._pb_fn = protobuf_rv_fn(to_proxy)

    def feed(self, chunk: bytes) -> bytes:
        if self._frames is not None:
            out = []
            for frame in self._frames.feed(chunk):
                event = pb.decode_watch_event(frame)
                translated = pb.rewrite_rvs(event.object, self._pb_fn, ordered=True) if event.object.startswith(pb.MAGIC) else event.object
                out.append(pb.encode_frame(pb.encode_watch_event(event.type, translated)))
            return b"".join(out)
        self._pending += chunk
        if b"\n" not in chunk:
            return b""
        head, sep, self._pending = self._pending.rpartition(b"\n")
        return rvjson.translate_natives(head + sep, self._to_proxy)

    def end(self) -> bytes:
        rest, self._pending = self._pending, b""
        return rvjson.translate_natives(rest, self._to_proxy) if rest else b""


def stream_translator(content_type: str, to_proxy: ToProxy) -> StreamTranslator | None:
    """A StreamTranslator for a watch answer of this media type, None for media types the proxy
    passes through as they are."""
    encoding = encoding_of(content_type)
    if encoding is Encoding.JSON or (encoding is Encoding.PROTOBUF and is_watch_stream(content_type)):
        return StreamTranslator(content_type, to_proxy)
    return None


# -- negotiation ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=_MEDIA_CACHE)
def without_cbor(accept: str) -> str | None:
    """The Accept header without CBOR media types; "" when the client sent none; None when
    only CBOR was acceptable (the answer is 406, as from a kube-apiserver without CBOR)."""
    if not accept.strip():
        return ""
    parts = [p.strip() for p in accept.split(",") if p.strip()]
    kept = [p for p in parts if media_type(p) not in _CBOR_TYPES]
    if len(kept) == len(parts):
        return accept
    return ", ".join(kept) if kept else None
