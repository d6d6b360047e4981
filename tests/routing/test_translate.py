"""Where resourceVersions cross the proxy (routing.translate): an answer translated for the client
and sent back by the client as a request gives the partition exactly its own native RVs again,
in every encoding; no native RV survives in an answer."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing import protobuf as pb
from routing import rv as rvcodec
from routing import rvjson
from routing import translate

HYPOTHESIS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PB = Path(__file__).parent / "testdata" / "protobuf"
SPACE = ("tp1", "tp2", "tp3", "tp4")
NATIVES = st.integers(1, 2**63 - 1)
PROTOBUF_OBJECTS = ["pod.pb", "node.pb", "lease.pb", "event.pb", "events-v1-event.pb"]


def _set_native(body: bytes, native: int) -> bytes:
    """The captured protobuf object with every RV set to `native` (as a partition would send)."""
    return pb.rewrite_rvs(body, lambda where, value: str(native))


def _round_trip(body: bytes, content_type: str, slot: int) -> tuple[bytes, bytes]:
    codec = rvcodec.RVCodec(SPACE)
    answer = translate.answer_translator(content_type, lambda n: codec.object_rv(slot, n).encode())
    assert answer is not None
    to_client = answer(body)
    back = translate.translate_request_body(to_client, content_type, delete_options=False,
                                            to_native=lambda v: codec.native_for(v, slot))
    return to_client, back


@HYPOTHESIS
@given(name=st.sampled_from(PROTOBUF_OBJECTS), native=NATIVES, slot=st.integers(0, 3))
def test_protobuf_answer_then_request_gives_the_partition_its_exact_bytes(name: str, native: int, slot: int) -> None:
    body = _set_native((PB / name).read_bytes(), native)

    to_client, back = _round_trip(body, translate.PROTOBUF, slot)

    seen: list[tuple[pb.RVField, str]] = []
    pb.rewrite_rvs(to_client, lambda where, value: seen.append((where, value)) or None)
    assert seen and all(rvcodec.is_proxy_rv(v) and rvcodec.RVCodec(SPACE).decode(v)[slot] == native for _, v in seen)
    own = [v for where, v in seen if where is pb.RVField.OWN]
    assert own  # the object's own RV went out translated...
    # ...and came back native; references stay as the client sent them (opaque to the partition).
    back_seen: dict[pb.RVField, set[str]] = {}
    pb.rewrite_rvs(back, lambda where, value: back_seen.setdefault(where, set()).add(value) or None)
    assert back_seen[pb.RVField.OWN] == {str(native)}
    if pb.RVField.REFERENCE in back_seen:
        assert all(rvcodec.is_proxy_rv(v) for v in back_seen[pb.RVField.REFERENCE])
    else:
        assert back == body


@HYPOTHESIS
@given(native=NATIVES, slot=st.integers(0, 3), indent=st.sampled_from([None, 1, 2, 4]),
       media=st.sampled_from(["application/json", "application/merge-patch+json", "application/yaml"]))
def test_json_and_yaml_answer_then_request_gives_the_partition_its_native_rv(native: int, slot: int, indent: int | None, media: str) -> None:
    obj = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "namespace": "x", "resourceVersion": str(native)},
           "spec": {"nodeName": "n"}}
    if media == "application/yaml":
        body = yaml.safe_dump(obj).encode().replace(f"'{native}'".encode(), f'"{native}"'.encode())
    else:
        body = json.dumps(obj, indent=indent).encode()

    to_client, back = _round_trip(body, media, slot)

    sent = yaml.safe_load(to_client)["metadata"]["resourceVersion"]  # YAML reads JSON too
    assert rvcodec.is_proxy_rv(sent) and rvcodec.RVCodec(SPACE).decode(sent)[slot] == native
    assert rvjson.native_rvs(to_client) == []
    assert yaml.safe_load(back) == obj


def test_an_answer_in_an_unknown_media_type_is_not_touched() -> None:
    assert translate.answer_translator("text/plain", lambda n: b"x") is None
    assert translate.stream_translator("application/vnd.kubernetes.protobuf", lambda n: b"x") is None  # not a stream


def test_json_watch_stream_is_translated_across_chunk_boundaries() -> None:
    codec = rvcodec.RVCodec(SPACE)
    lines = b"".join(orjson.dumps({"type": "MODIFIED", "object": {"metadata": {"resourceVersion": str(n)}}}) + b"\n" for n in (5, 6, 7))
    stream = translate.stream_translator("application/json", lambda n: codec.object_rv(0, n).encode())
    assert stream is not None

    out = b"".join(stream.feed(lines[i : i + 7]) for i in range(0, len(lines), 7)) + stream.end()

    events = [orjson.loads(line) for line in out.splitlines()]
    assert [codec.decode(e["object"]["metadata"]["resourceVersion"])[0] for e in events] == [5, 6, 7]


def test_protobuf_watch_stream_is_translated_frame_by_frame() -> None:
    codec = rvcodec.RVCodec(SPACE)
    raw = (PB / "watch-pods.bin").read_bytes()
    stream = translate.stream_translator("application/vnd.kubernetes.protobuf;stream=watch", lambda n: codec.object_rv(1, n).encode())
    assert stream is not None

    out = b"".join(stream.feed(raw[i : i + 100]) for i in range(0, len(raw), 100))

    events = [pb.decode_watch_event(f) for f in pb.FrameReader().feed(out)]
    assert [codec.decode(pb.object_rv(e.object))[1] for e in events[:3]] == [205, 206, 207]
    assert len(events) == len(pb.FrameReader().feed(raw))


def test_a_list_answers_own_rv_becomes_the_position_list_rv_gives_and_its_items_keep_the_object_form() -> None:
    # A list of one partition (a namespaced list) names a position of every partition of its
    # space: its own RV by `list_rv`, every item's by `to_proxy` (docs/resource-versions.md).
    codec = rvcodec.RVCodec(SPACE)
    to_proxy = lambda n: codec.object_rv(1, n).encode()  # noqa: E731
    list_rv = lambda n: str(2**110 + n).encode()  # noqa: E731
    body = orjson.dumps({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "42"},
                         "items": [{"metadata": {"name": "a", "resourceVersion": "40"}}]})
    rewrite = translate.answer_translator("application/json", to_proxy, list_rv=list_rv)
    assert rewrite is not None
    doc = orjson.loads(rewrite(body))
    assert doc["metadata"]["resourceVersion"] == str(2**110 + 42)
    assert doc["items"][0]["metadata"]["resourceVersion"] == codec.object_rv(1, 40)

    protobuf_list = _set_native((PB / "podlist.pb").read_bytes(), 42)
    rewrite = translate.answer_translator(translate.PROTOBUF, to_proxy, list_rv=list_rv)
    assert rewrite is not None
    out = rewrite(protobuf_list)
    _, list_meta, items = pb.list_items(out)
    assert pb.list_meta_rv(list_meta) == str(2**110 + 42)
    assert items and all(pb.item_meta(item).resource_version == codec.object_rv(1, 42) for item in items)


def test_a_list_rv_that_cannot_be_a_position_keeps_the_object_form() -> None:
    codec = rvcodec.RVCodec(SPACE)
    body = orjson.dumps({"kind": "ConfigMapList", "metadata": {"resourceVersion": "42"}, "items": []})
    rewrite = translate.answer_translator("application/json", lambda n: codec.object_rv(0, n).encode(), list_rv=lambda n: None)
    assert rewrite is not None
    assert orjson.loads(rewrite(body))["metadata"]["resourceVersion"] == codec.object_rv(0, 42)


# -- the watch cache's JSON records -----------------------------------------------------------

_CACHE_CODEC = rvcodec.RVCodec(("rp1", "rp2"), rvcodec.EpochTable(
    (rvcodec.Epoch(1, ("rp1", "rp2"), rvcodec.natural_slot_bits(2), (0, 0)),)))
_RV_VALUES = st.one_of(st.integers(0, 2**64 + 5).map(str), st.sampled_from(["", "abc", "0012", "٣", "1" * 25]))
_JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=8))
_CACHED_OBJECTS = st.fixed_dictionaries(
    {"kind": st.just("Thing"), "metadata": st.fixed_dictionaries(
        {"name": st.text(max_size=6)}, optional={"resourceVersion": _RV_VALUES, "uid": st.text(max_size=4)})},
    optional={
        "spec": st.recursive(_JSON_LEAVES, lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.sampled_from(["resourceVersion", "a", "metadata", 'x"resourceVersion"']),
                            st.one_of(inner, _RV_VALUES), max_size=3)), max_leaves=6),
        "involvedObject": st.fixed_dictionaries({"resourceVersion": _RV_VALUES}),
    },
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_CACHED_OBJECTS, st.sampled_from([0, 1]))
def test_a_decoded_object_is_cached_byte_for_byte_as_its_encoding_would_be(obj: dict, slot: int) -> None:
    expected = translate.cached_json(orjson.dumps(obj), _CACHE_CODEC, slot)
    assert translate.cached_json_object(json.loads(json.dumps(obj)), _CACHE_CODEC, slot) == expected


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_CACHED_OBJECTS.filter(lambda o: str(o["metadata"].get("resourceVersion", "")).isdigit()
                              and 0 < int(o["metadata"]["resourceVersion"]) < 2**64))
def test_a_cached_object_is_stamped_where_the_regular_expression_finds_its_own_rv(obj: dict) -> None:
    raw = translate.cached_json_object(obj, _CACHE_CODEC, 0)
    stamp = _CACHE_CODEC.encode([7, 9])
    own = rvjson.find_own_rv(raw, ("metadata", "resourceVersion"), None)
    assert own is not None
    assert translate.stamped_json(raw, stamp) == raw[: own[0]] + stamp.encode() + raw[own[1] :]


def test_a_lease_is_cached_without_a_scan_and_an_event_with_references_with_one() -> None:
    lease = {"kind": "Lease", "metadata": {"name": "n1", "namespace": "kube-node-lease", "resourceVersion": "2704"},
             "spec": {"holderIdentity": "n1"}}
    raw = translate.cached_json_object(lease, _CACHE_CODEC, 1)
    assert orjson.loads(raw)["metadata"]["resourceVersion"] == _CACHE_CODEC.object_rv(1, 2704)
    event = {"kind": "Event", "metadata": {"name": "e", "resourceVersion": "12"},
             "involvedObject": {"kind": "Pod", "resourceVersion": "10"}}
    doc = orjson.loads(translate.cached_json_object(event, _CACHE_CODEC, 0))
    assert doc["metadata"]["resourceVersion"] == _CACHE_CODEC.object_rv(0, 12)
    assert doc["involvedObject"]["resourceVersion"] == _CACHE_CODEC.object_rv(0, 10)
