"""The watch cache when the partition set changes (fed by hand, no partitions): a partition
that joins reaches open watchers as ADDED events and RVs issued before it joined resume; one
that retires leaves as DELETED events, replayed to a client resuming from before."""

from __future__ import annotations

from typing import Any

import orjson

from config.models import CacheConfig, PartitionRole
from proxy.cache.watch_cache import WatchCache
from routing import rv as rvcodec
from routing.selectors import parse_field_selector, parse_label_selector
from tests.proxy.test_watch_cache import drain, node, watcher

OLD = ("rp1", "rp2")
NEW = ("rp1", "rp2", "rp3")
TABLE = rvcodec.EpochTable((
    rvcodec.Epoch(1, OLD, rvcodec.natural_slot_bits(2), (0, 0)),
    rvcodec.Epoch(2, NEW, rvcodec.natural_slot_bits(3), (0, 0, 0)),
))


def cache_over(codec: rvcodec.RVCodec) -> WatchCache:
    spec = CacheConfig(name="nodes", resource="nodes", role=PartitionRole.RESOURCE, history=100)
    cache = WatchCache(spec=spec, codec=codec, label_selector=parse_label_selector(""), field_selector=parse_field_selector(""))
    cache.replace("rp1", [node("a", 10)], 12, kind="NodeList", api_version="v1")
    cache.replace("rp2", [node("b", 20)], 25, kind="NodeList", api_version="v1")
    return cache


def events(lines: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"]["name"]) for e in lines]


def test_a_joining_partition_reaches_open_watchers_as_added_events_in_rv_order() -> None:
    cache = cache_over(rvcodec.RVCodec(OLD, TABLE))
    before = cache.rv
    w = watcher(cache)
    joined = cache.rebase(rvcodec.RVCodec(NEW, TABLE))
    assert joined == ("rp3",)
    assert cache.is_synced and cache.rv  # the cache goes on serving while rp3 is listed
    cache.replace("rp3", [node("d", 40), node("c", 31)], 45, kind="NodeList", api_version="v1")
    got = drain(w)
    assert events(got) == [("ADDED", "c"), ("ADDED", "d")]
    stamps = [e["object"]["metadata"]["resourceVersion"] for e in got]
    assert rvcodec.compare(before, stamps[0]) < 0 and rvcodec.compare(stamps[0], stamps[1]) < 0
    codec = rvcodec.RVCodec(NEW, TABLE)
    assert codec.decode(cache.rv) == (12, 25, 45)
    assert cache.relists == (0, 0, 0)
    # An RV issued before rp3 joined reads "nothing seen of rp3" and resumes from the ring.
    vector = codec.decode(before)
    assert vector == (12, 25, 0)
    assert cache.resumable(vector)
    assert [e.obj.name for e in cache.events_after(vector)] == ["c", "d"]


def test_a_retired_partition_leaves_as_deleted_events_replayed_to_a_client_from_before() -> None:
    cache = cache_over(rvcodec.RVCodec(OLD, TABLE))
    cache.apply("rp2", "ADDED", node("e", 26))
    lived = cache.rv
    w = watcher(cache)
    cache.rebase(rvcodec.RVCodec(OLD, TABLE, retired=("rp2",)))
    assert events(drain(w)) == [("DELETED", "b"), ("DELETED", "e")]
    assert [o.name for o in cache.objects.values()] == ["a"]
    assert cache.is_synced and cache.rv
    codec = rvcodec.RVCodec(OLD, TABLE, retired=("rp2",))
    vector = codec.decode(lived)
    assert cache.resumable(vector)
    assert [(e.type, e.obj.name) for e in cache.events_after(vector)] == [("DELETED", "b"), ("DELETED", "e")]
    assert cache.events_after(codec.decode(cache.rv)) == []
    # rp1 goes on as before; the retired field no longer moves.
    cache.apply("rp1", "MODIFIED", node("a", 13))
    assert codec.decode(cache.rv) == (13, 27)


def test_slots_are_append_only() -> None:
    cache = cache_over(rvcodec.RVCodec(OLD, TABLE))
    table = rvcodec.EpochTable((rvcodec.Epoch(1, ("rp2", "rp1"), 52, (0, 0)),))
    try:
        cache.rebase(rvcodec.RVCodec(("rp2", "rp1"), table))
    except ValueError as exc:
        assert "append-only" in str(exc)
    else:
        raise AssertionError("a reordered space was accepted")
    assert orjson.loads(cache.list_bytes(list(cache.objects.values())))["items"]


def test_an_empty_cache_filled_after_a_partition_joined_waits_for_every_partitions_first_list() -> None:
    """A protobuf twin is filled at its first client, maybe after partitions joined: none of its
    partitions was served yet, so none may be missing from what it serves."""
    spec = CacheConfig(name="nodes-protobuf", resource="nodes", role=PartitionRole.RESOURCE, history=100)
    cache = WatchCache(spec=spec, codec=rvcodec.RVCodec(OLD, TABLE), label_selector=parse_label_selector(""),
                       field_selector=parse_field_selector(""))
    assert cache.rebase(rvcodec.RVCodec(NEW, TABLE)) == ("rp3",)
    cache.start_filling()
    cache.replace("rp1", [node("a", 10)], 12, kind="NodeList", api_version="v1")
    cache.replace("rp2", [node("b", 20)], 25, kind="NodeList", api_version="v1")
    assert not cache.is_synced and not cache.rv
    cache.replace("rp3", [node("c", 31)], 45, kind="NodeList", api_version="v1")
    assert cache.is_synced and rvcodec.RVCodec(NEW, TABLE).decode(cache.rv) == (12, 25, 45)
    assert cache.relists == (0, 0, 0)
