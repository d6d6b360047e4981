"""Memory per cached object: the proxy's watch cache of nodes vs the peer kube-apiserver.

Two proxies in front of tp1/rp1/rp2, both started before any node exists:
- "all": a nodes cache without selector;
- "selected": a nodes cache with `label_selector: bench-keep=yes`, carried by 1 node in 10.
Then N nodes (default 20,000 hollow) are created: N/2 on rp1, N/2 on rp2, all N on the peer rp3.

Reported, after the caches hold their objects and ~3 s of settling:
- per proxy: RSS growth (after - before), growth / cached objects, growth / cached compact JSON
  bytes (`bytes` of /debug/caches), and VmHWM (peak RSS);
- the peer's kube-apiserver (rp3): RSS growth for the same N nodes, per object, and its Go heap
  in use (`go_memstats_heap_inuse_bytes` of its /metrics) before/after;
- the "all" proxy's protobuf twin of its nodes cache, filled by one protobuf-first LIST as a
  fleet's first kubelet fills it: RSS growth over the JSON cache alone, per object and per
  cached protobuf byte;
- a "leases" proxy with the node Leases cache (the proxy's default second cache), started with
  the others: RSS growth for one kubelet Lease per node (N/2 on rp1, N/2 on rp2), then for its
  protobuf twin; the peer's growth for the same N Leases;
- a third proxy ("all, started after"), started once the nodes exist, so its cache fills from
  one LIST per partition instead of watch events: its RSS and peak, growth vs the baseline of
  the "all" proxy before nodes existed.

Run: `python -m bench.cache_memory [--nodes 20000] [--kind hollow|real]`.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import aiohttp

from bench.common import (
    BUILDERS,
    NODE_LEASES,
    PEER,
    Setup,
    close_sessions,
    post_objects,
    emit,
    fill_protobuf_twin,
    host_info,
    hwm_bytes,
    install_sigterm,
    log,
    mib,
    node_lease,
    node_leases_cache,
    node_names,
    nodes_cache,
    ratio,
    rss_bytes,
)

NAME = "cache_memory"
LEASES = "node-leases"  # the name of node_leases_cache()
SELECTOR = "bench-keep=yes"


def keeps(name: str, every: int) -> bool:
    """Whether node `name` (…-<index>) carries bench-keep=yes: one in `every`."""
    return int(name.rsplit("-", 1)[1]) % every == 0


async def heap_inuse(session: aiohttp.ClientSession, server: str) -> int | None:
    """go_memstats_heap_inuse_bytes of a kube-apiserver (None if not exposed)."""
    async with session.get(f"{server}/metrics") as resp:
        text = await resp.text()
    for line in text.splitlines():
        if line.startswith("go_memstats_heap_inuse_bytes "):
            return int(float(line.split()[1]))
    return None


def cache_figures(entry: dict[str, Any], growth: int, hwm: int) -> dict[str, Any]:
    """A cache's figures from its /debug/caches `entry` and the proxy's RSS `growth` (bytes)
    while it filled: objects, cached bytes, RSS growth in all, per object and per cached byte,
    and the proxy's peak RSS (`hwm` bytes)."""
    objects, cache_bytes = entry["objects"], entry["bytes"]
    return {
        "objects": objects,
        "cache_bytes": cache_bytes,
        "cache_bytes_per_object": round(cache_bytes / max(objects, 1)),
        "rss_growth_mib": mib(growth),
        "rss_growth_per_object_bytes": round(growth / max(objects, 1)),
        "rss_growth_per_cache_byte": round(growth / max(cache_bytes, 1), 3),
        "rss_peak_hwm_mib": mib(hwm),
    }


