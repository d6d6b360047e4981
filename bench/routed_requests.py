"""Routed requests, one at a time and 16 at a time: the proxy vs the partition that owns them.

The proxy's hot path at its busiest: every node Lease renewal (one per node every 10 s, ~5,000/s
at 50,000 nodes), every pod status patch and binding is forwarded to one partition. Set-up:
`Federation(tenant_partitions=1, resource_partitions=1)` (tp1, rp1), the proxy in front of both;
namespace `acme-bench` on tp1 with `--objects` pods, and `--objects` node Leases
`rp1-bench-<i>` in kube-node-lease on rp1 (the proxy routes them to rp1 by the node-name prefix).

Load client: `rvcheck requests` (Go, client-go typed clientset, protobuf as kubelets, no client
rate limit), `--concurrency` workers each with one request in flight, each on an HTTP/2
connection of its own as so many kubelets (`--connections one`: all on one connection, as one
kubelet), worker w on object w mod objects:
- `get`: GET a pod;
- `renew-lease`: UPDATE a node Lease's spec.renewTime with the resourceVersion it last read
  (the kubelet's node lease controller);
- `patch-status`: strategic-merge PATCH of a pod's status (the kubelet's status manager);
- `list`: LIST the namespace's pods (`--objects` of them), a consistent read.

Per (operation, concurrency), `--rounds` rounds; each round runs the proxy side and the direct
side (tp1 for pods, rp1 for Leases), alternating which goes first, for `--duration` s after a
1 s warm-up. Figures per side: the median over rounds of requests/s and of p50/p99 latency; for
the proxy, CPU per request (the proxy's process group, every worker: CPU seconds / requests
answered, warm-up included) and the added p50 (proxy p50 - direct p50). Ratios: proxy/direct
throughput.

Run: `python -m bench.routed_requests [--ops get,renew-lease,patch-status,list]
[--concurrency 1,16] [--rounds 3] [--duration 5] [--connections separate|one] [--workers N]
[--event-loop asyncio|uvloop]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.common import OUT_DIR, REPO, WORK_DIR, client_ssl, emit, host_info, install_sigterm, log, mib, new_session, ratio
from hack.federation import PROXY_ADMINS_GROUP, Federation
from hack.proxy_process import ProxyProcess
from proxy.cli import DEFAULT_EVENT_LOOP
from proxy.workers import available_cpus

NAME = "routed_requests"
RVCHECK = REPO / ".local" / "bin" / "rvcheck"
ARTIFACTS = OUT_DIR / NAME  # the Go client's reports of the last run
NAMESPACE = "acme-bench"  # tenant acme: tp1
LEASE_NAMESPACE = "kube-node-lease"
OPS = ("get", "renew-lease", "patch-status", "list")
WARMUP = "1s"  # rvcheck requests --warmup: the TLS handshake and first requests are not counted
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _session_stats(sid: int) -> list[list[bytes]]:
    """The /proc/<pid>/stat fields (after the command) of every process in session `sid` (the
    proxy is started in a session of its own, so these are all its workers)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # field 6 (session); fields[0] is field 3 (state)
            out.append(fields)
    return out


def group_cpu_seconds(sid: int) -> float:
    """User + system CPU seconds of every process in session `sid`."""
    return sum(int(f[11]) + int(f[12]) for f in _session_stats(sid)) / _CLK_TCK  # utime, stime


def group_rss_bytes(sid: int) -> int:
    """Resident bytes of every process in session `sid`."""
    return sum(int(f[21]) for f in _session_stats(sid)) * _PAGE_SIZE  # rss, pages


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}


def lease(name: str) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}}


