"""The cache set (proxy.cache.cache_set), without partitions (reflectors wait for a table that
never loads): a protobuf twin is filled at its first protobuf-first client, once, and never
before the set started; a new partition set rebases every cache and twin and starts the joined
partition's reflectors in filled caches only; stop cancels and awaits every reflector."""

from __future__ import annotations

import asyncio
from typing import Any

from config import parse_config
from config.models import ProxyConfig
from proxy.cache.cache_set import CacheSet
from routing import rv as rvcodec
from tests.config.test_load import _valid


class _Codecs:
    """One epoch per space (proxy.rv_epochs.ResourceVersions without a table)."""

    def codec(self, space: tuple[str, ...]) -> rvcodec.RVCodec:
        epoch = rvcodec.Epoch(1, space, rvcodec.natural_slot_bits(len(space)), (0,) * len(space))
        return rvcodec.RVCodec(space, rvcodec.EpochTable((epoch,)))


class _Client:
    """A partition client no reflector gets to call (the table is never ready)."""

    def __init__(self, name: str) -> None:
        self.name = name


def _config(*extra_partitions: str) -> ProxyConfig:
    doc = _valid()
    doc["partitions"] += [{"name": p, "role": "resource", "kubeconfig": f"/k/{p}"} for p in extra_partitions]
    doc["caches"] = [{"name": "nodes", "resource": "nodes", "role": "resource"}]
    return parse_config(doc)


def _reflectors() -> set[str]:
    return {t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("reflector:") and not t.done()}


def _clients(*names: str) -> dict[str, Any]:
    return {name: _Client(name) for name in names}


async def test_a_twin_is_filled_once_at_its_first_protobuf_first_client_and_not_before_the_set_starts() -> None:
    cache_set = CacheSet.from_config(_config(), codecs=_Codecs())
    [cache] = cache_set.caches
    twin = cache_set.protobuf_twin(0)
    assert twin is not None and twin.spec.name == "nodes-protobuf" and not twin.filling and not _reflectors()
    cache_set.start(_clients("rp1", "rp2"), ready=asyncio.Event())
    try:
        assert _reflectors() == {"reflector:nodes:rp1", "reflector:nodes:rp2"}
        assert cache_set.all_caches() == [cache]
        assert cache_set.protobuf_twin(0) is twin and cache_set.protobuf_twin(0) is twin
        assert twin.filling and cache_set.all_caches() == [cache, twin]
        assert _reflectors() == {f"reflector:{c}:{p}" for c in ("nodes", "nodes-protobuf") for p in ("rp1", "rp2")}
    finally:
        await cache_set.stop()
    assert not _reflectors()


async def test_a_joined_partition_gets_reflectors_in_filled_caches_and_a_slot_in_every_cache_and_twin() -> None:
    cache_set = CacheSet.from_config(_config(), codecs=_Codecs())
    clients = _clients("rp1", "rp2")
    cache_set.start(clients, ready=asyncio.Event())
    try:
        clients.update(_clients("rp3"))  # the app opens a joined partition's client before the rebase
        cache_set.rebase(_config("rp3"), _Codecs())
        assert [c.space for c in cache_set.caches] == [("rp1", "rp2", "rp3")]
        assert cache_set.policy_specs[0].codec.space == ("rp1", "rp2", "rp3")
        assert _reflectors() == {"reflector:nodes:rp1", "reflector:nodes:rp2", "reflector:nodes:rp3"}
        twin = cache_set.protobuf_twin(0)  # rebased while unfilled: filled over the new space
        assert twin is not None and twin.space == ("rp1", "rp2", "rp3")
        assert {r for r in _reflectors() if r.startswith("reflector:nodes-protobuf:")} == {
            "reflector:nodes-protobuf:rp1", "reflector:nodes-protobuf:rp2", "reflector:nodes-protobuf:rp3"}
        await cache_set.stop_reflectors(["rp3"])
        assert not {r for r in _reflectors() if r.endswith(":rp3")}
    finally:
        await cache_set.stop()
    assert not _reflectors()
