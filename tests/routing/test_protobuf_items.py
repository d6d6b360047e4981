"""What a watch cache reads from and builds around protobuf objects (routing.protobuf_items), on
objects captured from kube-apiserver v1.36.3 (testdata/protobuf, see its README)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing import protobuf as pb
from routing import protobuf_items as pbi
from routing.selectors import selectable_fields

TESTDATA = Path(__file__).parent / "testdata" / "protobuf"


def _raw(name: str) -> bytes:
    return pb.decode_envelope((TESTDATA / name).read_bytes()).raw


def _meta_fields(item: bytes) -> list[int]:
    [(start, end)] = [(vs, ve) for _s, f, _w, vs, ve in pb._fields(item, 0, len(item)) if f == 1]
    return [f for _s, f, _w, _vs, _ve in pb._fields(item, start, end)]


def test_the_facts_of_a_node_pod_and_lease_are_what_a_field_selector_reads() -> None:
    node = pbi.item_facts(_raw("node.pb"), "", "nodes")
    assert (node.namespace, node.name, node.resource_version, node.labels) == ("", "rp1-n1", "208", {"node-role.kubernetes.io/worker": ""})
    assert selectable_fields("", "nodes", node.doc) == {"metadata.name": "rp1-n1", "spec.unschedulable": "false"}
    pod = pbi.item_facts(_raw("pod.pb"), "", "pods")
    assert (pod.namespace, pod.name, pod.labels) == ("default", "web-1", {"app": "web"})
    assert selectable_fields("", "pods", pod.doc) == {
        "metadata.name": "web-1", "metadata.namespace": "default", "spec.nodeName": "", "spec.restartPolicy": "Always",
        "spec.schedulerName": "default-scheduler", "spec.serviceAccountName": "", "spec.hostNetwork": "false",
        "status.phase": "Pending", "status.podIP": "", "status.nominatedNodeName": "",
    }
    lease = pbi.item_facts(_raw("lease.pb"), "coordination.k8s.io", "leases")
    assert (lease.namespace, lease.name, lease.labels) == ("kube-node-lease", "rp1-n1", {})


def test_readable_resources_are_those_whose_field_set_is_known_on_protobuf() -> None:
    assert pbi.readable("", "nodes") and pbi.readable("", "pods") and pbi.readable("coordination.k8s.io", "leases")
    assert pbi.readable("", "configmaps") and pbi.readable("", "secrets")
    assert not pbi.readable("", "events")  # involvedObject.* is not in the table
    assert not pbi.readable("example.com", "widgets")  # custom resources are not served in protobuf


@pytest.mark.parametrize("name", ["node.pb", "pod.pb", "lease.pb"])
def test_stripping_drops_managed_fields_and_keeps_every_other_byte(name: str) -> None:
    raw = _raw(name)
    assert 17 in _meta_fields(raw)  # kubectl wrote them
    stripped = pbi.strip_item(raw, managed_fields=True, last_applied=True)
    assert 17 not in _meta_fields(stripped)
    assert [f for f in _meta_fields(raw) if f != 17] == _meta_fields(stripped)
    assert pbi.strip_item(raw, managed_fields=False, last_applied=False) is raw
    assert pbi.strip_item(stripped, managed_fields=True, last_applied=True) is stripped


def test_stripping_drops_only_the_last_applied_annotation() -> None:
    meta = pb._ld(1, b"n") + pb._ld(12, pb._ld(1, pbi.LAST_APPLIED.encode()) + pb._ld(2, b"{}")) + pb._ld(12, pb._ld(1, b"a") + pb._ld(2, b"b"))
    item = pb._ld(1, meta) + pb._ld(2, b"")
    stripped = pbi.strip_item(item, managed_fields=True, last_applied=True)
    assert stripped == pb._ld(1, pb._ld(1, b"n") + pb._ld(12, pb._ld(1, b"a") + pb._ld(2, b"b"))) + pb._ld(2, b"")
    assert pbi.strip_item(item, managed_fields=True, last_applied=False) is item


@pytest.mark.parametrize("batch", [1, 2, 5])
def test_a_list_in_pieces_is_the_list_kube_apiserver_writes(batch: int) -> None:
    env, _meta, items = pb.list_items((TESTDATA / "nodelist.pb").read_bytes())
    objects = [pb.encode_envelope(pb.Envelope(env.api_version, "Node", item)) for item in items]
    body = b"".join(pbi.list_pieces(env.api_version, env.kind, "4242", objects, batch=batch))
    assert body == pb.build_list(pb.Envelope(env.api_version, env.kind, b""), "4242", items)
    again_env, again_meta, again_items = pb.list_items(body)
    assert (again_env.kind, pb.list_meta_rv(again_meta), again_items) == ("NodeList", "4242", items)


def test_bookmark_and_error_frames_decode_as_kube_apiserver_writes_them() -> None:
    [payload] = pb.FrameReader().feed(pbi.bookmark_frame("v1", "Node", "77", initial_events_end=True))
    event = pb.decode_watch_event(payload)
    assert event.type == "BOOKMARK" and pb.object_rv(event.object) == "77"
    assert pb.object_annotations(event.object) == {"k8s.io/initial-events-end": "true"}
    [payload] = pb.FrameReader().feed(pbi.error_frame(410, "Expired", "too old"))
    event = pb.decode_watch_event(payload)
    assert event.type == "ERROR"
    assert pb.status_fields(event.object) == pb.StatusFields(status="Failure", message="too old", reason="Expired", code=410)


# Messages of the shape a field selector's paths walk: top-level fields 2-4 (spec, status, a
# Secret's type; metadata, field 1, is read by other code) and 2-level paths, each field
# repeated or of the wrong wire type at random.
def _varint_field(numbers: st.SearchStrategy[int]) -> st.SearchStrategy[bytes]:
    return st.tuples(numbers, st.integers(0, 3)).map(lambda t: pb._encode_varint(t[0] << 3) + pb._encode_varint(t[1]))


_TEXT_FIELD = st.tuples(st.integers(1, 20), st.text(max_size=5)).map(lambda t: pb._ld(t[0], t[1].encode()))
_INNER = st.lists(st.one_of(_varint_field(st.integers(1, 20)), _TEXT_FIELD), max_size=8).map(b"".join)
_TOP_FIELD = st.one_of(st.tuples(st.integers(2, 4), _INNER).map(lambda t: pb._ld(t[0], t[1])), _varint_field(st.integers(2, 20)))
_MESSAGES = st.lists(_TOP_FIELD, max_size=6).map(b"".join)


@settings(max_examples=500)
@given(_MESSAGES, st.sampled_from([("", "pods"), ("", "nodes"), ("", "secrets")]))
def test_the_facts_walk_each_message_once_and_read_what_one_walk_per_path_reads(item: bytes, resource: tuple[str, str]) -> None:
    def reference() -> dict[str, object]:  # one walk per path and level, the last occurrence wins
        values: dict[str, object] = {}
        for json_path, numbers, type_ in pbi._FIELD_PATHS[resource]:
            spans = [(0, len(item))]
            for number in numbers[:-1]:
                inner = [(w, vs, ve) for start, end in spans for _s, f, w, vs, ve in pb._fields(item, start, end) if f == number]
                for w, _vs, _ve in inner:
                    pb._expect_ld(number, w)
                spans = [(vs, ve) for _w, vs, ve in inner]
            last = [(w, vs, ve) for start, end in spans for _s, f, w, vs, ve in pb._fields(item, start, end) if f == numbers[-1]]
            if not last:
                continue
            w, vs, ve = last[-1]
            if type_ == "bool":
                if w != 0:
                    raise pb.ProtobufError("not a varint")
                values[json_path] = pb._varint(item, vs, ve)[0] != 0
            else:
                pb._expect_ld(numbers[-1], w)
                values[json_path] = item[vs:ve].decode()
        return values

    try:
        expected: object = reference()
    except (pb.ProtobufError, UnicodeDecodeError):
        expected = pb.ProtobufError
    try:
        doc = pbi.item_facts(item, *resource).doc
    except pb.ProtobufError:
        assert expected is pb.ProtobufError
        return
    assert expected is not pb.ProtobufError
    got = {}
    for json_path, _numbers, _type in pbi._FIELD_PATHS[resource]:
        node: object = doc
        for key in json_path:
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None:
            got[json_path] = node
    assert got == expected


def test_a_field_selector_path_deeper_than_two_fields_is_refused_when_the_table_is_read() -> None:
    with pytest.raises(ValueError, match="spec.a.b: 3 fields"):
        pbi._plan(((("spec", "a", "b"), (2, 1, 1), "string"),))
    plan = pbi._PLANS[("", "pods")]
    assert plan.top == (1, 2, 3) and dict(plan.below) == {2: {3, 8, 10, 11, 19}, 3: {1, 6, 11}}
