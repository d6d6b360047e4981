"""The trigger index of a pods watch cache (a kubelet's `spec.nodeName=<node>` list and watch):
fed random pod histories, an indexed cache watcher gets exactly the lines an unindexed one with
the same selector gets, and an indexed list equals a full scan. Pure: no partitions."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from config.models import CacheConfig, PartitionRole
from proxy.cache.cache_watcher import CacheWatcher
from proxy.cache.watch_cache import WatchCache
from routing import rv as rvcodec
from routing.selectors import parse_field_selector, parse_label_selector, trigger_value

SPACE = ("tp1", "tp2")
TABLE = rvcodec.EpochTable((rvcodec.Epoch(1, SPACE, rvcodec.natural_slot_bits(2), (0, 0)),))
NODES = ("", "n1", "n2")  # "" is an unscheduled pod
EVERY = parse_label_selector("")


def pod(name: str, rv: int, node: str) -> dict[str, Any]:
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)},
            "spec": {"nodeName": node} if node else {}}


def pods_cache() -> WatchCache:
    spec = CacheConfig(name="pods", resource="pods", role=PartitionRole.TENANT)
    cache = WatchCache(spec=spec, codec=rvcodec.RVCodec(SPACE, TABLE), label_selector=EVERY,
                       field_selector=parse_field_selector(""))
    for partition in SPACE:
        cache.replace(partition, [], 1, kind="PodList", api_version="v1")
    return cache


def pair(cache: WatchCache, selector: str) -> tuple[CacheWatcher, CacheWatcher]:
    """(indexed, reference): the same selector, the second kept out of the value index."""
    field = parse_field_selector(selector)
    indexed = CacheWatcher(label_selector=EVERY, field_selector=field, trigger=trigger_value(cache.trigger_field, field))
    reference = CacheWatcher(label_selector=EVERY, field_selector=field)
    cache.add_watcher(indexed)
    cache.add_watcher(reference)
    return indexed, reference


# one step: (partition slot, pod name, node or None for a deletion)
STEPS = st.lists(st.tuples(st.integers(0, 1), st.sampled_from(("a", "b", "c")), st.sampled_from((*NODES, None))),
                 max_size=40)


@settings(max_examples=300, deadline=None)
@given(STEPS)
def test_indexed_watchers_and_lists_see_what_a_full_scan_sees(steps: list[tuple[int, str, str | None]]) -> None:
    cache = pods_cache()
    assert cache.trigger_field == "spec.nodeName"
    selectors = ["spec.nodeName=n1", "spec.nodeName=", "spec.nodeName=n2,metadata.name=b", "spec.nodeName!=n1"]
    watchers = [pair(cache, s) for s in selectors]
    held: dict[tuple[int, str], str] = {}
    rv = 1
    for slot, name, node in steps:
        rv += 1
        if node is None:
            if (slot, name) in held:
                cache.apply(SPACE[slot], "DELETED", pod(name, rv, held.pop((slot, name))))
            continue
        cache.apply(SPACE[slot], "MODIFIED" if (slot, name) in held else "ADDED", pod(name, rv, node))
        held[(slot, name)] = node
    for indexed, reference in watchers:
        assert indexed.take() == reference.take()
    for node in NODES:
        field = parse_field_selector(f"spec.nodeName={node}")
        got = [(o.slot, o.name) for o in cache.matching(EVERY, field)]
        assert got == sorted((slot, name) for (slot, name), n in held.items() if n == node)


def test_a_watcher_of_one_node_is_offered_only_its_node_s_pods() -> None:
    cache = pods_cache()
    offered: list[str] = []

    class Counting(CacheWatcher):
        def offer(self, event: Any) -> None:
            offered.append(event.obj.name)
            super().offer(event)

    field = parse_field_selector("spec.nodeName=n1")
    watcher = Counting(label_selector=EVERY, field_selector=field, trigger="n1")
    cache.add_watcher(watcher)
    cache.apply("tp1", "ADDED", pod("elsewhere", 2, "n2"))
    cache.apply("tp1", "ADDED", pod("mine", 3, "n1"))
    cache.apply("tp2", "MODIFIED", pod("elsewhere", 4, "n2"))
    cache.apply("tp1", "MODIFIED", pod("mine", 5, "n2"))  # leaves n1: told as DELETED
    assert offered == ["mine", "mine"]
    types = [orjson.loads(line)["type"] for line in watcher.take()]
    assert types == ["ADDED", "DELETED"]
    assert cache.watcher_count == 1
    cache.remove_watcher(watcher)
    assert cache.watcher_count == 0