async def measure(setup: Setup, args: argparse.Namespace) -> dict[str, Any]:
    every = args.selected_every
    base = BUILDERS[args.kind]

    def builder(name: str) -> dict[str, Any]:
        return base(name, {"bench-keep": "yes"} if keeps(name, every) else None)

    sessions = setup.sessions()
    try:
        proxies = {"all": setup.proxies[0], "selected": setup.proxies[1]}
        pids = {k: setup.pid(p) for k, p in proxies.items()}
        peer_pid = setup.apiserver_pid(PEER)
        for p in proxies.values():
            await setup.wait_cached(sessions["proxy"], 0, proxy=p)
        await asyncio.sleep(args.settle)
        before = {k: rss_bytes(pid) for k, pid in pids.items()}
        peer_before, heap_before = rss_bytes(peer_pid), await heap_inuse(sessions[PEER], setup.server(PEER))
        log(f"before: proxies {({k: mib(v) for k, v in before.items()})} MiB, {PEER} {mib(peer_before)} MiB")

        took = await setup.populate(sessions, args.kind, 0, args.nodes, builder=builder)
        selected = sum(1 for i in range(args.nodes) if i % every == 0)
        caches = {
            "all": await setup.wait_cached(sessions["proxy"], args.nodes, proxy=proxies["all"]),
            "selected": await setup.wait_cached(sessions["proxy"], selected, proxy=proxies["selected"]),
        }
        await asyncio.sleep(args.settle)
        after = {k: rss_bytes(pid) for k, pid in pids.items()}
        peer_after, heap_after = rss_bytes(peer_pid), await heap_inuse(sessions[PEER], setup.server(PEER))
        log(f"after: proxies {({k: mib(v) for k, v in after.items()})} MiB, {PEER} {mib(peer_after)} MiB")

        out: dict[str, Any] = {"nodes": args.nodes, "node_kind": args.kind, "create_seconds": round(took, 1)}
        for k in proxies:
            out[f"proxy_{k}"] = {
                "label_selector": caches[k]["labelSelector"],
                "rss_before_mib": mib(before[k]),
                "rss_after_mib": mib(after[k]),
                **cache_figures(caches[k], after[k] - before[k], hwm_bytes(pids[k])),
            }
        peer_growth = peer_after - peer_before
        out["direct_apiserver"] = {
            "partition": PEER,
            "objects": args.nodes,
            "rss_before_mib": mib(peer_before),
            "rss_after_mib": mib(peer_after),
            "rss_growth_mib": mib(peer_growth),
            "rss_growth_per_object_bytes": round(peer_growth / args.nodes),
            "go_heap_inuse_before_mib": mib(heap_before) if heap_before is not None else None,
            "go_heap_inuse_after_mib": mib(heap_after) if heap_after is not None else None,
            "go_heap_inuse_growth_per_object_bytes": round((heap_after - heap_before) / args.nodes)
            if heap_before is not None and heap_after is not None
            else None,
        }
        out["ratio_rss_growth_per_object_proxy_all_over_direct"] = ratio(
            out["proxy_all"]["rss_growth_per_object_bytes"], out["direct_apiserver"]["rss_growth_per_object_bytes"]
        )
        out["ratio_rss_growth_selected_over_all"] = ratio(out["proxy_selected"]["rss_growth_mib"], out["proxy_all"]["rss_growth_mib"])

        # The "all" proxy's protobuf twin, filled as a fleet's first kubelet fills it (one
        # protobuf-first LIST): a second copy of every Node, enveloped protobuf.
        filled_s = await fill_protobuf_twin(sessions["proxy"], proxies["all"].server)
        twin = await setup.wait_cached(sessions["proxy"], args.nodes, proxy=proxies["all"], name="nodes-protobuf")
        await asyncio.sleep(args.settle)
        with_twin = rss_bytes(pids["all"])
        out["proxy_all_protobuf_twin"] = {
            "fill_seconds": round(filled_s, 1),
            "rss_after_mib": mib(with_twin),
            **cache_figures(twin, with_twin - after["all"], hwm_bytes(pids["all"])),
        }
        log(f"protobuf twin: {out['proxy_all_protobuf_twin']}")

        # A proxy started once the nodes exist: its cache fills from one LIST per partition.
        late = setup.start_proxy("proxy-late", caches=nodes_cache())
        late_cache = await setup.wait_cached(sessions["proxy"], args.nodes, proxy=late)
        await asyncio.sleep(args.settle)
        late_rss = rss_bytes(setup.pid(late))
        out["proxy_all_started_after"] = {
            "objects": late_cache["objects"],
            "rss_mib": mib(late_rss),
            "rss_peak_hwm_mib": mib(hwm_bytes(setup.pid(late))),
            "rss_growth_vs_empty_baseline_mib": mib(late_rss - before["all"]),
            "rss_growth_per_object_bytes": round((late_rss - before["all"]) / args.nodes),
        }
        log(f"late proxy: {out['proxy_all_started_after']}")
        late.stop()
        out["proxy_leases"] = await measure_leases(setup, sessions, args)
        return out
    finally:
        await close_sessions(sessions)


