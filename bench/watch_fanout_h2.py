"""Idle node watches multiplexed on HTTP/2 connections: the proxy vs the peer kube-apiserver.

What a fleet of kubelets does to its apiserver, with one client-go process standing in for
them: W watches of Nodes by name (`fieldSelector=metadata.name=<n>`, each after a LIST with
resourceVersion=0, as client-go's reflector does), 100 per HTTP/2 connection (the
SETTINGS_MAX_CONCURRENT_STREAMS of both servers), opened by `rvcheck h2watch` (Go, client-go
typed clientset, protobuf): the load client is not the limit and speaks what kubelets speak.
On the proxy side one protobuf-first LIST first fills the node cache's protobuf twin (as a
fleet's first kubelet would), so every watch is answered in protobuf as kube-apiserver answers.

Per watch count W (default 10,000 and 50,000), a fresh federation with `--nodes` hollow nodes
(half on rp1, half on rp2, all on the peer rp3); watch i watches node i mod nodes. The sides open
their watches one after the other (proxy, then direct; the direct side's open while the proxy's
are idle), and keep them open while their delivery rounds alternate:
- memory per idle watch: (server RSS once every watch is open and idle `--idle` s - RSS
  before) / W, for the proxy process and for the peer's kube-apiserver; the server's CPU
  seconds spent opening them;
- connections: TCP connections the client dialed, and on the proxy side the HTTP/2 connections
  it counts itself (`partition_proxy_connections{protocol="h2"}`);
- delivery lag: `--patches` merge-patches of the annotation `h2watch.partition-proxy.io/sent-ns`
  (the sender's wall clock, Unix ns) on a random watched node (the same sequence on both sides),
  one every `--interval-ms`, straight to the partition that holds the node; h2watch counts, for
  every watch of that node, receive time - stamp. The patches go out in `--rounds` rounds per
  side, alternating ABBA between the sides (proxy, direct, direct, proxy, ...), so that a slow
  spell of this shared machine, which moves either side's p99 by several ms from run to run,
  falls on both. p50/p99 per side pooled over its rounds, ratio proxy/direct, and each
  round's p99;
- where the lag goes: per side one more watcher, `rvcheck watch` (Go, one cluster-wide node
  watch straight on each partition that holds the nodes: rp1 and rp2, or the peer rp3), sees
  every patch as the partition's own watch sends it (the proxy's reflectors watch the same
  partitions). Each patch also carries that watcher's annotations (run, seq, sent-ns, the same
  stamp). Per side: "partition's watch" = its receive - the stamp, per patch; "after it" =
  h2watch's receive - its receive, per delivery. On the proxy side "after it" is the proxy's
  hop (its reflector's read, decode, fan-out and HTTP/2 write, and any wait for a core); on
  the peer it is kube-apiserver's fan-out to the other 10,000 watches beyond this one;
- PING round trips: `rvcheck h2ping` holds one more HTTP/2 connection to the same server and
  pings it every 100 ms during each of the side's rounds (client-go closes a connection
  whose ping goes unanswered for 15 s; the issue's bound is 1 s).

`--protocol http/1.1` runs the same scenario with h2watch's HTTP/2 turned off (client-go's
DISABLE_HTTP2): every watch is its own TLS connection, as for a client that speaks HTTP/1.1
only; there are no PINGs then. With `--content-type json` it is the HTTP/1.1 fan-out of
`bench.watch_fanout` with a Go client and alternating rounds.

The proxy is started with `limits.max_watches_per_identity` = W + 1,000: every watch here is
one identity's, and kube-apiserver has no such limit.

Run: `python -m bench.watch_fanout_h2 [--watches 10000,50000] [--nodes 1000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.common import (
    OUT_DIR,
    PEER,
    REPO,
    Setup,
    close_sessions,
    cpu_seconds,
    emit,
    fill_protobuf_twin,
    host_info,
    proxy_stalls,
    stall_summary,
    summary_ms,
    install_sigterm,
    log,
    mib,
    percentile,
    raise_nofile,
    ratio,
    rss_bytes,
)
from hack.federation import PROXY_ADMINS_GROUP

NAME = "watch_fanout_h2"
KIND = "watch"
RVCHECK = REPO / ".local" / "bin" / "rvcheck"
ARTIFACTS = OUT_DIR / NAME  # the Go clients' reports of the last run
SENT_NS = "h2watch.partition-proxy.io/sent-ns"  # rvcheck h2watch reads the lag from it
# rvcheck watch (the partition's own watch, "where the lag goes") counts events by these
# (hack/k8s/clients/rvcheck/bench.go)
OBSERVER_SENT_NS = "bench.partition-proxy.io/sent-ns"
OBSERVER_SEQ = "bench.partition-proxy.io/seq"
OBSERVER_RUN = "bench.partition-proxy.io/run"
# ns: how far a delivery's stamp (h2watch's receive - its lag, which it writes in µs) may be
# from the partition watcher's stamp of the same patch; patches are --interval-ms apart
MATCH_NS = 2_000
PER_CONNECTION = 100  # streams per connection: both servers' SETTINGS_MAX_CONCURRENT_STREAMS
PING_INTERVAL = "100ms"
DRAIN_SECONDS = 5.0  # seconds after the last round, for any late delivery before h2watch stops
ROUND_PAUSE = 1.0  # seconds after a round's last patch before the next round: its deliveries land (p99 is ms)
PING_BOUND_MS = 1000.0  # the issue's bound on a PING's round trip under load


async def server_h2_connections(session: aiohttp.ClientSession, proxy_server: str) -> float:
    """HTTP/2 connections the proxy holds now (its partition_proxy_connections gauge)."""
    async with session.get(f"{proxy_server}/metrics") as resp:
        text = await resp.text()
    for line in text.splitlines():
        if line.startswith('partition_proxy_connections{protocol="h2"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def start_rvcheck(args: list[str], report: Path, ready: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start `rvcheck <args>` writing its JSON report to `report`; `ready` is its ready file."""
    ready.unlink(missing_ok=True)
    with report.open("wb") as out:
        return subprocess.Popen([str(RVCHECK), *args, "--ready-file", str(ready)], stdout=out, stderr=sys.stderr,
                                stdin=subprocess.DEVNULL, env=env)


