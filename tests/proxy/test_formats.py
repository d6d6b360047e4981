"""What a reflector reads, decoded by the cache's format (proxy.cache.formats): a LIST page and
each kind of watch event, in JSON and in protobuf, round-tripped through the bytes the same
format writes (kube-apiserver's own protobuf bytes: tests/proxy/test_watch_cache.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from config.models import CacheConfig, PartitionRole
from proxy.cache import formats
from proxy.cache.formats import JSON, PROTOBUF_FORMAT, ObjectFormat
from proxy.cache.watch_cache import WatchCache
from routing import protobuf as pb
from routing import protobuf_items as pbi
from routing import rv as rvcodec
from routing.selectors import parse_field_selector, parse_label_selector
from tests.proxy.test_watch_cache import _pb_node, make_cache, make_protobuf_cache, node

NODES_SPEC = CacheConfig(name="nodes", resource="nodes", role=PartitionRole.RESOURCE)

EVERY = (parse_label_selector(""), parse_field_selector(""))


def _payload(fmt: ObjectFormat, data: bytes) -> bytes:
    """One event's bytes as the watch stream hands them over: a line, or a frame's payload."""
    if fmt is JSON:
        return data
    [frame] = pb.FrameReader().feed(data)
    return frame


@pytest.mark.parametrize("make", [make_cache, make_protobuf_cache], ids=["json", "protobuf"])
def test_a_list_page_decodes_to_its_kind_rv_and_items(make: Callable[[], WatchCache]) -> None:
    cache = make()
    page = cache.format.decode_list(cache.list_bytes(cache.matching(*EVERY)))
    assert (page.kind, page.api_version, page.resource_version, page.continue_token) == ("NodeList", "v1", cache.rv, "")
    assert [cache.format.meta(cache.spec, item)[1] for item in page.items] == ["a", "b"]


@pytest.mark.parametrize(("fmt", "obj"), [(JSON, orjson.dumps(node("a", 7))), (PROTOBUF_FORMAT, None)], ids=["json", "protobuf"])
def test_watch_events_decode_to_type_object_bookmark_rv_and_error_code(fmt: ObjectFormat, obj: bytes | None) -> None:
    raw = obj if obj is not None else pb.encode_envelope(pb.Envelope(api_version="v1", kind="Node", raw=_pb_node("a", 7, {})))
    modified = fmt.decode_event(_payload(fmt, fmt.event("MODIFIED", raw)))
    assert modified.type == "MODIFIED" and fmt.meta(NODES_SPEC, modified.object)[1:] == ("a", 7)
    bookmark = fmt.decode_event(_payload(fmt, fmt.bookmark("v1", "Node", "42")))
    assert (bookmark.type, bookmark.resource_version) == ("BOOKMARK", "42")
    error = fmt.decode_event(_payload(fmt, fmt.expired("too old")))
    assert (error.type, error.code) == ("ERROR", 410) and "too old" in error.message


def test_a_json_line_is_not_a_protobuf_frame() -> None:
    with pytest.raises(ValueError):
        PROTOBUF_FORMAT.decode_event(JSON.event("ADDED", orjson.dumps(node("a", 7))))


def test_a_protobuf_objects_message_is_walked_once_for_its_meta_and_record_of_one_resource(
        monkeypatch: pytest.MonkeyPatch) -> None:
    item = pb.decode_envelope((Path(__file__).parents[1] / "routing/testdata/protobuf/pod.pb").read_bytes()).raw
    walks: list[tuple[str, str]] = []
    item_facts = pbi.item_facts

    def counted(data: bytes, group: str, resource: str) -> pbi.ItemFacts:
        walks.append((group, resource))
        return item_facts(data, group, resource)

    monkeypatch.setattr(pbi, "item_facts", counted)
    fmt = formats.ProtobufFormat()
    pods = CacheConfig(name="pods", resource="pods", role=PartitionRole.TENANT)
    codec = rvcodec.RVCodec(("tp1",), rvcodec.EpochTable((rvcodec.Epoch(1, ("tp1",), rvcodec.natural_slot_bits(1), (0,)),)))
    assert fmt.meta(pods, item) == ("default", "web-1", 205)
    record = fmt.record(pods, codec, 0, item, 205, api_version="v1", item_kind="Pod")
    assert walks == [("", "pods")] and record.fields["spec.restartPolicy"] == "Always"
    # the same bytes read for another resource's field set are walked again, with its own
    configmaps = CacheConfig(name="configmaps", resource="configmaps", role=PartitionRole.TENANT)
    fmt.meta(configmaps, item)
    record = fmt.record(pods, codec, 0, item, 205, api_version="v1", item_kind="Pod")
    assert walks[1:] == [("", "configmaps"), ("", "pods")] and record.fields["spec.restartPolicy"] == "Always"
