"""The watch cache and cache watchers, fed by hand (no partitions): bytes, RVs, fan-out,
relist differences, resuming and slow watchers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from config.models import CacheConfig, PartitionRole
from proxy.cache.cache_watcher import CacheWatcher
from proxy.cache.formats import PROTOBUF_FORMAT
from proxy.cache.watch_cache import WatchCache
from routing import protobuf as pb
from routing import rv as rvcodec
from routing.selectors import parse_field_selector, parse_label_selector



def codec(space: tuple[str, ...]) -> rvcodec.RVCodec:
    table = rvcodec.EpochTable((rvcodec.Epoch(1, space, rvcodec.natural_slot_bits(len(space)), (0,) * len(space)),))
    return rvcodec.RVCodec(space, table)


CODEC = codec(("rp1", "rp2"))


def decode(rv: str) -> tuple[int, ...]:
    return CODEC.decode(rv)


def node(name: str, rv: int, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": str(rv), "labels": labels or {}}
    meta.update(extra)
    return {"kind": "Node", "apiVersion": "v1", "metadata": meta, "spec": {}}


def make_cache(label_selector: str = "", history: int = 100, on_node: Callable[[str, str | None], None] | None = None) -> WatchCache:
    spec = CacheConfig(name="nodes", resource="nodes", role=PartitionRole.RESOURCE, label_selector=label_selector, history=history)
    cache = WatchCache(
        spec=spec,
        codec=CODEC,
        label_selector=parse_label_selector(label_selector),
        field_selector=parse_field_selector(""),
        on_node=on_node,
    )
    cache.replace("rp1", [node("a", 10)], 12, kind="NodeList", api_version="v1")
    cache.replace("rp2", [node("b", 20)], 25, kind="NodeList", api_version="v1")
    return cache


def watcher(cache: WatchCache, *, label: str = "", field: str = "", name: str = "", queue: int = 100) -> CacheWatcher:
    w = CacheWatcher(
        label_selector=parse_label_selector(label), field_selector=parse_field_selector(field), name=name, queue_size=queue
    )
    cache.add_watcher(w)
    return w


def drain(w: CacheWatcher) -> list[dict[str, Any]]:
    out = []
    for line in w.take():
        out.append(orjson.loads(line))
    return out


def test_list_from_cache_joins_stored_bytes_under_the_vector_rv() -> None:
    cache = make_cache()
    doc = orjson.loads(cache.list_bytes(cache.matching(parse_label_selector(""), parse_field_selector(""))))
    assert doc["kind"] == "NodeList" and doc["apiVersion"] == "v1"
    assert decode(doc["metadata"]["resourceVersion"]) == (12, 25)
    assert [i["metadata"]["name"] for i in doc["items"]] == ["a", "b"]
    assert all(i["kind"] == "Node" for i in doc["items"])


def test_list_items_get_kind_and_api_version_and_lose_managed_fields() -> None:
    spec = CacheConfig(name="nodes", resource="nodes", role=PartitionRole.RESOURCE)
    cache = WatchCache(
        spec=spec, codec=codec(("rp1",)), label_selector=parse_label_selector(""), field_selector=parse_field_selector("")
    )
    item = {
        "metadata": {
            "name": "a",
            "resourceVersion": "5",
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
        }
    }
    cache.replace("rp1", [item], 6, kind="NodeList", api_version="v1")
    stored = orjson.loads(cache.objects[(0, "", "a")].raw)
    assert stored["kind"] == "Node" and stored["apiVersion"] == "v1"
    assert "managedFields" not in stored["metadata"] and "annotations" not in stored["metadata"]


def test_one_event_is_encoded_once_and_the_same_bytes_reach_every_watcher() -> None:
    cache = make_cache()
    watchers = [watcher(cache) for _ in range(3)] + [watcher(cache, name="a")]
    cache.apply("rp1", "MODIFIED", node("a", 30, {"x": "1"}))
    lines = [w.take()[0] for w in watchers]
    assert all(line is lines[0] for line in lines)
    event = orjson.loads(lines[0])
    assert event["type"] == "MODIFIED"
    assert decode(event["object"]["metadata"]["resourceVersion"]) == (30, 25)


def test_watch_by_name_only_gets_its_own_object() -> None:
    cache = make_cache()
    w = watcher(cache, field="metadata.name=b", name="b")
    cache.apply("rp1", "MODIFIED", node("a", 30))
    cache.apply("rp2", "MODIFIED", node("b", 31))
    assert [e["object"]["metadata"]["name"] for e in drain(w)] == ["b"]


def test_object_leaving_a_watchers_selector_is_deleted_for_it_and_entering_is_added() -> None:
    cache = make_cache()
    w = watcher(cache, label="tier=gold")
    cache.apply("rp1", "MODIFIED", node("a", 30, {"tier": "gold"}))
    cache.apply("rp1", "MODIFIED", node("a", 31, {"tier": "silver"}))
    assert [e["type"] for e in drain(w)] == ["ADDED", "DELETED"]


def test_object_leaving_a_watchers_selector_is_deleted_with_its_previous_state_at_the_events_rv() -> None:
    # kube-apiserver's cacher sends the object as it was when it last matched, with the event's
    # resourceVersion (cacheWatcher.convertToWatchEvent). kwok filters DELETED events by the
    # deleted object's labels: given the new object it never let go of an unlabelled node.
    cache = make_cache()
    w = watcher(cache, label="tier=gold")
    cache.apply("rp1", "MODIFIED", node("a", 30, {"tier": "gold"}))
    cache.apply("rp1", "MODIFIED", node("a", 31, {"tier": "silver"}))
    added, deleted = drain(w)
    assert added["type"] == "ADDED" and decode(added["object"]["metadata"]["resourceVersion"]) == (30, 25)
    assert deleted["type"] == "DELETED"
    assert deleted["object"]["metadata"]["labels"] == {"tier": "gold"}
    assert decode(deleted["object"]["metadata"]["resourceVersion"]) == (31, 25)


def test_object_leaving_the_caches_selector_is_deleted_with_its_previous_state() -> None:
    cache = make_cache(label_selector="kwok=yes")
    cache.apply("rp1", "ADDED", node("k", 30, {"kwok": "yes"}))
    w = watcher(cache, label="kwok=yes")
    cache.apply("rp1", "MODIFIED", node("k", 31, {}))
    (deleted,) = drain(w)
    assert deleted["type"] == "DELETED"
    assert deleted["object"]["metadata"]["labels"] == {"kwok": "yes"}
    assert decode(deleted["object"]["metadata"]["resourceVersion"]) == (31, 25)
    assert (0, "", "k") not in cache.objects


def test_relist_turns_the_difference_into_synthetic_events_in_rv_order() -> None:
    cache = make_cache()
    cache.replace("rp1", [node("a", 10), node("c", 14)], 16, kind="NodeList", api_version="v1")  # relist: no change to a
    w = watcher(cache)
    cache.replace("rp1", [node("c", 40, {"v": "2"}), node("d", 35)], 50, kind="NodeList", api_version="v1")
    events = drain(w)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "d"), ("MODIFIED", "c"), ("DELETED", "a")]
    stamps = [e["object"]["metadata"]["resourceVersion"] for e in events]
    assert stamps == sorted(stamps, key=lambda s: (len(s), s))
    assert cache.vector == (50, 25)
    assert cache.relists == (2, 0)


def test_watch_resumes_from_a_vector_the_ring_still_holds_and_not_from_an_older_one() -> None:
    cache = make_cache(history=3)
    start = tuple(cache.vector)
    assert cache.resumable(start)
    for rv in (30, 31, 32):
        cache.apply("rp1", "MODIFIED", node("a", rv))
    assert [e.native_rv for e in cache.events_after(start)] == [30, 31, 32]
    cache.apply("rp1", "MODIFIED", node("a", 33))  # evicts 30: rp1's floor is now 30
    assert not cache.resumable(start)
    assert cache.resumable((30, 25))
    assert [e.native_rv for e in cache.events_after((30, 25))] == [31, 32, 33]


def test_a_watcher_that_falls_behind_is_terminated_with_410_and_others_keep_going() -> None:
    cache = make_cache()
    slow, fast = watcher(cache, queue=2), watcher(cache, queue=100)
    for rv in range(30, 35):
        cache.apply("rp1", "MODIFIED", node("a", rv))
    slow_events = drain(slow)
    assert len(slow_events) == 1 and slow_events[0]["type"] == "ERROR"
    assert (slow_events[0]["object"]["code"], slow_events[0]["object"]["reason"]) == (410, "Expired")
    assert len(drain(fast)) == 5


def test_bookmarks_go_to_watchers_that_asked_once_the_vector_moves() -> None:
    cache = make_cache()
    asked = CacheWatcher(label_selector=parse_label_selector(""), field_selector=parse_field_selector(""), bookmarks=True)
    silent = watcher(cache)
    cache.add_watcher(asked)
    cache.bookmark("rp2", 60)
    cache.bookmark("rp2", 60)  # no move, no second bookmark
    events = drain(asked)
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert decode(events[0]["object"]["metadata"]["resourceVersion"]) == (12, 60)
    assert drain(silent) == []


def test_cache_selector_keeps_only_selected_objects_and_reports_their_bytes() -> None:
    cache = make_cache(label_selector="keep=yes")
    assert cache.objects == {}
    cache.apply("rp1", "ADDED", node("k", 30, {"keep": "yes"}))
    cache.apply("rp1", "ADDED", node("n", 31, {"keep": "no"}))
    assert [k[2] for k in cache.objects] == ["k"]
    assert cache.bytes_total == sum(len(o.raw) for o in cache.objects.values())
    cache.apply("rp1", "MODIFIED", node("k", 32, {"keep": "no"}))
    assert cache.objects == {} and cache.bytes_total == 0


@pytest.mark.parametrize("kind", ["ADDED", "MODIFIED"])
def test_node_index_follows_the_node_cache(kind: str) -> None:
    index: dict[str, str] = {}
    cache = make_cache(on_node=lambda name, partition: index.__setitem__(name, partition) if partition else index.pop(name, None))
    index.clear()  # the initial LISTs
    cache.apply("rp2", kind, node("z", 40))
    assert index == {"z": "rp2"}
    cache.apply("rp2", "DELETED", node("z", 41))
    assert index == {}


def test_cached_objects_carry_object_form_rvs_and_events_the_vector_after_them() -> None:
    cache = make_cache()
    w = watcher(cache)
    cache.apply("rp2", "MODIFIED", node("b", 40))

    stored = orjson.loads(cache.objects[(1, "", "b")].raw)
    [event] = drain(w)
    assert stored["metadata"]["resourceVersion"] == rvcodec.object_rv("rp2", 40)  # never expires
    assert decode(event["object"]["metadata"]["resourceVersion"]) == (12, 40)
    assert rvcodec.is_valid_rv(event["object"]["metadata"]["resourceVersion"])


def test_a_position_no_epoch_fits_ends_every_watcher_with_410_and_empties_the_ring() -> None:
    space = ("rp1", "rp2")
    narrow = rvcodec.RVCodec(space, rvcodec.EpochTable((rvcodec.Epoch(1, space, 8, (0, 0)),)))  # natives up to 254
    spec = CacheConfig(name="nodes", resource="nodes", role=PartitionRole.RESOURCE)
    cache = WatchCache(spec=spec, codec=narrow, label_selector=parse_label_selector(""), field_selector=parse_field_selector(""))
    cache.replace("rp1", [node("a", 10)], 12, kind="NodeList", api_version="v1")
    cache.replace("rp2", [node("b", 20)], 25, kind="NodeList", api_version="v1")
    w = watcher(cache)

    cache.apply("rp1", "MODIFIED", node("a", 300))

    [error] = drain(w)
    assert error["type"] == "ERROR" and error["object"]["code"] == 410 and error["object"]["reason"] == "Expired"
    assert cache.ring_size == 0 and cache.rv == ""
    assert orjson.loads(cache.objects[(0, "", "a")].raw)["metadata"]["resourceVersion"] == rvcodec.object_rv("rp1", 300)


def test_an_attached_watcher_pushes_each_line_to_its_sink_as_the_cache_dispatches_it() -> None:
    cache = make_cache()
    w = watcher(cache, queue=2)
    cache.apply("rp1", "MODIFIED", node("a", 13))
    pushed: list[bytes] = []
    queued = w.attach(pushed.append)
    assert [orjson.loads(line)["object"]["metadata"]["name"] for line in queued] == ["a"] and w.pending == 0
    for rv in range(14, 20):  # more than the queue holds: a sink bounds what it buffers itself
        cache.apply("rp1", "MODIFIED", node("a", rv))
    assert len(pushed) == 6 and not w.terminated
    w.finish()
    assert pushed[-1] == b"" and w.terminated


def test_one_name_is_looked_up_in_each_partition_and_still_filtered_by_the_selectors() -> None:
    cache = make_cache()
    cache.apply("rp1", "ADDED", node("b", 30, {"zone": "z1"}))  # the same name in both partitions
    every = (parse_label_selector(""), parse_field_selector(""))
    assert [(o.slot, o.name) for o in cache.matching(*every, name="b")] == [(0, "b"), (1, "b")]
    assert [(o.slot, o.name) for o in cache.matching(*every, name="b", slot=1)] == [(1, "b")]
    assert cache.matching(*every, name="missing") == []
    zoned = cache.matching(parse_label_selector("zone=z1"), parse_field_selector("metadata.name=b"), name="b")
    assert [(o.slot, o.name) for o in zoned] == [(0, "b")]


def test_one_name_across_namespaces_is_searched_for() -> None:
    spec = CacheConfig(name="pods", resource="pods", role=PartitionRole.TENANT)
    cache = WatchCache(spec=spec, codec=CODEC, label_selector=parse_label_selector(""), field_selector=parse_field_selector(""))
    pods = [{"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "namespace": ns, "resourceVersion": "5"}, "spec": {}} for ns in ("a", "b")]
    cache.replace("rp1", pods, 6, kind="PodList", api_version="v1")
    every = (parse_label_selector(""), parse_field_selector(""))
    assert [(o.namespace, o.name) for o in cache.matching(*every, name="p")] == [("a", "p"), ("b", "p")]
    assert [(o.namespace, o.name) for o in cache.matching(*every, "b", name="p")] == [("b", "p")]


# -- the protobuf twin (proxy.cache.formats.ProtobufFormat), on kube-apiserver's own bytes --------


def _pb_node(name: str, rv: int, labels: dict[str, str]) -> bytes:
    """A Node message as kube-apiserver writes it: ObjectMeta (name 1, resourceVersion 6, labels
    11), an empty NodeSpec (2)."""
    meta = pb._ld(1, name.encode()) + pb._ld(6, str(rv).encode())
    meta += b"".join(pb._ld(11, pb._ld(1, k.encode()) + pb._ld(2, v.encode())) for k, v in sorted(labels.items()))
    return pb._ld(1, meta) + pb._ld(2, b"")


def _frames(lines: list[bytes]) -> list[pb.WatchEvent]:
    return [pb.decode_watch_event(f) for f in pb.FrameReader().feed(b"".join(lines))]


def make_protobuf_cache() -> WatchCache:
    spec = CacheConfig(name="nodes-protobuf", resource="nodes", role=PartitionRole.RESOURCE)
    cache = WatchCache(spec=spec, codec=CODEC, label_selector=parse_label_selector(""),
                       field_selector=parse_field_selector(""), format=PROTOBUF_FORMAT)
    cache.replace("rp1", [_pb_node("a", 10, {"zone": "x"})], 12, kind="NodeList", api_version="v1")
    cache.replace("rp2", [_pb_node("b", 20, {})], 25, kind="NodeList", api_version="v1")
    return cache


def test_a_protobuf_cache_lists_enveloped_nodes_with_proxy_rvs_under_the_vector_rv() -> None:
    cache = make_protobuf_cache()
    env, meta, items = pb.list_items(cache.list_bytes(cache.matching(parse_label_selector(""), parse_field_selector(""))))
    assert (env.api_version, env.kind) == ("v1", "NodeList")
    assert decode(pb.list_meta_rv(meta)) == (12, 25)
    assert [pb.item_meta(i).name for i in items] == ["a", "b"]
    assert [decode(pb.item_meta(i).resource_version) for i in items] == [(10, 0), (0, 20)]
    got = pb.decode_envelope(cache.get("", "a") or b"")
    assert (got.api_version, got.kind) == ("v1", "Node")
    assert cache.matching(parse_label_selector("zone=x"), parse_field_selector("spec.unschedulable=false"))[0].name == "a"


def test_a_protobuf_cache_sends_events_bookmarks_and_410_as_protobuf_frames() -> None:
    cache = make_protobuf_cache()
    w = CacheWatcher(label_selector=parse_label_selector("zone=x"), field_selector=parse_field_selector(""),
                     bookmarks=True, format=PROTOBUF_FORMAT)
    cache.add_watcher(w)
    cache.apply("rp1", "MODIFIED", _pb_node("a", 30, {"zone": "y"}))  # leaves the selector
    cache.apply("rp2", "MODIFIED", _pb_node("b", 31, {"zone": "x"}))  # enters it
    cache.bookmark("rp1", 40)
    deleted, added, bookmark = _frames(w.take())
    assert (deleted.type, pb.object_item_meta(deleted.object).name) == ("DELETED", "a")
    assert decode(pb.object_rv(deleted.object)) == (30, 25)  # the event's position
    assert (added.type, pb.object_item_meta(added.object).name) == ("ADDED", "b")
    assert bookmark.type == "BOOKMARK" and decode(pb.object_rv(bookmark.object)) == (40, 31)
    w.terminate("too old")
    [error] = _frames(w.take())
    assert error.type == "ERROR" and pb.status_fields(error.object).code == 410


def test_a_watch_resumed_from_another_workers_rv_gets_rvs_that_keep_growing() -> None:
    """Two workers' caches see rp1's and rp2's events interleaved otherwise. The client's RV
    came from the worker that saw rp1 at 30 before rp2 at 40: (30, 25). Here rp2 came first,
    so its event's own stamp (12, 40) encodes below (30, 25) (slot 0 is most significant); it
    is replayed at (30, 40), and a resume from that position needs nothing it skipped. Seen as
    one rv_regressions in the hour's soak (replica B's nodes watcher, after a restart)."""
    for cache, obj in ((make_cache(), node), (make_protobuf_cache(), lambda name, rv: _pb_node(name, rv, {}))):
        cache.apply("rp2", "MODIFIED", obj("b", 40))
        cache.apply("rp1", "MODIFIED", obj("a", 30))
        elsewhere = (30, 25)
        assert cache.resumable(elsewhere)
        [event] = cache.events_after(elsewhere)
        assert (event.obj.name, event.native_rv) == ("b", 40)
        assert decode(event.stamp) == (30, 40)
        assert rvcodec.compare(event.stamp, CODEC.encode(elsewhere)) > 0
        w = watcher(cache)
        w.offer(event)
        [line] = w.take()
        assert CODEC.encode((30, 40)).encode() in line  # the line carries the merged RV too
        assert [e.stamp for e in cache.events_after((12, 25))] == [CODEC.encode((12, 40)), CODEC.encode((30, 40))]  # this worker's own
