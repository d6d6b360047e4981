"""LIST of all nodes from the proxy's watch cache vs the same LIST from the peer kube-apiserver.

Proxy: `GET {proxy}/api/v1/nodes?resourceVersion=0` (the union of rp1 + rp2, joined from the
cached bytes). Peer: `GET {rp3}/api/v1/nodes?resourceVersion=0` (served from rp3's watch cache).
Both hold the same N nodes.

Per case (node kind x N):
- the set of node names of both answers is compared once;
- `--lists` LISTs per side after `--warmup`, interleaved proxy/peer (alternating who goes first),
  each timed until the whole body is read: median, p99 (nearest rank) and ratio proxy/peer;
- CPU seconds per LIST of the proxy process vs the peer's kube-apiserver (delta / count);
- `--concurrency` concurrent LISTs repeated for `--concurrent-seconds` per side, one side at a
  time, RSS sampled every 50 ms: peak RSS growth (peak - before), LISTs/s, CPU per LIST.

Run: `python -m bench.list_nodes [--sizes 5000,20000] [--real-sizes 5000] [--nodes N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import aiohttp
import orjson

from bench.common import (
    PEER,
    RssSampler,
    Setup,
    close_sessions,
    cpu_seconds,
    emit,
    host_info,
    install_sigterm,
    log,
    mib,
    ratio,
    rss_bytes,
    summary_ms,
)

NAME = "list_nodes"
# seconds; bound of one LIST (the largest, 20,000 real-size nodes, is ~0.4 GB of JSON)
LIST_TIMEOUT = 120.0


async def timed_list(session: aiohttp.ClientSession, url: str) -> tuple[float, int]:
    """(seconds until the whole body is read, body bytes) of one LIST with RV=0."""
    t0 = time.perf_counter()
    async with session.get(url, params={"resourceVersion": "0"}, timeout=aiohttp.ClientTimeout(total=LIST_TIMEOUT)) as resp:
        if resp.status != 200:
            raise RuntimeError(f"LIST {url}: {resp.status} {(await resp.read())[:200]!r}")
        n = 0
        async for chunk in resp.content.iter_any():
            n += len(chunk)
    return time.perf_counter() - t0, n


async def names_of(session: aiohttp.ClientSession, url: str) -> set[str]:
    async with session.get(url, params={"resourceVersion": "0"}, timeout=aiohttp.ClientTimeout(total=LIST_TIMEOUT)) as resp:
        doc = orjson.loads(await resp.read())
    return {item["metadata"]["name"] for item in doc["items"]}


async def concurrent_lists(
    session: aiohttp.ClientSession, url: str, pid: int, *, concurrency: int, seconds: float, max_lists: int
) -> dict[str, Any]:
    """`concurrency` workers LIST in a loop for `seconds` (at most `max_lists` in all) while
    the RSS of `pid` is sampled; returns peak growth, throughput and CPU per LIST."""
    await asyncio.sleep(1.0)
    before = rss_bytes(pid)
    cpu0 = cpu_seconds(pid)
    done = 0
    stop_at = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done
        while time.monotonic() < stop_at and done < max_lists:
            await timed_list(session, url)
            done += 1

    t0 = time.monotonic()
    with RssSampler([pid]) as sampler:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - t0
    cpu = cpu_seconds(pid) - cpu0
    return {
        "rss_before_mib": mib(before),
        "rss_peak_mib": mib(sampler.peak[pid]),
        "rss_peak_growth_mib": mib(sampler.peak[pid] - before),
        "rss_samples": sampler.samples,
        "lists": done,
        "seconds": round(elapsed, 2),
        "lists_per_s": round(done / elapsed, 2),
        "per_list_cpu_s": round(cpu / max(done, 1), 4),
        "rss_after_mib": mib(rss_bytes(pid)),
    }


async def measure_case(setup: Setup, sessions: dict[str, aiohttp.ClientSession], kind: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    proxy_url = f"{setup.proxy.server}/api/v1/nodes"
    peer_url = f"{setup.server(PEER)}/api/v1/nodes"
    sides = {
        "proxy": (sessions["proxy"], proxy_url, setup.pid(setup.proxy)),
        "direct": (sessions[PEER], peer_url, setup.apiserver_pid(PEER)),
    }
    case: dict[str, Any] = {"case": f"{kind}-{n}", "node_kind": kind, "nodes": n}

    proxy_names, peer_names = await asyncio.gather(names_of(sessions["proxy"], proxy_url), names_of(sessions[PEER], peer_url))
    case["same_names"] = proxy_names == peer_names
    case["names_proxy"], case["names_direct"] = len(proxy_names), len(peer_names)
    if not case["same_names"]:
        log(f"WARNING: names differ: proxy-only {len(proxy_names - peer_names)}, direct-only {len(peer_names - proxy_names)}")

    # Sequential LISTs, interleaved so both sides see the same background load.
    for _ in range(args.warmup):
        for side in sides.values():
            await timed_list(side[0], side[1])
    latencies: dict[str, list[float]] = {s: [] for s in sides}
    body: dict[str, int] = {}
    cpu0 = {s: cpu_seconds(v[2]) for s, v in sides.items()}
    for i in range(args.lists):
        order = list(sides) if i % 2 == 0 else list(reversed(sides))
        for s in order:
            seconds, body[s] = await timed_list(sides[s][0], sides[s][1])
            latencies[s].append(seconds)
    cpu = {s: cpu_seconds(v[2]) - cpu0[s] for s, v in sides.items()}
    for s in sides:
        case[s] = {
            "pid": sides[s][2],
            "body_bytes": body[s],
            "latency": summary_ms(latencies[s]),
            "per_list_cpu_s": round(cpu[s] / args.lists, 4),
        }
    p, d = case["proxy"], case["direct"]
    case["ratio_median_proxy_over_direct"] = ratio(p["latency"]["median_ms"], d["latency"]["median_ms"])
    case["ratio_p99_proxy_over_direct"] = ratio(p["latency"]["p99_ms"], d["latency"]["p99_ms"])
    case["ratio_cpu_per_list_proxy_over_direct"] = ratio(p["per_list_cpu_s"], d["per_list_cpu_s"])
    log(f"{case['case']}: median proxy {p['latency']['median_ms']} ms direct {d['latency']['median_ms']} ms; "
        f"cpu/list proxy {p['per_list_cpu_s']} s direct {d['per_list_cpu_s']} s")

    for s, (session, url, pid) in sides.items():
        conc = await concurrent_lists(
            session, url, pid, concurrency=args.concurrency, seconds=args.concurrent_seconds, max_lists=args.max_concurrent_lists
        )
        case[s]["concurrent"] = conc
        log(f"{case['case']} {s}: {args.concurrency} concurrent LISTs: {conc}")
    case["ratio_rss_peak_growth_proxy_over_direct"] = ratio(
        p["concurrent"]["rss_peak_growth_mib"], d["concurrent"]["rss_peak_growth_mib"]
    )
    return case


async def run_kind(kind: str, sizes: list[int], args: argparse.Namespace, out: dict[str, Any]) -> None:
    """One federation per node kind; sizes ascending, created incrementally."""
    setup = Setup.start(f"{NAME}-{kind}")
    try:
        sessions = setup.sessions()
        try:
            have = 0
            for n in sorted(sizes):
                took = await setup.populate(sessions, kind, have, n)
                have = n
                await setup.wait_cached(sessions["proxy"], n)
                cache = await setup.caches_debug(sessions["proxy"])
                if kind not in out["node_sizes"]:
                    out["node_sizes"][kind] = await setup.node_sizes(sessions, kind, "rp1-" + kind + "-000000")
                case = await measure_case(setup, sessions, kind, n, args)
                case["create_seconds"] = round(took, 1)
                case["proxy_cache_bytes"] = cache["bytes"]
                case["proxy_cache_bytes_per_object"] = round(cache["bytes"] / max(cache["objects"], 1))
                out["cases"].append(case)
        finally:
            await close_sessions(sessions)
    finally:
        setup.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="5000,20000", help="node counts of hollow nodes (comma-separated)")
    ap.add_argument("--real-sizes", default="5000", help="node counts of real-size nodes ('' for none)")
    ap.add_argument("--nodes", type=int, help="shortcut: this one size for both kinds")
    ap.add_argument("--lists", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--concurrent-seconds", type=float, default=10.0)
    ap.add_argument("--max-concurrent-lists", type=int, default=2000)
    args = ap.parse_args()
    install_sigterm()
    sizes = {
        "hollow": [int(x) for x in args.sizes.split(",") if x.strip()],
        "real": [int(x) for x in args.real_sizes.split(",") if x.strip()],
    }
    if args.nodes:
        sizes = {"hollow": [args.nodes], "real": [args.nodes]}
    t0 = time.monotonic()
    out: dict[str, Any] = {
        "benchmark": NAME,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": host_info(),
        "params": {"sizes": sizes, **{k: v for k, v in vars(args).items() if k not in ("sizes", "real_sizes", "nodes")}},
        "peer": f"{PEER}: a kube-apiserver holding the same N nodes (LIST RV=0 from its watch cache)",
        "node_sizes": {},
        "cases": [],
    }
    for kind in ("hollow", "real"):
        if sizes[kind]:
            asyncio.run(run_kind(kind, sizes[kind], args, out))
    out["total_seconds"] = round(time.monotonic() - t0, 1)
    emit(NAME, out)


if __name__ == "__main__":
    main()