async def create_objects(fed: Federation, objects: int) -> None:
    """The namespace and pods on tp1, the node Leases on rp1, straight to the partitions."""
    async def post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> None:
        async with session.post(url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}) as resp:
            if resp.status not in (201, 409):
                raise RuntimeError(f"POST {url}: {resp.status} {await resp.text()}")

    tp1, rp1 = fed.partition("tp1"), fed.partition("rp1")
    sessions = {p.name: new_session(client_ssl(fed, p.admin_cert)) for p in (tp1, rp1)}
    try:
        await post(sessions["tp1"], f"{tp1.server}/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        await asyncio.gather(
            *(post(sessions["tp1"], f"{tp1.server}/api/v1/namespaces/{NAMESPACE}/pods", pod(f"bench-{i}")) for i in range(objects)),
            *(post(sessions["rp1"], f"{rp1.server}/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases", lease(f"rp1-bench-{i}"))
              for i in range(objects)),
        )
    finally:
        for s in sessions.values():
            await s.close()


def run_rvcheck(kubeconfig: Path, op: str, concurrency: int, objects: int, duration: float, report: Path, *,
                separate: bool) -> dict[str, Any]:
    """One `rvcheck requests` run; returns its report. `separate`: one connection per worker
    (as many kubelets), else all on one HTTP/2 connection (one kubelet)."""
    lease_op = op == "renew-lease"
    names = [f"rp1-bench-{i}" if lease_op else f"bench-{i}" for i in range(objects)]
    argv = [str(RVCHECK), "requests", "--kubeconfig", str(kubeconfig), "--op", op,
            "--namespace", LEASE_NAMESPACE if lease_op else NAMESPACE, "--names", ",".join(names),
            "--concurrency", str(concurrency), "--connections", str(concurrency if separate else 1), "--duration", f"{duration}s", "--warmup", WARMUP]
    with report.open("wb") as out:
        subprocess.run(argv, stdout=out, stderr=sys.stderr, stdin=subprocess.DEVNULL, timeout=duration + 120, check=False)
    doc = json.loads(report.read_bytes())
    if doc.get("fatal"):
        raise RuntimeError(f"rvcheck requests {op} x{concurrency}: {doc['fatal']}")
    return doc


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else 0.0


