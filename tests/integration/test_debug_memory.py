"""`/debug/memory`: a replica's resident bytes, and where Python's bytes are allocated when the
operator turns tracing on (and what the C allocator holds, always) (PYTHONTRACEMALLOC=1), as `bench/fleet.py --trace-memory` reads it;
with `?census`, its Python objects by type when started with PARTITION_PROXY_CENSUS=1 (`bench/soak.py --census`)."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from hack.proxy_process import ProxyProcess
from proxy.census import CENSUS_ENV
from tests.federation import Kube


async def _memory(server: str, ssl: object, query: str = "") -> dict[str, object]:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{server}/debug/memory{query}", ssl=ssl) as r:
            assert r.status == 200, await r.text()
            body: dict[str, object] = await r.json()
            return body


async def test_memory_without_tracing_gives_resident_bytes_only(kube: Kube) -> None:
    body = await _memory(kube.proxy.server, kube.client_ssl())
    assert body["tracing"] is False and "sites" not in body
    assert isinstance(body["rss_bytes"], int) and body["rss_bytes"] > 10 * 2**20
    heap = body["malloc"]  # glibc here: what its allocator holds, in use and free
    assert isinstance(heap, dict) and 0 < heap["in_use_bytes"] <= heap["heap_bytes"] < body["rss_bytes"]
    trims = body["heap_trims"]  # proxy.allocator.trim_free_heap's turns so far and their CPU seconds
    assert isinstance(trims, dict) and trims["trims"] >= 0 and 0 <= trims["longest_seconds"] <= trims["seconds"]
    connections = body["partition_connections"]  # the reflectors' watches at least, each on a connection of its own
    assert isinstance(connections, dict) and 0 < connections["open"] <= connections["objects"]
    reads = connections["largest_read"]  # every open connection in one class of its largest read
    assert 0 < sum(reads[k] for k in ("<=4KiB", "<=16KiB", "<=64KiB", ">64KiB")) <= connections["objects"] and reads["recycled"] >= 0
    refused = await _memory(kube.proxy.server, kube.client_ssl(), "?census")  # not started with PARTITION_PROXY_CENSUS=1
    assert refused["census"] == {"error": "a census runs only in a process started with PARTITION_PROXY_CENSUS=1"}


async def test_memory_with_tracing_lists_the_largest_allocation_sites(kube: Kube, tmp_path: Path) -> None:
    proxy = ProxyProcess(kube.fed, tmp_path / "proxy", env={"PYTHONTRACEMALLOC": "1", CENSUS_ENV: "1"}).start(timeout=120)
    try:
        body = await _memory(proxy.server, kube.client_ssl())
        counted = await _memory(proxy.server, kube.client_ssl(), "?census")
    finally:
        proxy.stop()
    assert body["tracing"] is True
    sites = body["sites"]
    assert isinstance(sites, list) and sites
    sizes = [site["bytes"] for site in sites]
    assert sizes == sorted(sizes, reverse=True)
    assert all(site["site"].rsplit(":", 1)[1].isdigit() for site in sites)
    assert 0 < sum(sizes) <= body["traced_bytes"]  # type: ignore[operator]
    assert "census" not in body  # only when asked
    census = counted["census"]  # the proxy's objects by type, the largest first
    assert isinstance(census, dict) and census["objects"] > 10_000
    kinds = {row["type"]: row for row in census["types"]}
    assert kinds["builtins.dict"]["count"] > 1000 and "builtins.function" in kinds