async def wait_ready(proc: subprocess.Popen[bytes], ready: Path, timeout: float, what: str) -> float:
    """Seconds until `ready` exists; raises if `proc` exits first or `timeout` passes."""
    t0 = time.monotonic()
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            raise RuntimeError(f"{what} not ready within {timeout:.0f} s")
        await asyncio.sleep(0.2)
    return time.monotonic() - t0


async def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """The exit code of `proc`, killing it after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
        await asyncio.sleep(0.2)
    return proc.returncode


def read_report(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        return {"fatal": f"no report in {path}: {exc}"}


def observer_run(side: str) -> str:
    """The run annotation of `side`'s patches (the partition watcher counts only its own)."""
    return f"{NAME}-{side}"


def holder(side: str, node: str) -> str:
    """The partition holding `node` on `side`: rp1 or rp2 (a node's name starts with its
    partition's) for the proxy, the peer for direct."""
    return node[:3] if side == "proxy" else PEER


def side_partitions(side: str, names: list[str]) -> list[str]:
    """The partitions holding `side`'s nodes."""
    return sorted({holder(side, n) for n in names})


async def patch_nodes(setup: Setup, sessions: dict[str, aiohttp.ClientSession], side: str, nodes: list[str],
                      interval_ms: float, first_seq: int) -> tuple[int, int]:
    """Stamp `SENT_NS` (and the partition watcher's run, seq from `first_seq` and sent-ns) on
    nodes[i], one every `interval_ms`, straight to the partition that holds the node. Returns
    (patches sent, patches failed)."""
    failed = 0

    async def one(node: str, seq: int) -> None:
        nonlocal failed
        partition = holder(side, node)
        url = f"{setup.server(partition)}/api/v1/nodes/{node}"
        stamp = str(time.time_ns())
        body = orjson.dumps({"metadata": {"annotations": {
            SENT_NS: stamp, OBSERVER_SENT_NS: stamp, OBSERVER_SEQ: str(seq), OBSERVER_RUN: observer_run(side)}}})
        try:
            async with asyncio.timeout(30):
                async with sessions[partition].patch(url, data=body, headers={"Content-Type": "application/merge-patch+json"}) as resp:
                    await resp.read()
                    failed += resp.status != 200
        except (aiohttp.ClientError, OSError, TimeoutError):
            failed += 1

    tasks = []
    start = time.monotonic()
    for seq, node in enumerate(nodes):
        delay = start + seq * interval_ms / 1000 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(node, first_seq + seq)))
    await asyncio.gather(*tasks)
    return len(nodes), failed