def measure(fed: Federation, proxy: ProxyProcess, kubeconfigs: dict[str, Path], args: argparse.Namespace) -> list[dict[str, Any]]:
    assert proxy.popen is not None
    sid = proxy.popen.pid  # start_new_session=True: the proxy leads its session
    cases = []
    for op in args.ops:
        direct = "rp1" if op == "renew-lease" else "tp1"
        for concurrency in args.concurrency:
            runs: dict[str, list[dict[str, Any]]] = {"proxy": [], "direct": []}
            cpu_per_request: list[float] = []
            for rnd in range(args.rounds):
                order = ("proxy", "direct") if rnd % 2 == 0 else ("direct", "proxy")
                for side in order:
                    kubeconfig = kubeconfigs["proxy" if side == "proxy" else direct]
                    report = ARTIFACTS / f"{op}-c{concurrency}-r{rnd}-{side}.json"
                    cpu0 = group_cpu_seconds(sid)
                    doc = run_rvcheck(kubeconfig, op, concurrency, args.objects, args.duration, report, separate=args.connections == "separate")
                    cpu1 = group_cpu_seconds(sid)
                    runs[side].append(doc)
                    if side == "proxy":
                        cpu_per_request.append((cpu1 - cpu0) / max(doc["requests_with_warmup"], 1) * 1000)
            case: dict[str, Any] = {"op": op, "concurrency": concurrency, "direct_partition": direct}
            for side, docs in runs.items():
                case[side] = {
                    "requests_per_second": median([d["requests_per_second"] for d in docs]),
                    "p50_ms": median([d["latency_ms"]["p50_ms"] for d in docs]),
                    "p99_ms": median([d["latency_ms"]["p99_ms"] for d in docs]),
                    "failed": sum(d["failed"] for d in docs),
                    "conflicts": sum(d["conflicts"] for d in docs),
                    "rounds": [{"requests_per_second": d["requests_per_second"], "p50_ms": d["latency_ms"]["p50_ms"],
                                "p99_ms": d["latency_ms"]["p99_ms"], "requests": d["requests"]} for d in docs],
                }
            case["proxy"]["cpu_per_request_ms"] = median(cpu_per_request)
            case["ratio_throughput_proxy_over_direct"] = ratio(case["proxy"]["requests_per_second"], case["direct"]["requests_per_second"])
            case["added_p50_ms"] = round(case["proxy"]["p50_ms"] - case["direct"]["p50_ms"], 3)
            log(f"{op} x{concurrency}: proxy {case['proxy']['requests_per_second']}/s p50 {case['proxy']['p50_ms']} ms, "
                f"direct {case['direct']['requests_per_second']}/s p50 {case['direct']['p50_ms']} ms; "
                f"ratio {case['ratio_throughput_proxy_over_direct']}, added p50 {case['added_p50_ms']} ms, "
                f"proxy CPU {case['proxy']['cpu_per_request_ms']} ms/request")
            cases.append(case)
    return cases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default=",".join(OPS), help="operations (comma-separated): " + ", ".join(OPS))
    ap.add_argument("--concurrency", default="1,16", help="concurrent requests (comma-separated)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0, help="counted seconds per run")
    ap.add_argument("--connections", choices=("separate", "one"), default="separate",
                    help="separate: each concurrent client on its own connection (many kubelets, the default); one: all on one HTTP/2 connection (one kubelet)")
    ap.add_argument("--objects", type=int, default=16, help="pods and node Leases (one per worker)")
    ap.add_argument("--event-loop", default="", help="the proxy's serve --event-loop (default: the proxy's)")
    ap.add_argument("--workers", type=int, default=0, help="proxy worker processes (0: the proxy's default, one per CPU)")
    args = ap.parse_args()
    args.ops = [o for o in args.ops.split(",") if o]
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    if unknown := set(args.ops) - set(OPS):
        ap.error(f"unknown --ops {sorted(unknown)}")
    if not RVCHECK.exists():
        print(f"{NAME}: {RVCHECK} missing: run `bash hack/build-components.sh`", file=sys.stderr)
        raise SystemExit(2)
    install_sigterm()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    fed = Federation(WORK_DIR / NAME, tenant_partitions=1, resource_partitions=1)
    proxy: ProxyProcess | None = None
    try:
        fed.start()
        proxy = ProxyProcess(fed, fed.root / "proxy", workers=args.workers or None, event_loop=args.event_loop or None).start(timeout=180)
        assert proxy.popen is not None
        log(f"federation and proxy up in {time.monotonic() - t0:.1f} s (proxy {proxy.server})")
        asyncio.run(create_objects(fed, args.objects))
        kubeconfigs = {
            "proxy": fed.issue_client_kubeconfig("bench-requests", user="admin", groups=[PROXY_ADMINS_GROUP], server=proxy.server),
            "tp1": fed.partition("tp1").admin_kubeconfig,
            "rp1": fed.partition("rp1").admin_kubeconfig,
        }
        rss0 = group_rss_bytes(proxy.popen.pid)
        cases = measure(fed, proxy, kubeconfigs, args)
        rss1 = group_rss_bytes(proxy.popen.pid)
    finally:
        if proxy is not None:
            proxy.stop()
        fed.stop()
    emit(NAME, {
        "benchmark": NAME,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": host_info(),
        "params": {**vars(args), "warmup": WARMUP, "proxy_workers": args.workers or available_cpus(),
                   "proxy_event_loop": args.event_loop or DEFAULT_EVENT_LOOP},
        "peer": "the partition that owns the objects (tp1: pods, rp1: node Leases), the same client straight to it",
        "proxy_rss_mib": {"before": mib(rss0), "after": mib(rss1)},
        "cases": cases,
        "total_seconds": round(time.monotonic() - t0, 1),
    })


if __name__ == "__main__":
    main()
