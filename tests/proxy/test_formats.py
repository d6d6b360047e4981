"""What a reflector reads, decoded by the cache's format (proxy.cache.formats): a LIST page and
each kind of watch event, in JSON and in protobuf, round-tripped through the bytes the same
format writes (kube-apiserver's own protobuf bytes: tests/proxy/test_watch_cache.py)."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from proxy.cache.formats import JSON, PROTOBUF_FORMAT, ObjectFormat
from proxy.cache.watch_cache import WatchCache
from routing import protobuf as pb
from routing.selectors import parse_field_selector, parse_label_selector
from tests.proxy.test_watch_cache import _pb_node, make_cache, make_protobuf_cache, node

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
    assert [cache.format.meta(item)[1] for item in page.items] == ["a", "b"]


@pytest.mark.parametrize(("fmt", "obj"), [(JSON, orjson.dumps(node("a", 7))), (PROTOBUF_FORMAT, None)], ids=["json", "protobuf"])
def test_watch_events_decode_to_type_object_bookmark_rv_and_error_code(fmt: ObjectFormat, obj: bytes | None) -> None:
    raw = obj if obj is not None else pb.encode_envelope(pb.Envelope(api_version="v1", kind="Node", raw=_pb_node("a", 7, {})))
    modified = fmt.decode_event(_payload(fmt, fmt.event("MODIFIED", raw)))
    assert modified.type == "MODIFIED" and fmt.meta(modified.object)[1:] == ("a", 7)
    bookmark = fmt.decode_event(_payload(fmt, fmt.bookmark("v1", "Node", "42")))
    assert (bookmark.type, bookmark.resource_version) == ("BOOKMARK", "42")
    error = fmt.decode_event(_payload(fmt, fmt.expired("too old")))
    assert (error.type, error.code) == ("ERROR", 410) and "too old" in error.message


def test_a_json_line_is_not_a_protobuf_frame() -> None:
    with pytest.raises(ValueError):
        PROTOBUF_FORMAT.decode_event(JSON.event("ADDED", orjson.dumps(node("a", 7))))
