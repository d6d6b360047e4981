"""Routed requests, one at a time and 16 at a time: the proxy vs the partition that owns them,
and vs the simplest Python programs doing the same forwarding (`bench/peers`).

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

Sides, in the same run (`--sides`):
- `proxy`: partition-proxy in front of tp1 and rp1;
- `direct`: the partition that owns the objects (tp1 for pods, rp1 for Leases), the peer of
  every ratio to direct;
- `lean`: `bench.peers.lean_forwarder`, the floor (aiohttp's server, persistent uvloop TLS
  connections out, one write per request, httptools parsing the answer);
- `aiohttp`: `bench.peers.aiohttp_forwarder` (aiohttp's server and its ClientSession).
Both peers forward to the owning partition with the proxy's impersonation headers (the
partition checks RBAC for the same user), with as many processes sharing the port
(SO_REUSEPORT) as the proxy has workers. They speak HTTP/1.1 only: with an HTTP/2 client
(`--client-protocols h2`) client-go talks HTTP/2 to the proxy and the partition and HTTP/1.1 to
the peers (ALPN), which is what a Python forwarder without an HTTP/2 server would offer.

`--qps Q` (comma-separated): the load client paces its workers together at Q requests per second
(client-go's token bucket; 0, the default, is no limit). Without it each side runs at the rate
its latency allows, and a slower side pays more CPU per request for it (each wake-up of its
event loop finds fewer requests to share the loop's fixed work); at a rate every side reaches,
CPU per request compares the same work.

Each side also works when nothing is sent: the proxy's reflectors read bookmarks, its health
checks and metrics tick: a share of each request's CPU that grows as the rate falls. So
before the cases, every side's CPU is read over `--idle` s with no load (`idle_cores`), and each
run's CPU per request is also given net of it (`cpu_per_request_net_ms`: the run's CPU less
idle_cores x its wall time, over its requests; `ratio_cpu_net_proxy_over_lean`). The gross figure
stays the one the targets were set on.

Per (client protocol, operation, concurrency, qps), `--rounds` rounds; each round runs every side,
rotating which goes first, for `--duration` s after a 1 s warm-up. Figures per side: the median
over rounds of requests/s and of p50/p99 latency; for the proxy and the peers, CPU per request
(the process group, every worker: CPU seconds / requests answered, warm-up included). Ratios:
proxy/direct and proxy/lean throughput, proxy/lean CPU per request, and the added p50 (proxy
p50 - direct p50). `proxy_while_direct`: the proxy's CPU (cores, and ms per request of the
direct side) while the direct side runs. Nothing is routed through it then; a write to a cached
resource (a Lease renewal, a pod status patch) still reaches it as a watch event on its
reflectors, so for writes this is what each replica's caches pay per write made anywhere in the
federation (for GETs it is the idle proxy: the baseline to subtract).

`--pin`: the proxy and the peers on CPU 1, everything else (partitions, etcds, the load client)
on CPU 0, the direct side the same (so it runs with one core as well): what the proxy costs
when it does not wait for a core the partitions need.

Run: `python -m bench.routed_requests [--ops get,renew-lease,patch-status,list]
[--concurrency 1,16] [--qps 0] [--client-protocols h2,http/1.1] [--sides proxy,direct,lean,aiohttp]
[--rounds 3] [--duration 5] [--connections separate|one] [--workers N] [--pin]
[--event-loop asyncio|uvloop]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import contextlib
import os
import socket
import ssl
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.common import (OUT_DIR, REPO, WORK_DIR, client_ssl, emit, fill_protobuf_twin, group_cpu_seconds, group_rss_bytes,
                          host_info, install_sigterm, log, mib, new_session, ratio, session_pids)
from hack.federation import PROXY_ADMINS_GROUP, Federation, _free_ports
from hack.openssl import proxy_env
from hack.procs import stop_process
from hack.proxy_process import ProxyProcess
from proxy.cli import DEFAULT_EVENT_LOOP
from proxy.workers import available_cpus

NAME = "routed_requests"
RVCHECK = REPO / ".local" / "bin" / "rvcheck"
ARTIFACTS = OUT_DIR / NAME  # the Go client's reports of the last run
NAMESPACE = "acme-bench"  # tenant acme: tp1
LEASE_NAMESPACE = "kube-node-lease"
OPS = ("get", "renew-lease", "patch-status", "list")
SIDES = ("proxy", "direct", "lean", "aiohttp")
PEER_MODULES = {"lean": "bench.peers.lean_forwarder", "aiohttp": "bench.peers.aiohttp_forwarder"}
WARMUP = "1s"  # rvcheck requests --warmup: the TLS handshake and first requests are not counted
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


TWIN_PATHS = (f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases", f"/api/v1/namespaces/{NAMESPACE}/pods")


TWIN_TIMEOUT = 15.0  # seconds a twin may take to fill (a few: 16 objects); past it, the cache has none


async def fill_twins(fed: Federation, proxy: ProxyProcess, workers: int) -> dict[str, float | None]:
    """Protobuf-first LISTs through the proxy until the caches of TWIN_PATHS answer protobuf
    (seconds each; None for a cache without a twin, as node-leases by default). Each worker
    holds its own caches and a connection lands on any of them, so each path is asked on
    `workers` x 4 fresh connections (a worker left unfilled only makes the figure lower)."""
    cert = fed.ca.issue_client(fed.root / "twins", "bench-twins", "admin", [PROXY_ADMINS_GROUP])
    out: dict[str, float | None] = {}
    for path in TWIN_PATHS:
        seconds: float | None = 0.0
        for _ in range(workers * 4 if workers > 1 else 1):
            session = new_session(client_ssl(fed, cert))
            try:
                seconds = max(seconds or 0.0, await fill_protobuf_twin(session, proxy.server, timeout=TWIN_TIMEOUT, path=path))
            except RuntimeError:
                seconds = None  # answered JSON throughout: no twin
                break
            finally:
                await session.close()
        out[path] = round(seconds, 2) if seconds is not None else None
    return out


def run_rvcheck(kubeconfig: Path, op: str, concurrency: int, objects: int, duration: float, report: Path, *,
                separate: bool, protocol: str, qps: float = 0.0) -> dict[str, Any]:
    """One `rvcheck requests` run; returns its report. `separate`: one connection per worker
    (as many kubelets), else all on one connection (one kubelet). `protocol` `http/1.1` turns
    client-go's HTTP/2 off (DISABLE_HTTP2). `qps` > 0: all workers together at that many
    requests per second."""
    lease_op = op == "renew-lease"
    names = [f"rp1-bench-{i}" if lease_op else f"bench-{i}" for i in range(objects)]
    argv = [str(RVCHECK), "requests", "--kubeconfig", str(kubeconfig), "--op", op,
            "--namespace", LEASE_NAMESPACE if lease_op else NAMESPACE, "--names", ",".join(names),
            "--concurrency", str(concurrency), "--connections", str(concurrency if separate else 1), "--duration", f"{duration}s", "--warmup", WARMUP,
            "--qps", f"{qps:g}"]
    env = {**os.environ, "DISABLE_HTTP2": "1"} if protocol == "http/1.1" else None
    with report.open("wb") as out:
        subprocess.run(argv, stdout=out, stderr=sys.stderr, stdin=subprocess.DEVNULL, timeout=duration + 120, check=False, env=env)
    doc = json.loads(report.read_bytes())
    if doc.get("fatal"):
        raise RuntimeError(f"rvcheck requests {op} x{concurrency}: {doc['fatal']}")
    return doc


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else 0.0


class Peer:
    """`processes` processes of a `bench.peers` forwarder sharing one port, each in a session of
    its own (its CPU is the sum of those sessions')."""

    def __init__(self, fed: Federation, module: str, directory: Path, processes: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.module = module
        self.port = _free_ports(1)[0]
        crt, key = fed.ca.issue_serving(directory, "peer-serving", ["127.0.0.1", "localhost"])
        tp1, rp1 = fed.partition("tp1"), fed.partition("rp1")
        proxy_crt, proxy_key = tp1.proxy_cert  # the proxy's own credential (the same CA signs every partition's)
        self.argv = [sys.executable, "-m", module, "--port", str(self.port), "--cert", str(crt), "--key", str(key),
                     "--client-ca", str(fed.ca_file), "--upstream", f"tp={tp1.server}", "--upstream", f"rp={rp1.server}",
                     "--upstream-ca", str(fed.ca_file), "--upstream-cert", str(proxy_crt), "--upstream-key", str(proxy_key)]
        self.log_path = directory / "peer.log"
        self.processes = processes
        self.popens: list[subprocess.Popen[bytes]] = []

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self, ca_file: Path, timeout: float = 30.0) -> Peer:
        log_file = self.log_path.open("ab")
        for _ in range(self.processes):
            self.popens.append(subprocess.Popen(self.argv, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO,
                                                env={**os.environ, **proxy_env()}))  # the proxy's OpenSSL
        log_file.close()
        ctx = ssl.create_default_context(cafile=str(ca_file))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.popens):
                raise RuntimeError(f"{self.module} exited:\n{self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock, ctx.wrap_socket(sock, server_hostname="127.0.0.1"):
                    pass
                return self
            except ssl.SSLError:
                return self  # it answered the handshake (and asked for a client certificate)
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.module} not listening after {timeout:.0f} s")

    def sessions(self) -> list[int]:
        return [p.pid for p in self.popens]

    def stop(self) -> None:
        for popen in self.popens:
            stop_process(popen)
        self.popens = []


