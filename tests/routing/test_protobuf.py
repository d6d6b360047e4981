"""metadata.name of Kubernetes protobuf bodies (routing.protobuf), on hand-built envelopes:
magic `k8s\\0` + runtime.Unknown{1: typeMeta, 2: raw, 3: contentEncoding, 4: contentType}."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing.protobuf import MAGIC, object_name

HYPOTHESIS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def ld(field: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def vi(field: int, value: int) -> bytes:
    """A varint field (wire type 0)."""
    return varint(field << 3) + varint(value)


def type_meta(api_version: str = "v1", kind: str = "Node") -> bytes:
    return ld(1, api_version.encode()) + ld(2, kind.encode())


def node(name: str, *, extra_meta: bytes = b"", extra_node: bytes = b"") -> bytes:
    object_meta = extra_meta + ld(1, name.encode()) + ld(2, b"gen-") + ld(3, b"")
    spec = ld(1, b"10.0.0.0/24")
    return ld(1, object_meta) + ld(2, spec) + extra_node


def envelope(raw: bytes, *, typemeta_first: bool = True) -> bytes:
    tm, body = ld(1, type_meta()), ld(2, raw)
    unknown = tm + body if typemeta_first else body + tm
    return MAGIC + unknown + ld(3, b"") + ld(4, b"application/vnd.kubernetes.protobuf")


def test_object_name_reads_metadata_name_from_a_node_envelope() -> None:
    assert object_name(envelope(node("rp2-n1"))) == "rp2-n1"


def test_object_name_does_not_depend_on_field_order() -> None:
    assert object_name(envelope(node("rp1-n1"), typemeta_first=False)) == "rp1-n1"


def test_object_name_skips_fields_of_other_wire_types() -> None:
    extra = vi(9, 300) + varint(10 << 3 | 1) + b"\x01" * 8 + varint(11 << 3 | 5) + b"\x02" * 4
    body = envelope(node("rp2-n9", extra_meta=extra, extra_node=extra))

    assert object_name(body) == "rp2-n9"


def test_object_name_of_a_long_utf8_name() -> None:
    name = "node-" + "é" * 200  # length needs a two-byte varint
    assert object_name(envelope(node(name))) == name


def test_object_name_is_none_without_a_name() -> None:
    raw = ld(1, ld(2, b"gen-")) + ld(2, b"")  # ObjectMeta with generateName only

    assert object_name(envelope(raw)) is None


def test_object_name_is_none_without_raw_or_metadata() -> None:
    assert object_name(MAGIC + ld(1, type_meta())) is None
    assert object_name(envelope(ld(2, b"spec only"))) is None


def test_object_name_is_none_for_json_and_garbage() -> None:
    assert object_name(b'{"metadata":{"name":"x"}}') is None
    assert object_name(b"") is None
    assert object_name(MAGIC) is None
    assert object_name(b"k8s") is None
    assert object_name(MAGIC + b"\xff\xff\xff") is None
    assert object_name(MAGIC + b"\x0b") is None  # wire type 3 (group start): unsupported


def test_object_name_is_none_for_a_name_that_is_not_utf8() -> None:
    raw = ld(1, ld(1, b"\xff\xfe"))

    assert object_name(envelope(raw)) is None


@HYPOTHESIS
@given(name=st.text(min_size=1, max_size=80), data=st.data())
def test_object_name_of_an_envelope_truncated_before_the_end_of_raw_is_none(name: str, data: st.DataObject) -> None:
    body = envelope(node(name))
    assert object_name(body) == name
    raw_end = len(MAGIC + ld(1, type_meta()) + ld(2, node(name)))  # fields 3 and 4 follow raw

    cut = data.draw(st.integers(0, raw_end - 1))

    assert object_name(body[:cut]) is None


@HYPOTHESIS
@given(body=st.binary(max_size=200))
def test_object_name_never_raises_on_arbitrary_bytes(body: bytes) -> None:
    result = object_name(body)

    assert result is None or isinstance(result, str)


@HYPOTHESIS
@given(body=st.binary(max_size=200))
def test_object_name_never_raises_on_arbitrary_bytes_after_the_magic(body: bytes) -> None:
    result = object_name(MAGIC + body)

    assert result is None or isinstance(result, str)
