"""Many watchers by node name through the proxy vs the same watches on the peer kube-apiserver.

Per watcher count W (default 2,000 and 10,000), a fresh federation with 1,000 hollow nodes
(500 on rp1, 500 on rp2, all 1,000 on the peer rp3); watcher i watches node i mod 1,000:
`GET /api/v1/nodes?watch=1&fieldSelector=metadata.name=<n>&resourceVersion=<list RV>`, each on
its own TLS connection, opened by `--openers` concurrent openers. Sides run one after the other
(proxy, then direct), so each has the machine to itself.

Per side:
- memory per idle watcher: (server RSS after all watchers are open and idle 5 s - RSS before) / W,
  for the proxy process and for the peer's kube-apiserver; CPU seconds spent opening them;
- event delivery latency: `--patches` merge-patches of a label `bench-seq=<i>` on a random watched
  node (the same node sequence on both sides), spaced `--interval-ms`, sent straight to the
  partition that holds the node (rp1/rp2 for the proxy side, rp3 for the direct side); for every
  watcher of that node, receive time - patch send time. p50/p99 per side, ratio proxy/direct.

The proxy is started with `limits.max_watches_per_identity` = W + 1,000 (its default, 1,000
per identity, would refuse most of one client's watchers with 429; the peer has no such limit).

Everything is bounded: opening by `--open-timeout`, delivery by `--delivery-timeout`, each watch
by `timeoutSeconds` on the server side. If not every watcher could be opened in time, the side
reports how many were and a "note" says so.

Run: `python -m bench.watch_fanout [--watchers 2000,10000] [--nodes 1000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections import defaultdict
from typing import Any

import aiohttp
import orjson

from bench.common import (
    PEER,
    Setup,
    close_sessions,
    cpu_seconds,
    emit,
    get_json,
    host_info,
    install_sigterm,
    log,
    mib,
    new_session,
    proxy_stalls,
    stall_summary,
    raise_nofile,
    ratio,
    rss_bytes,
    summary_ms,
)

NAME = "watch_fanout"
KIND = "watch"
_SEQ = b'"bench-seq":"'


async def server_watchers(setup: Setup, sessions: dict[str, aiohttp.ClientSession], side: str) -> float:
    """Open watches of nodes as the server reports them: the proxy's cache watchers, or the
    peer's apiserver_longrunning_requests{verb="WATCH",resource="nodes"} (which also counts its
    own Node authorizer's informer)."""
    if side == "proxy":
        return float((await setup.caches_debug(sessions["proxy"]))["watchers"])
    async with sessions[PEER].get(f"{setup.server(PEER)}/metrics") as resp:
        text = await resp.text()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_longrunning_requests{") and 'verb="WATCH"' in line and 'resource="nodes"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


class Side:
    """The watchers of one side and what they received."""

    def __init__(self, name: str, server: str, pid: int) -> None:
        self.name = name
        self.server = server
        self.pid = pid
        self.responses: list[aiohttp.ClientResponse] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.per_node: dict[str, int] = defaultdict(int)  # node -> open watchers
        self.received: dict[int, list[float]] = defaultdict(list)  # seq -> receive times
        self.open_failures: dict[str, int] = defaultdict(int)
        self.ended = 0
        self.other_lines = 0

    async def read(self, resp: aiohttp.ClientResponse, node: str) -> None:
        try:
            while True:
                line = await resp.content.readline()
                if not line:
                    break
                now = time.perf_counter()
                k = line.find(_SEQ)
                if k < 0:
                    self.other_lines += 1
                    continue
                k += len(_SEQ)
                self.received[int(line[k : line.index(b'"', k)])].append(now)
        except (aiohttp.ClientError, ValueError, OSError):
            pass
        self.ended += 1
        self.per_node[node] -= 1


async def open_watchers(
    side: Side, session: aiohttp.ClientSession, names: list[str], rv: str, count: int, args: argparse.Namespace
) -> float:
    """Open `count` watches with `args.openers` concurrent openers until done or
    `args.open_timeout`; returns the seconds taken."""
    url = f"{side.server}/api/v1/nodes"
    next_index = iter(range(count))
    deadline = time.monotonic() + args.open_timeout
    t0 = time.monotonic()

    async def opener() -> None:
        for i in next_index:
            if time.monotonic() > deadline:
                return
            node = names[i % len(names)]
            params = {
                "watch": "1",
                "fieldSelector": f"metadata.name={node}",
                "resourceVersion": rv,
                "timeoutSeconds": str(args.watch_seconds),
            }
            try:
                async with asyncio.timeout(30):
                    resp = await session.get(url, params=params)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                side.open_failures[type(exc).__name__] += 1
                continue
            if resp.status != 200:
                side.open_failures[f"http-{resp.status}"] += 1
                resp.release()
                continue
            side.responses.append(resp)
            side.per_node[node] += 1
            side.tasks.append(asyncio.create_task(side.read(resp, node), name=f"watch-{side.name}-{i}"))
            if len(side.responses) % 1000 == 0:
                log(f"{side.name}: {len(side.responses)} watchers open ({time.monotonic() - t0:.1f} s)")

    await asyncio.gather(*(opener() for _ in range(args.openers)))
    return time.monotonic() - t0


async def patch_nodes(
    setup: Setup, sessions: dict[str, aiohttp.ClientSession], side: Side, nodes: list[str], args: argparse.Namespace
) -> tuple[dict[int, float], dict[int, int], list[float], int]:
    """Merge-patch `bench-seq=<i>` on nodes[i], one every `args.interval_ms`, straight to the
    partition that holds the node. Returns (send time per seq, watchers expected per seq,
    patch round trips in seconds, failed patches)."""
    sent: dict[int, float] = {}
    expected: dict[int, int] = {}
    round_trips: list[float] = []
    failed = 0

    async def one(seq: int, node: str) -> None:
        nonlocal failed
        partition = node[:3] if side.name == "proxy" else PEER
        url = f"{setup.server(partition)}/api/v1/nodes/{node}"
        body = orjson.dumps({"metadata": {"labels": {"bench-seq": str(seq)}}})
        expected[seq] = side.per_node.get(node, 0)
        t0 = sent[seq] = time.perf_counter()
        try:
            async with asyncio.timeout(30):
                async with sessions[partition].patch(url, data=body, headers={"Content-Type": "application/merge-patch+json"}) as resp:
                    await resp.read()
                    if resp.status != 200:
                        failed += 1
                        return
        except (aiohttp.ClientError, OSError, TimeoutError):
            failed += 1
            return
        round_trips.append(time.perf_counter() - t0)

    tasks = []
    start = time.monotonic()
    for seq, node in enumerate(nodes):
        delay = start + seq * args.interval_ms / 1000 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(seq, node)))
    await asyncio.gather(*tasks)
    return sent, expected, round_trips, failed