@dataclass
class SideRun:
    """One side's watches, open from `open_side` to `close_side`, and what its rounds added up."""

    side: str
    pid: int
    kubeconfig: Path
    work: Path
    watch: subprocess.Popen[bytes]
    observer: subprocess.Popen[bytes]  # rvcheck watch straight on the side's partitions
    out: dict[str, Any]
    stalls0: dict[str, dict[str, float]]
    delivery_cpu_s: float = 0.0
    windows: list[tuple[int, int]] = field(default_factory=list)  # per round (first send, ROUND_PAUSE after the last), Unix ns
    pings: list[dict[str, Any]] = field(default_factory=list)
    stalls_delivery: dict[str, dict[str, float]] = field(default_factory=dict)  # summed bucket deltas
    sent: int = 0
    failed: int = 0


async def open_side(setup: Setup, sessions: dict[str, aiohttp.ClientSession], side: str, count: int, names: list[str],
                    args: argparse.Namespace) -> SideRun:
    """Open `count` watches on one side and read its memory per idle watch. The watches stay
    open (h2watch runs until `close_side` stops it) so that the sides' delivery rounds can
    alternate."""
    if side == "proxy":
        pid = setup.pid(setup.proxy)
        kubeconfig = setup.fed.issue_client_kubeconfig("bench-h2", user="admin", groups=[PROXY_ADMINS_GROUP],
                                                       server=setup.proxy.server)
    else:
        pid = setup.apiserver_pid(PEER)
        kubeconfig = setup.fed.partition(PEER).admin_kubeconfig
    work = ARTIFACTS / f"{count}-{side}"
    work.mkdir(parents=True, exist_ok=True)
    # h2watch stops on SIGTERM (close_side); this bounds it if the bench dies first.
    bound = 2 * args.open_timeout + 2 * (args.patches * args.interval_ms / 1000 + args.rounds * ROUND_PAUSE) + 600
    out: dict[str, Any] = {"pid": pid}
    if side == "proxy" and args.content_type == "protobuf":
        out["protobuf_twin_fill_seconds"] = round(await fill_protobuf_twin(sessions["proxy"], setup.proxy.server), 1)
        log(f"proxy: node cache's protobuf twin synced in {out['protobuf_twin_fill_seconds']} s")
    await asyncio.sleep(args.settle)
    rss0, cpu0 = rss_bytes(pid), cpu_seconds(pid)
    stalls0 = await proxy_stalls(sessions["proxy"], setup.proxy.server) if side == "proxy" else {}
    watch = start_rvcheck(["h2watch", "--kubeconfig", str(kubeconfig), "--nodes", ",".join(names[: min(count, len(names))]),
                           "--pods-per-node=false", "--watches", str(count), "--per-connection", str(PER_CONNECTION),
                           "--duration", f"{bound:.0f}s", "--watch-timeout", f"{bound + 60:.0f}s",
                           "--content-type", args.content_type, "--lag-out", str(work / "lags.csv")],
                          work / "h2watch.json", work / "h2watch.ready", env=client_env(args))
    observer: subprocess.Popen[bytes] | None = None
    try:
        open_s = await wait_ready(watch, work / "h2watch.ready", args.open_timeout, f"{side}: rvcheck h2watch")
        cpu1 = cpu_seconds(pid)
        log(f"{side}: {count} watches open in {open_s:.1f} s")
        await asyncio.sleep(args.idle)
        rss1 = rss_bytes(pid)
        if side == "proxy" and args.protocol == "h2":
            out["server_h2_connections"] = await server_h2_connections(sessions["proxy"], setup.proxy.server)
        kubeconfigs = [str(setup.fed.partition(x).admin_kubeconfig) for x in side_partitions(side, names)]
        observer = start_rvcheck(["watch", "--kubeconfig", ",".join(kubeconfigs), "--path", "/api/v1/nodes",
                                  "--run", observer_run(side), "--expect", str(args.patches), "--idle", "0",
                                  "--duration", f"{bound:.0f}s", "--content-type", args.content_type,
                                  "--events-out", str(work / "partition-watch.csv")],
                                 work / "partition-watch.json", work / "partition-watch.ready")
        await wait_ready(observer, work / "partition-watch.ready", 60, f"{side}: rvcheck watch (the partition's)")
    except BaseException:
        stop(watch)
        if observer is not None:
            stop(observer)
        raise
    out.update({
        "open_seconds": round(open_s, 1),
        "open_cpu_s": round(cpu1 - cpu0, 2),
        "open_cpu_per_watch_ms": round((cpu1 - cpu0) / count * 1000, 3),
        "rss_before_mib": mib(rss0),
        "rss_idle_mib": mib(rss1),
        "memory_per_watch_bytes": round((rss1 - rss0) / count),
    })
    log(f"{side}: RSS {mib(rss0)} -> {mib(rss1)} MiB: {out['memory_per_watch_bytes']} bytes/watch")
    return SideRun(side, pid, kubeconfig, work, watch, observer, out, stalls0)


