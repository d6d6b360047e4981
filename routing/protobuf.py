"""Reading `metadata.name` from a Kubernetes protobuf request body, without a protobuf library.

kubelets send protobuf creates (POST /api/v1/nodes at registration); routing such a create by
its body name needs only the name. Wire format (`k8s.io/apimachinery/pkg/runtime/serializer/
protobuf`): the 4 magic bytes `k8s\\0`, then a `runtime.Unknown` message whose field 2 (`raw`)
holds the object; in every built-in object field 1 is `metadata` (ObjectMeta) and in ObjectMeta
field 1 is `name`.
"""

from __future__ import annotations

MAGIC = b"k8s\x00"


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _field(data: bytes, number: int) -> bytes | None:
    """The bytes of the first length-delimited field `number` in a message, or None."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(data, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            if field == number:
                return data[pos : pos + length]
            pos += length
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return None


def object_name(body: bytes) -> str | None:
    """metadata.name of a protobuf-encoded object, or None when absent or not decodable."""
    if not body.startswith(MAGIC):
        return None
    try:
        raw = _field(body[len(MAGIC) :], 2)
        meta = _field(raw, 1) if raw is not None else None
        name = _field(meta, 1) if meta is not None else None
        return name.decode() if name is not None else None
    except (ValueError, UnicodeDecodeError):
        return None