async def measure_leases(setup: Setup, sessions: dict[str, aiohttp.ClientSession], args: argparse.Namespace) -> dict[str, Any]:
    """The node Leases cache of the "leases" proxy (started with the others, before any Lease
    exists): RSS growth for one kubelet Lease per node (N/2 on rp1, N/2 on rp2, all N on the
    peer), then for its protobuf twin."""
    proxy = setup.proxies[2]
    pid, peer_pid = setup.pid(proxy), setup.apiserver_pid(PEER)
    await setup.wait_cached(sessions["proxy"], 0, proxy=proxy, name=LEASES)
    await asyncio.sleep(args.settle)
    before, peer_before = rss_bytes(pid), rss_bytes(peer_pid)
    names = node_names(args.kind, 0, args.nodes)
    deadline = time.monotonic() + 900
    await asyncio.gather(*(
        post_objects(sessions[p], setup.server(p), [n for n in names if p == PEER or n.startswith(f"{p}-")], node_lease,
                     deadline=deadline, path=NODE_LEASES)
        for p in ("rp1", "rp2", PEER)))
    cache = await setup.wait_cached(sessions["proxy"], args.nodes, proxy=proxy, name=LEASES)
    await asyncio.sleep(args.settle)
    after, peer_after, hwm = rss_bytes(pid), rss_bytes(peer_pid), hwm_bytes(pid)
    filled_s = await fill_protobuf_twin(sessions["proxy"], proxy.server, path=NODE_LEASES)
    twin = await setup.wait_cached(sessions["proxy"], args.nodes, proxy=proxy, name=f"{LEASES}-protobuf")
    await asyncio.sleep(args.settle)
    with_twin = rss_bytes(pid)
    out = {
        **cache_figures(cache, after - before, hwm),
        "rss_before_mib": mib(before),
        "peer_rss_growth_per_object_bytes": round((peer_after - peer_before) / args.nodes),
        "protobuf_twin": {"fill_seconds": round(filled_s, 1), **cache_figures(twin, with_twin - after, hwm_bytes(pid))},
    }
    log(f"node leases: {out}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=20000)
    ap.add_argument("--kind", choices=sorted(BUILDERS), default="hollow")
    ap.add_argument("--selected-every", type=int, default=10, help="one node in this many carries bench-keep=yes")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds before each RSS reading")
    args = ap.parse_args()
    install_sigterm()
    t0 = time.monotonic()
    out: dict[str, Any] = {
        "benchmark": NAME,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": host_info(),
        "params": vars(args),
        "peer": f"{PEER}: a kube-apiserver holding the same N nodes (its RSS growth for them)",
    }
    setup = Setup.start(NAME, caches=nodes_cache())
    try:
        setup.start_proxy("proxy-selected", caches=nodes_cache(SELECTOR))
        setup.start_proxy("proxy-leases", caches=node_leases_cache())
        out["result"] = asyncio.run(measure(setup, args))
    finally:
        setup.stop()
    out["total_seconds"] = round(time.monotonic() - t0, 1)
    emit(NAME, out)


if __name__ == "__main__":
    main()