async def deliver_round(setup: Setup, sessions: dict[str, aiohttp.ClientSession], run: SideRun, seq: list[str],
                        args: argparse.Namespace, index: int) -> None:
    """One delivery round of `run`'s side: patch `seq` at `--interval-ms` while h2ping pings
    the same server, then wait ROUND_PAUSE for the last deliveries."""
    seconds = len(seq) * args.interval_ms / 1000
    ping: subprocess.Popen[bytes] | None = None
    if args.protocol == "h2":  # PING is HTTP/2's
        ping = start_rvcheck(["h2ping", "--kubeconfig", str(run.kubeconfig), "--interval", PING_INTERVAL, "--duration",
                              f"{seconds + 1:.0f}s"], run.work / f"h2ping-{index}.json", run.work / f"h2ping-{index}.ready")
    try:
        if ping is not None:
            await wait_ready(ping, run.work / f"h2ping-{index}.ready", 30, f"{run.side}: rvcheck h2ping")
        cpu0 = cpu_seconds(run.pid)
        stalls0 = await proxy_stalls(sessions["proxy"], setup.proxy.server) if run.side == "proxy" else {}
        t0 = time.time_ns()
        sent, failed = await patch_nodes(setup, sessions, run.side, seq, args.interval_ms, first_seq=run.sent)
        await asyncio.sleep(ROUND_PAUSE)
        run.windows.append((t0, time.time_ns()))
        run.delivery_cpu_s += cpu_seconds(run.pid) - cpu0
        if run.side == "proxy":  # the delivery windows alone: what could delay the events measured
            stalls1 = await proxy_stalls(sessions["proxy"], setup.proxy.server)
            for key, buckets in stalls1.items():
                acc = run.stalls_delivery.setdefault(key, {})
                for le, n in buckets.items():
                    acc[le] = acc.get(le, 0.0) + n - stalls0.get(key, {}).get(le, 0.0)
        run.sent += sent
        run.failed += failed
        if ping is not None:
            await wait_exit(ping, seconds + 60)
    finally:
        if ping is not None:
            stop(ping)
    if ping is not None:
        run.pings.append(read_report(run.work / f"h2ping-{index}.json"))