async def run_side(
    setup: Setup, sessions: dict[str, aiohttp.ClientSession], name: str, count: int, names: list[str], patch_nodes_seq: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    if name == "proxy":
        server, pid, ctx = setup.proxy.server, setup.pid(setup.proxy), setup.proxy_ssl
    else:
        server, pid, ctx = setup.server(PEER), setup.apiserver_pid(PEER), setup.partition_ssl[PEER]
    assert ctx is not None
    side = Side(name, server, pid)
    listed = await get_json(sessions["proxy" if name == "proxy" else PEER], f"{server}/api/v1/nodes", resourceVersion="0")
    rv = listed["metadata"]["resourceVersion"]
    baseline_watches = await server_watchers(setup, sessions, name)
    out: dict[str, Any] = {"pid": pid, "list_items": len(listed["items"])}
    del listed
    gc.collect()
    await asyncio.sleep(args.settle)
    rss0, cpu0 = rss_bytes(pid), cpu_seconds(pid)
    stalls0 = await proxy_stalls(sessions["proxy"], setup.proxy.server) if name == "proxy" else {}
    # The proxy authorizes cached watches with SubjectAccessReviews to rp1 and rp2: their CPU
    # while the proxy's watchers open is the upstream share of the cost.
    upstream_pids = [setup.apiserver_pid(p) for p in ("rp1", "rp2")] if name == "proxy" else []
    up0 = sum(cpu_seconds(p) for p in upstream_pids)
    session = new_session(ctx, timeout=aiohttp.ClientTimeout(total=None, sock_connect=20))
    try:
        async with asyncio.timeout(args.open_timeout + args.delivery_timeout + args.patches * args.interval_ms / 1000 + 120):
            open_s = await open_watchers(side, session, names, rv, count, args)
            cpu1 = cpu_seconds(pid)
            up1 = sum(cpu_seconds(p) for p in upstream_pids)
            log(f"{name}: {len(side.responses)}/{count} watchers open in {open_s:.1f} s; failures {dict(side.open_failures)}")
            await asyncio.sleep(args.idle)
            rss1 = rss_bytes(pid)
            opened = len(side.responses)
            alive = opened - side.ended
            reported = await server_watchers(setup, sessions, name) - baseline_watches
            out.update({
                "watchers_wanted": count,
                "watchers_opened": opened,
                "watchers_alive_after_idle": alive,
                "server_reported_watchers": reported,
                "open_failures": dict(side.open_failures),
                "open_seconds": round(open_s, 1),
                "opens_per_s": round(opened / max(open_s, 1e-9), 1),
                "open_cpu_s": round(cpu1 - cpu0, 2),
                "open_cpu_per_watcher_ms": round((cpu1 - cpu0) / max(opened, 1) * 1000, 3),
                **({"open_upstream_rp1_rp2_cpu_s": round(up1 - up0, 2)} if upstream_pids else {}),
                "rss_before_mib": mib(rss0),
                "rss_idle_mib": mib(rss1),
                "rss_growth_mib": mib(rss1 - rss0),
                "memory_per_watcher_bytes": round((rss1 - rss0) / max(opened, 1)),
            })
            log(f"{name}: RSS {mib(rss0)} -> {mib(rss1)} MiB: {out['memory_per_watcher_bytes']} bytes/watcher; "
                f"server reports {reported} watchers")

            cpu2 = cpu_seconds(pid)
            sent, expected, round_trips, failed = await patch_nodes(setup, sessions, side, patch_nodes_seq, args)
            want = sum(expected.values())
            deadline = time.monotonic() + args.delivery_timeout
            while sum(len(side.received[s]) for s in sent) < want and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            cpu3 = cpu_seconds(pid)
            latencies = [t - sent[s] for s in sent for t in side.received.get(s, ())]
            got = sum(len(side.received[s]) for s in sent)
            out.update({
                "patches": len(sent),
                "patch_failures": failed,
                "patch_round_trip": summary_ms(round_trips),
                "deliveries_expected": want,
                "deliveries_received": got,
                "delivery": summary_ms(latencies),
                "delivery_p50_ms": round(sorted(latencies)[len(latencies) // 2] * 1000, 3) if latencies else None,
                "delivery_phase_cpu_s": round(cpu3 - cpu2, 2),
                "watchers_ended_early": side.ended,
                "non_patch_lines": side.other_lines,
            })
            if name == "proxy":
                # Whole side: opening, idle, delivery (the proxy's own loop-lag and GC histograms).
                out["proxy_stalls"] = stall_summary(stalls0, await proxy_stalls(sessions["proxy"], setup.proxy.server))
            log(f"{name}: deliveries {got}/{want}; latency {out['delivery']}")
    finally:
        for task in side.tasks:
            task.cancel()
        await asyncio.gather(*side.tasks, return_exceptions=True)
        for resp in side.responses:
            resp.close()
        await session.close()
    await asyncio.sleep(3)
    out["rss_after_close_mib"] = mib(rss_bytes(pid))
    out["server_reported_watchers_after_close"] = await server_watchers(setup, sessions, name) - baseline_watches
    return out


async def measure(setup: Setup, count: int, args: argparse.Namespace) -> dict[str, Any]:
    sessions = setup.sessions()
    try:
        took, names, patch_seq = await setup.watched_nodes(sessions, KIND, args.nodes, count, patches=args.patches, seed=args.seed)
        case: dict[str, Any] = {"watchers": count, "nodes": args.nodes, "create_seconds": round(took, 1)}
        for side in ("proxy", "direct"):
            case[side] = await run_side(setup, sessions, side, count, names, patch_seq, args)
        p, d = case["proxy"], case["direct"]
        case["ratio_memory_per_watcher_proxy_over_direct"] = ratio(p["memory_per_watcher_bytes"], d["memory_per_watcher_bytes"])
        case["ratio_delivery_p50_proxy_over_direct"] = ratio(p["delivery_p50_ms"] or 0, d["delivery_p50_ms"] or 0)
        case["ratio_delivery_p99_proxy_over_direct"] = ratio(p["delivery"].get("p99_ms", 0), d["delivery"].get("p99_ms", 0))
        notes = []
        for s in ("proxy", "direct"):
            if case[s]["watchers_opened"] < count:
                notes.append(f"{s}: only {case[s]['watchers_opened']} of {count} watchers opened within {args.open_timeout:.0f} s")
            if case[s]["deliveries_received"] < case[s]["deliveries_expected"]:
                notes.append(f"{s}: {case[s]['deliveries_received']} of {case[s]['deliveries_expected']} deliveries within {args.delivery_timeout:.0f} s")
        if notes:
            case["note"] = "; ".join(notes)
        return case
    finally:
        await close_sessions(sessions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--watchers", default="2000,10000", help="watcher counts (comma-separated)")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--openers", type=int, default=8, help="concurrent watch openers")
    ap.add_argument("--patches", type=int, default=200)
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--idle", type=float, default=5.0, help="seconds idle before the RSS reading")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds before the RSS baseline")
    ap.add_argument("--open-timeout", type=float, default=150.0)
    ap.add_argument("--delivery-timeout", type=float, default=20.0)
    ap.add_argument("--watch-seconds", type=int, default=900, help="timeoutSeconds of each watch")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    install_sigterm()
    nofile = raise_nofile()
    counts = [int(x) for x in args.watchers.split(",") if x.strip()]
    t0 = time.monotonic()
    out: dict[str, Any] = {
        "benchmark": NAME,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": host_info(),
        "params": {**vars(args), "watchers": counts, "nofile": list(nofile),
                   "proxy_config_extra": "limits.max_watches_per_identity = watchers + 1000"},
        "peer": f"{PEER}: a kube-apiserver holding the same nodes; the same number of watches opened on it directly",
        "cases": [],
    }
    for count in counts:
        # The proxy limits open watches per identity (limits.max_watches_per_identity, default
        # 1,000); every watcher here is one identity, and kube-apiserver has no such limit.
        extra = {"limits": {"max_watches_per_identity": count + 1000}}
        setup = Setup.start(f"{NAME}-{count}", extra=extra)
        try:
            out["cases"].append(asyncio.run(measure(setup, count, args)))
        finally:
            setup.stop()
    out["total_seconds"] = round(time.monotonic() - t0, 1)
    notes = [f"{c['watchers']} watchers: {c['note']}" for c in out["cases"] if "note" in c]
    if notes:
        out["note"] = "; ".join(notes)
    emit(NAME, out)


if __name__ == "__main__":
    main()