def pin(sessions: list[int], cpus: set[int]) -> None:
    """Every thread of every process in `sessions` on `cpus`."""
    for sid in sessions:
        for _, pid in session_pids(sid):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(tid), cpus)


def idle_cores(sides: dict[str, Side], seconds: float) -> dict[str, float]:
    """Each side's CPU in cores over the same `seconds` with no load (sides without a process of
    their own are left out)."""
    own = {name: side for name, side in sides.items() if side.sessions}
    cpu0, t0 = {name: side.cpu() for name, side in own.items()}, time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    return {name: round((side.cpu() - cpu0[name]) / wall, 5) for name, side in own.items()}


def measure(sides: dict[str, Side], args: argparse.Namespace, idle: dict[str, float]) -> list[dict[str, Any]]:
    """Every case of `args`; `idle`: each side's CPU with no load (cores), subtracted for the
    net figures."""
    cases = []
    for protocol in args.client_protocols:
        for op in args.ops:
            direct = "rp1" if op == "renew-lease" else "tp1"
            for concurrency in args.concurrency:
                for qps in args.qps:
                    cases.append(_case(sides, args, idle, protocol, op, direct, concurrency, qps))
    return cases


def _case(sides: dict[str, Side], args: argparse.Namespace, idle: dict[str, float], protocol: str, op: str, direct: str,
          concurrency: int, qps: float) -> dict[str, Any]:
    names = [name for name in args.sides]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    cpu_per_request: dict[str, list[float]] = {name: [] for name in names}
    cpu_per_request_net: dict[str, list[float]] = {name: [] for name in names}
    # the proxy's CPU while the direct side runs: its caches' work for writes it does not route
    # (every write to a cached resource is an event on each of its reflectors' watches)
    proxy_while_direct: list[tuple[float, float, int]] = []  # (CPU seconds, wall seconds, requests)
    proxy_side = sides.get("proxy")
    for rnd in range(args.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for name in order:
            side = sides[name]
            kubeconfig = side.kubeconfigs.get(direct) or side.kubeconfigs["all"]
            report = ARTIFACTS / f"{protocol.replace('/', '')}-{op}-c{concurrency}-q{qps:g}-r{rnd}-{name}.json"
            cpu0, wall0 = side.cpu(), time.monotonic()
            proxy0 = proxy_side.cpu() if proxy_side is not None and name == "direct" else 0.0
            doc = run_rvcheck(kubeconfig, op, concurrency, args.objects, args.duration, report,
                              separate=args.connections == "separate", protocol=protocol, qps=qps)
            cpu1, wall1 = side.cpu(), time.monotonic()
            if proxy_side is not None and name == "direct":
                proxy_while_direct.append((proxy_side.cpu() - proxy0, time.monotonic() - wall0, doc["requests_with_warmup"]))
            runs[name].append(doc)
            if side.sessions:
                cpu_per_request[name].append((cpu1 - cpu0) / max(doc["requests_with_warmup"], 1) * 1000)
                net = cpu1 - cpu0 - idle.get(name, 0.0) * (wall1 - wall0)
                cpu_per_request_net[name].append(net / max(doc["requests_with_warmup"], 1) * 1000)
    case: dict[str, Any] = {"client_protocol": protocol, "op": op, "concurrency": concurrency, "qps": qps, "direct_partition": direct}
    for name, docs in runs.items():
        case[name] = {
            "requests_per_second": median([d["requests_per_second"] for d in docs]),
            "p50_ms": median([d["latency_ms"]["p50_ms"] for d in docs]),
            "p99_ms": median([d["latency_ms"]["p99_ms"] for d in docs]),
            "failed": sum(d["failed"] for d in docs),
            "conflicts": sum(d["conflicts"] for d in docs),
            "rounds": [{"requests_per_second": d["requests_per_second"], "p50_ms": d["latency_ms"]["p50_ms"],
                        "p99_ms": d["latency_ms"]["p99_ms"], "requests": d["requests"]} for d in docs],
        }
        if cpu_per_request[name]:
            case[name]["cpu_per_request_ms"] = median(cpu_per_request[name])
            case[name]["cpu_per_request_ms_rounds"] = [round(c, 4) for c in cpu_per_request[name]]
            case[name]["cpu_per_request_net_ms"] = median(cpu_per_request_net[name])
    if proxy_while_direct:
        case["proxy_while_direct"] = {
            "cores": median([cpu / wall for cpu, wall, _ in proxy_while_direct]),
            "cpu_per_direct_request_ms": median([cpu / max(n, 1) * 1000 for cpu, _, n in proxy_while_direct]),
        }
    proxy = case.get("proxy")
    if proxy is not None and "direct" in case:
        case["ratio_throughput_proxy_over_direct"] = ratio(proxy["requests_per_second"], case["direct"]["requests_per_second"])
        case["added_p50_ms"] = round(proxy["p50_ms"] - case["direct"]["p50_ms"], 3)
    if proxy is not None and "lean" in case:
        case["ratio_throughput_proxy_over_lean"] = ratio(proxy["requests_per_second"], case["lean"]["requests_per_second"])
        case["ratio_cpu_proxy_over_lean"] = ratio(proxy["cpu_per_request_ms"], case["lean"]["cpu_per_request_ms"])
        case["ratio_cpu_net_proxy_over_lean"] = ratio(proxy["cpu_per_request_net_ms"], case["lean"]["cpu_per_request_net_ms"])
    log(f"{protocol} {op} x{concurrency}" + (f" at {qps:g}/s" if qps else "") + ": " + "; ".join(
        f"{name} {case[name]['requests_per_second']}/s p50 {case[name]['p50_ms']} ms"
        + (f" cpu {case[name]['cpu_per_request_ms']} ms/req" if "cpu_per_request_ms" in case[name] else "") for name in names)
        + f"; proxy/direct {case.get('ratio_throughput_proxy_over_direct')}, proxy/lean {case.get('ratio_throughput_proxy_over_lean')},"
          f" cpu proxy/lean {case.get('ratio_cpu_proxy_over_lean')} (net of idle {case.get('ratio_cpu_net_proxy_over_lean')})")
    return case


class Side:
    """One side of the comparison: its kubeconfigs (by direct partition, or `all`) and the
    sessions whose CPU is its own (none for the partitions)."""

    def __init__(self, kubeconfigs: dict[str, Path], sessions: list[int]) -> None:
        self.kubeconfigs = kubeconfigs
        self.sessions = sessions

    def cpu(self) -> float:
        return sum(group_cpu_seconds(sid) for sid in self.sessions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default=",".join(OPS), help="operations (comma-separated): " + ", ".join(OPS))
    ap.add_argument("--concurrency", default="1,16", help="concurrent requests (comma-separated)")
    ap.add_argument("--qps", default="0",
                    help="requests per second of the load client's workers together (comma-separated; 0: no limit)")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds over which each side's CPU is read with no load first")
    ap.add_argument("--client-protocols", default="h2,http/1.1", help="what the load client speaks (comma-separated): h2, http/1.1")
    ap.add_argument("--sides", default=",".join(SIDES), help="sides (comma-separated): " + ", ".join(SIDES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0, help="counted seconds per run")
    ap.add_argument("--connections", choices=("separate", "one"), default="separate",
                    help="separate: each concurrent client on its own connection (many kubelets, the default); one: all on one HTTP/2 connection (one kubelet)")
    ap.add_argument("--objects", type=int, default=16, help="pods and node Leases (one per worker)")
    ap.add_argument("--event-loop", default="", help="the proxy's serve --event-loop (default: the proxy's)")
    ap.add_argument("--workers", type=int, default=0, help="proxy worker processes, and peer processes (0: the proxy's default, one per CPU)")
    ap.add_argument("--pin", action="store_true", help="the proxy and the peers on CPU 1, everything else on CPU 0")
    ap.add_argument("--twins", action="store_true",
                    help="fill the protobuf twins of the pod and node-Lease caches first, where they have one (as kubelets and "
                         "controllers do in a federation): each write is then an event in both formats")
    ap.add_argument("--no-caches", action="store_true",
                    help="the proxy without watch caches (a diagnosis: what the caches' event work adds to each write)")
    args = ap.parse_args()
    args.ops = [o for o in args.ops.split(",") if o]
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    args.qps = [float(q) for q in args.qps.split(",") if q]
    args.client_protocols = [p for p in args.client_protocols.split(",") if p]
    args.sides = [s for s in args.sides.split(",") if s]
    if unknown := set(args.ops) - set(OPS):
        ap.error(f"unknown --ops {sorted(unknown)}")
    if any(q < 0 for q in args.qps):
        ap.error("--qps must not be negative")
    if unknown := set(args.client_protocols) - {"h2", "http/1.1"}:
        ap.error(f"unknown --client-protocols {sorted(unknown)}")
    if unknown := set(args.sides) - set(SIDES):
        ap.error(f"unknown --sides {sorted(unknown)}")
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        ap.error("--pin needs two CPUs")
    if not RVCHECK.exists():
        print(f"{NAME}: {RVCHECK} missing: run `bash hack/build-components.sh`", file=sys.stderr)
        raise SystemExit(2)
    install_sigterm()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin:  # this process, and so the federation and every load client, on the first CPU
        os.sched_setaffinity(0, {cpus[0]})
    workers = args.workers or available_cpus()
    t0 = time.monotonic()
    fed = Federation(WORK_DIR / NAME, tenant_partitions=1, resource_partitions=1)
    proxy: ProxyProcess | None = None
    peers: dict[str, Peer] = {}
    try:
        fed.start()
        proxy = ProxyProcess(fed, fed.root / "proxy", workers=workers, event_loop=args.event_loop or None,
                             caches=[] if args.no_caches else None).start(timeout=180)
        assert proxy.popen is not None
        for name in ("lean", "aiohttp"):
            if name in args.sides:
                peers[name] = Peer(fed, PEER_MODULES[name], fed.root / name, workers).start(fed.ca_file)
        if args.pin:
            pin([proxy.popen.pid, *(sid for peer in peers.values() for sid in peer.sessions())], {cpus[-1]})
        log(f"federation, proxy and peers up in {time.monotonic() - t0:.1f} s (proxy {proxy.server}; pinned: {args.pin})")
        asyncio.run(create_objects(fed, args.objects))
        if args.twins:
            filled = asyncio.run(fill_twins(fed, proxy, workers))
            log(f"protobuf twins filled: {filled}")
        sides = {
            "proxy": Side({"all": fed.issue_client_kubeconfig("bench-requests", user="admin", groups=[PROXY_ADMINS_GROUP], server=proxy.server)},
                          [proxy.popen.pid]),
            "direct": Side({"tp1": fed.partition("tp1").admin_kubeconfig, "rp1": fed.partition("rp1").admin_kubeconfig}, []),
        }
        for name, peer in peers.items():
            sides[name] = Side({"all": fed.issue_client_kubeconfig(f"bench-{name}", user="admin", groups=[PROXY_ADMINS_GROUP], server=peer.server)},
                               peer.sessions())
        rss0 = group_rss_bytes(proxy.popen.pid)
        idle = idle_cores(sides, args.idle)
        log(f"idle CPU (cores): {idle}")
        cases = measure(sides, args, idle)
        rss1 = group_rss_bytes(proxy.popen.pid)
    finally:
        for peer in peers.values():
            peer.stop()
        if proxy is not None:
            proxy.stop()
        fed.stop()
    emit(NAME + ("-pinned" if args.pin else ""), {
        "benchmark": NAME,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": host_info(),
        "params": {**vars(args), "warmup": WARMUP, "proxy_workers": workers, "peer_processes": workers,
                   "proxy_event_loop": args.event_loop or DEFAULT_EVENT_LOOP},
        "peer": "direct: the partition that owns the objects (tp1: pods, rp1: node Leases), the same client straight to it; "
                "lean and aiohttp: bench.peers forwarders in front of the same partitions",
        "proxy_rss_mib": {"before": mib(rss0), "after": mib(rss1)},
        "idle_cores": idle,
        "cases": cases,
        "total_seconds": round(time.monotonic() - t0, 1),
    })


if __name__ == "__main__":
    main()