async def close_side(setup: Setup, sessions: dict[str, aiohttp.ClientSession], run: SideRun, count: int,
                     names: list[str]) -> dict[str, Any]:
    """Stop `run`'s h2watch and add its figures to the side's output: delivery lag pooled over
    every round, and each round's own p50/p99."""
    await asyncio.sleep(DRAIN_SECONDS)
    for proc in (run.watch, run.observer):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    await wait_exit(run.watch, 120)
    await wait_exit(run.observer, 30)
    out = run.out
    if run.side == "proxy":
        # Whole side: opening, idle, delivery, and the other side's rounds in between.
        out["proxy_stalls"] = stall_summary(run.stalls0, await proxy_stalls(sessions["proxy"], setup.proxy.server))
        out["proxy_stalls_delivery"] = stall_summary({}, run.stalls_delivery)
    w = read_report(run.work / "h2watch.json")
    per_node = count / min(count, len(names))
    rounds = round_lags(run.work / "lags.csv", run.windows)
    out.update({
        "watches_opened": w.get("watches_opened"),
        "tcp_connections_dialed": w.get("tcp_connections_dialed"),
        "protocols": w.get("protocols"),
        "watch_open_ms": w.get("open_ms"),
        "watches_ended_early": w.get("ended_early_total"),
        "patches": run.sent,
        "patch_failures": run.failed,
        "deliveries_expected": round(run.sent * per_node),
        "deliveries_received": w.get("lag_ms", {}).get("count"),
        "delivery_lag_ms": w.get("lag_ms"),
        "delivery_lag_by_round": rounds,
        "where_the_lag_goes": lag_split(run.work / "lags.csv", run.work / "partition-watch.csv"),
        "delivery_phase_cpu_s": round(run.delivery_cpu_s, 2),
        "client_cpu_s": w.get("cpu_seconds"),
        "ping": merge_pings(run.pings) if run.pings else None,
        **({"fatal": w["fatal"]} if w.get("fatal") else {}),
    })
    log(f"{run.side}: deliveries {out['deliveries_received']}/{out['deliveries_expected']}, lag {w.get('lag_ms')}, "
        f"p99 by round {[r.get('p99_ms') for r in rounds]}, ping rtt {(out['ping'] or {}).get('rtt_ms')}")
    return out


def client_env(args: argparse.Namespace) -> dict[str, str] | None:
    """h2watch's environment: client-go leaves HTTP/2 out of its transport when DISABLE_HTTP2
    is set (k8s.io/apimachinery/pkg/util/net SetTransportDefaults), so each watch is then its
    own HTTP/1.1 connection, as with a client that cannot speak HTTP/2."""
    return {**os.environ, "DISABLE_HTTP2": "1"} if args.protocol == "http/1.1" else None


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def round_lags(path: Path, windows: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """Per delivery round: count, p50 and p99 (ms) of the lag samples received in its window."""
    try:
        samples = [(int(a), float(b)) for a, b in (line.split(",") for line in path.read_text().split())]
    except (OSError, ValueError):
        return []
    out = []
    for t0, t1 in windows:
        ms = [lag for recv, lag in samples if t0 <= recv <= t1]  # nearest rank, as rvcheck's summaries
        out.append({"count": len(ms), "p50_ms": round(percentile(ms, 50), 3) if ms else None,
                    "p99_ms": round(percentile(ms, 99), 3) if ms else None})
    return out


def lag_split(lags: Path, partition_watch: Path) -> dict[str, Any]:
    """Split the delivery lag at the partition's own watch (see the module docstring).

    `lags`: h2watch's "receive_ns,lag_ms" lines; `partition_watch`: rvcheck watch's
    "seq,sent_ns,receive_ns" lines. A delivery belongs to the patch whose stamp is within
    MATCH_NS of its receive - lag. Returns {"partition_watch_ms": `summary_ms` per patch,
    "after_partition_watch_ms": `summary_ms` per delivery, "matched", "unmatched"};
    empty when either file is missing."""
    try:
        seen = {int(sent): int(recv) for _, sent, recv in (line.split(",") for line in partition_watch.read_text().split())}
        samples = [(int(a), float(b)) for a, b in (line.split(",") for line in lags.read_text().split())]
    except (OSError, ValueError):
        return {}
    stamps = sorted(seen)
    after: list[float] = []  # seconds
    unmatched = 0
    for recv, lag in samples:
        want = recv - round(lag * 1e6)
        i = bisect.bisect_left(stamps, want)
        near = min(stamps[max(0, i - 1):i + 1], key=lambda s: abs(s - want), default=None)
        if near is None or abs(near - want) > MATCH_NS:
            unmatched += 1
            continue
        after.append((recv - seen[near]) / 1e9)
    return {
        "partition_watch_ms": summary_ms([(recv - sent) / 1e9 for sent, recv in seen.items()]),
        "after_partition_watch_ms": summary_ms(after),
        "matched": len(after),
        "unmatched": unmatched,
    }


def merge_pings(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The rounds' h2ping reports as one: counts summed, the largest round trip, and the worst
    round's p50 and p99 (per-round summaries cannot be pooled exactly)."""
    rtts = [r.get("rtt_ms") or {} for r in reports]
    return {
        "alpn": sorted({r.get("alpn") for r in reports if r.get("alpn")}),
        "pings_sent": sum(r.get("pings_sent") or 0 for r in reports),
        "pings_answered": sum(r.get("pings_answered") or 0 for r in reports),
        "pings_failed": sum(r.get("pings_failed") or 0 for r in reports),
        "rtt_ms": {k: max((r.get(k) or 0.0 for r in rtts), default=0.0) for k in ("p50_ms", "p99_ms", "max_ms")},
        "errors": [e for r in reports for e in (r.get("errors") or [])],
        "stop_reason": sorted({r.get("stop_reason") for r in reports if r.get("stop_reason")}),
        "rounds": len(reports),
    }


async def measure(setup: Setup, count: int, args: argparse.Namespace) -> dict[str, Any]:
    sessions = setup.sessions()
    runs: dict[str, SideRun] = {}
    try:
        took, names, patch_seq = await setup.watched_nodes(sessions, KIND, args.nodes, count, patches=args.patches, seed=args.seed)
        case: dict[str, Any] = {"watches": count, "nodes": args.nodes, "create_seconds": round(took, 1), "rounds": args.rounds}
        for side in ("proxy", "direct"):
            runs[side] = await open_side(setup, sessions, side, count, names, args)
        # Rounds alternate between the sides, ABBA (proxy first, then direct first, ...), so that
        # a slow spell of this shared machine falls on both; each round's patches are the next
        # slice of the same sequence on both sides.
        size = math.ceil(len(patch_seq) / args.rounds)
        for r in range(args.rounds):
            seq = patch_seq[r * size:(r + 1) * size]
            for side in (("proxy", "direct") if r % 2 == 0 else ("direct", "proxy")):
                log(f"round {r + 1}/{args.rounds}: {side}, {len(seq)} patches")
                await deliver_round(setup, sessions, runs[side], seq, args, r)
        for side in ("proxy", "direct"):
            case[side] = await close_side(setup, sessions, runs.pop(side), count, names)
        p, d = case["proxy"], case["direct"]
        case["ratio_memory_per_watch_proxy_over_direct"] = ratio(p["memory_per_watch_bytes"], d["memory_per_watch_bytes"])
        lag_p, lag_d = p.get("delivery_lag_ms") or {}, d.get("delivery_lag_ms") or {}
        case["ratio_delivery_p50_proxy_over_direct"] = ratio(lag_p.get("p50_ms", 0), lag_d.get("p50_ms", 0))
        case["ratio_delivery_p99_proxy_over_direct"] = ratio(lag_p.get("p99_ms", 0), lag_d.get("p99_ms", 0))
        case["ratio_delivery_p99_by_round"] = [
            ratio(rp.get("p99_ms") or 0, rd.get("p99_ms") or 0)
            for rp, rd in zip(p["delivery_lag_by_round"], d["delivery_lag_by_round"])]
        notes = []
        for s in ("proxy", "direct"):
            c = case[s]
            if (c["watches_opened"] or 0) < count:
                notes.append(f"{s}: only {c['watches_opened']} of {count} watches opened")
            if (c["deliveries_received"] or 0) < c["deliveries_expected"]:
                notes.append(f"{s}: {c['deliveries_received']} of {c['deliveries_expected']} deliveries")
            ping = c["ping"] or {}
            if ping.get("pings_failed"):
                notes.append(f"{s}: {ping['pings_failed']} pings failed")
            if (ping.get("rtt_ms") or {}).get("max_ms", 0) > PING_BOUND_MS:
                notes.append(f"{s}: a ping took {c['ping']['rtt_ms']['max_ms']} ms (> {PING_BOUND_MS:.0f} ms)")
        if notes:
            case["note"] = "; ".join(notes)
        return case
    finally:
        for run in runs.values():
            stop(run.watch)
            stop(run.observer)
        await close_sessions(sessions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--watches", default="10000,50000", help="watch counts (comma-separated)")
    ap.add_argument("--nodes", type=int, default=1000)
    # 1,000 patches: p99 over 10,000 deliveries at 10 watches per node (100 patch events in the
    # top 1 %); with 300, three patches decided it and the direct side's p99 moved 3-9 ms between runs.
    ap.add_argument("--patches", type=int, default=1000)
    # 4 rounds of 250 patches a side (5 s each at 20 ms): short enough that a slow spell of the
    # machine lasting seconds falls on both sides, long enough to hold 2,500 deliveries at 10,000 watches.
    ap.add_argument("--rounds", type=int, default=4, help="delivery rounds per side, alternating between the sides")
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--idle", type=float, default=5.0, help="seconds idle before the RSS reading")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds before the RSS baseline")
    ap.add_argument("--open-timeout", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--event-loop", default="", help="the proxy's serve --event-loop (default: the proxy's)")
    ap.add_argument("--protocol", choices=("h2", "http/1.1"), default="h2",
                    help="what h2watch speaks: HTTP/2 (client-go's default) or HTTP/1.1, one connection per watch "
                         "(saved as watch_fanout_h2-http1.json; no PINGs)")
    ap.add_argument("--content-type", choices=("protobuf", "json"), default="protobuf",
                    help="what the watches ask for: protobuf then JSON (kubelets), or JSON only")
    args = ap.parse_args()
    if not RVCHECK.exists():
        print(f"{NAME}: {RVCHECK} missing: run `bash hack/build-components.sh`", file=sys.stderr)
        raise SystemExit(2)
    install_sigterm()
    nofile = raise_nofile()
    counts = [int(x) for x in args.watches.split(",") if x.strip()]
    t0 = time.monotonic()
    out: dict[str, Any] = {
        "benchmark": NAME,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": host_info(),
        "params": {**vars(args), "watches": counts, "nofile": list(nofile), "per_connection": PER_CONNECTION,
                   "proxy_config_extra": "limits.max_watches_per_identity = watches + 1000"},
        "peer": f"{PEER}: a kube-apiserver holding the same nodes; the same watches opened on it directly over HTTP/2",
        "cases": [],
    }
    for count in counts:
        extra = {"limits": {"max_watches_per_identity": count + 1000}}
        setup = Setup.start(f"{NAME}-{count}", extra=extra, event_loop=args.event_loop or None)
        try:
            out["cases"].append(asyncio.run(measure(setup, count, args)))
        finally:
            setup.stop()
    out["total_seconds"] = round(time.monotonic() - t0, 1)
    notes = [f"{c['watches']} watches: {c['note']}" for c in out["cases"] if "note" in c]
    if notes:
        out["note"] = "; ".join(notes)
    emit(NAME if args.protocol == "h2" else f"{NAME}-http1", out)


if __name__ == "__main__":
    main()
