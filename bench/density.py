"""A density test in the clusterloader2 style: N kwok nodes, M pods created at a fixed rate, the
real schedulers, controller managers and kwok through the proxy; the same scenario with the
same components straight at one partition as the peer, in the same run.

Set-up per step (a fresh federation each; `--steps` makes a ladder of node counts):
`Federation(root, tenant_partitions=2, resource_partitions=3)`: tp1, tp2, rp1, rp2 behind one
proxy (`ProxyProcess`, the proxy's default config: watch caches of nodes and node Leases) and
rp3, which the proxy does not front. The two sides run one after the other (2 cores: running
them at once would make each the other's load), each with its own components:

- **proxy**: `hack.controlplane.ControlPlane` (per TP a kube-scheduler and a
  kube-controller-manager pinned to it, per RP a kube-controller-manager with the node
  controllers, kwok), every one a client of the proxy; the N nodes are created straight on the
  RPs as fixtures (`rp1-density-00000`, `rp2-density-00001`, ... alternately);
- **direct** (the peer): `hack.controlplane.DirectControlPlane` on rp3 (one kube-scheduler, one
  kube-controller-manager with both controller sets, kwok), the same N nodes on rp3.

Nodes are `kwok_node` (32 CPUs, 110 pods, label type=kwok) created Ready and then untainted
(`ready_kwok_node`, `untaint_nodes`: fixtures, not measured). Once every node is Ready and
untainted (read straight from the partitions) and `--hollow-kubelets` kubemark kubelets have
registered, the tenants' namespaces are created (through the proxy, spread over the TPs of
`--into`), and then:

- `rvcheck pod-watch` (Go, client-go informers): the pod startup watcher. On the proxy side one
  through the proxy (a cluster-wide union watch, as a user's `kubectl get pods -A -w`) and one
  straight to the TPs (the per-hop view: when each step landed in the TP); on the direct side
  one straight to rp3;
- `rvcheck create-pods` (Go): M bare pods at `--rate` pods/s, round robin over the tenants'
  namespaces, each stamped with the wall clock of its send. Bare pods, not Deployments: the
  create time is the client's own (ns), the rate is exactly the one asked (a Deployment's pods
  are created by the replicaset controller at its 20 QPS client limit, and the proxy side has
  two of them where the direct side has one), and the path measured is the one every pod
  takes: create -> scheduler (watch, bind) -> kwok (watch, status patch) -> a watcher.

Figures per side: pod startup latency (create -> Running seen by the watch; create -> bound
seen by the watch; bound -> Running) p50/p90/p99/max and the CDF; failed pods (not Running in
time, Failed, or not created); pods/s; per-hop times on the proxy side (from the TP watcher);
every node Lease renewed during the pod phase (renewTime advancing, listed straight from the
RPs every `LEASE_SAMPLE_SECONDS`, with the largest renewTime age seen); proxy CPU and RSS every
second; the request SLI histogram `apiserver_request_sli_duration_seconds` of the proxy and of
the peer kube-apiserver (and of the proxy's partitions), diffed over the pod phase: p50/p99 per
verb, resource, subresource and scope against clusterloader2's SLOs (1 s single-object and
mutating, 5 s namespace LIST, 30 s cluster LIST); upstream watches
(`apiserver_longrunning_requests{verb="WATCH"}` straight from each partition, with the control
plane up, less those open before it started) and the proxy's downstream watches; proxy memory per node and per hollow kubelet.

Output: one JSON document (stdout, and .local/bench/density.json), PNGs under .local/bench/
(startup CDF proxy vs direct; proxy CPU and RSS over time per step), per-pod CSVs under
.local/bench/density/; `python -m bench.report .local/bench/density.json` renders the tables.
Impossible parameters are refused in one line before anything starts (exit 2). Ctrl-C/SIGTERM
stops every process the run started and deletes its federation root.

Run: `python -m bench.density [--nodes 1000] [--pods 2000] [--rate 20] [--tenants 4] [--steps 1000,5000,10000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import http.client
import math
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.common import (
    OUT_DIR,
    REPO,
    WORK_DIR,
    apiserver_pid,
    client_ssl,
    cpu_seconds,
    post_objects,
    emit,
    host_info,
    hwm_bytes,
    install_sigterm,
    log,
    new_session,
    percentile,
    ratio,
    rss_bytes,
    run_steps,
)
from bench.union_watch import schedstat
from hack.controlplane import KWOK_SELECTOR, ControlPlane, DirectControlPlane, HollowNode, kwok_node
from hack.federation import HOST, PROXY_ADMINS_GROUP, Federation, find_kubectl
from hack.procs import die_with_parent, stop_process
from hack.proxy_process import ProxyProcess, tenant_ranges

NAME = "density"
RVCHECK = REPO / ".local" / "bin" / "rvcheck"
ARTIFACTS = OUT_DIR / NAME  # per-pod CSVs and the Go clients' reports of the last run
TENANT_PARTITIONS = ("tp1", "tp2")
RESOURCE_PARTITIONS = ("rp1", "rp2")
PROXIED = (*TENANT_PARTITIONS, *RESOURCE_PARTITIONS)
PEER = "rp3"  # the partition the proxy does not front: the direct side's cluster
POD_CAPACITY = int(kwok_node("x")["status"]["capacity"]["pods"])  # pods per kwok node (110)
# Tenant names by tenant partition: tenants a..m live in tp1, n..z in tp2 (hack.proxy_process
# tenant_ranges); a namespace's tenant is the text before its first "-".
TENANT_WORDS = ("acme", "bolt", "cobalt", "delta", "echo", "fjord", "gala", "halo", "iris", "jade", "kilo", "lumen", "mango",
                "nova", "onyx", "pixel", "quartz", "rune", "sable", "tango", "umbra", "vega", "willow", "xenon", "yonder", "zeta")
SLI = "apiserver_request_sli_duration_seconds"
NODE_INFIX = "-density-"  # in the name of every node (and so its Lease) the test creates
# clusterloader2's API call latency SLOs (seconds, p99 over the test) by the SLI's scope label.
SLO_SECONDS = {"resource": 1.0, "namespace": 5.0, "cluster": 30.0}
# The issue's targets.
TARGET_NODES, TARGET_PODS = 1000, 2000
TARGET_P99_RATIO = 1.2
TARGET_P99_SECONDS = 5.0
TARGET_DIRECT_UNDER_SECONDS = 4.0
# seconds
LEASE_SAMPLE_SECONDS = 5.0  # kwok renews every 10 s (hack/controlplane.py NODE_LEASE_SECONDS / 4)
MIN_LEASE_WINDOW_SECONDS = 25.0  # the pod phase's lease window is at least two renew periods and a bit
SETTLE_SECONDS = 5.0
READY_FILE_TIMEOUT = 120.0
HTTP_TIMEOUT = 60.0
PROBE_SECONDS = 0.25


class Refused(Exception):
    """Parameters that cannot work: one line, exit 2, nothing started."""


# -- parameters -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    steps: tuple[int, ...]  # node counts, one step each
    pods: int
    rate: float
    tenants: int
    into: tuple[str, ...]  # tenant partitions that get pods
    nodes_on: tuple[str, ...]  # resource partitions that hold the nodes
    hollow_kubelets: int
    sides: tuple[str, ...]
    clients: int
    drain_seconds: float
    content_type: str
    keep: bool
    profile: bool
    renice_proxy: int


def parse_args(argv: Sequence[str] | None = None) -> Params:
    ap = argparse.ArgumentParser(prog="python -m bench.density", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=TARGET_NODES, help="kwok nodes (split over --nodes-on)")
    ap.add_argument("--steps", default="", help="a ladder of node counts, e.g. 1000,5000,10000 (overrides --nodes)")
    ap.add_argument("--pods", type=int, default=TARGET_PODS, help="pods created per side and step")
    ap.add_argument("--rate", type=float, default=20.0, help="pods created per second (clusterloader2's density default: 20)")
    ap.add_argument("--tenants", type=int, default=4, help="tenants (one namespace each), spread over --into")
    ap.add_argument("--into", default=",".join(TENANT_PARTITIONS), help="tenant partitions the pods go into")
    ap.add_argument("--nodes-on", default=",".join(RESOURCE_PARTITIONS), help="resource partitions that hold the nodes")
    ap.add_argument("--hollow-kubelets", type=int, default=2, help="kubemark hollow kubelets per side (memory per kubelet)")
    ap.add_argument("--sides", default="proxy,direct", help="sides in the order they run")
    ap.add_argument("--clients", type=int, default=16, help="the creator's concurrent connections")
    ap.add_argument("--drain-seconds", type=float, default=120.0, help="how long pods may take after the last create")
    ap.add_argument("--content-type", default="protobuf", choices=("protobuf", "json"), help="of the Go clients")
    ap.add_argument("--keep", action="store_true", help="keep the federation root (logs, etcd data) after the run")
    ap.add_argument("--profile", action="store_true", help="py-spy record the proxy during each proxy pod phase")
    ap.add_argument("--renice-proxy", type=int, default=0,
                    help="a diagnosis: run the proxy at this nice value (negative: ahead of the other processes)")
    a = ap.parse_args(argv)
    try:
        steps = tuple(int(x) for x in a.steps.split(",") if x.strip()) if a.steps.strip() else (a.nodes,)
    except ValueError:
        raise Refused(f"--steps must be node counts separated by commas, not {a.steps!r}") from None
    params = Params(
        steps=steps, pods=a.pods, rate=a.rate, tenants=a.tenants,
        into=tuple(x.strip() for x in a.into.split(",") if x.strip()),
        nodes_on=tuple(x.strip() for x in a.nodes_on.split(",") if x.strip()),
        hollow_kubelets=a.hollow_kubelets, sides=tuple(x.strip() for x in a.sides.split(",") if x.strip()),
        clients=a.clients, drain_seconds=a.drain_seconds, content_type=a.content_type, keep=a.keep, profile=a.profile,
        renice_proxy=a.renice_proxy,
    )
    validate(params)
    return params


def validate(p: Params) -> None:
    """Raise Refused (one line) for parameters that cannot work."""
    known = {*PROXIED, PEER}
    for flag, names, role, allowed in (("--into", p.into, "tenant", TENANT_PARTITIONS),
                                       ("--nodes-on", p.nodes_on, "resource", RESOURCE_PARTITIONS)):
        if not names:
            raise Refused(f"{flag} names no partition")
        for name in names:
            if name not in known:
                raise Refused(f"{flag}: unknown partition {name!r} (the federation has {', '.join(sorted(known))})")
            if name not in allowed:
                raise Refused(f"{flag}: {name} is not a {role} partition behind the proxy ({', '.join(allowed)})")
        if len(set(names)) != len(names):
            raise Refused(f"{flag} names a partition twice")
    if not p.steps or any(n <= 0 for n in p.steps):
        raise Refused("node counts must be positive")
    if p.pods <= 0:
        raise Refused(f"--pods must be positive, not {p.pods}")
    if not p.rate > 0 or math.isinf(p.rate):
        raise Refused(f"--rate must be a positive number of pods per second, not {p.rate:g}")
    fewest = min(p.steps)
    if p.pods > fewest * POD_CAPACITY:
        raise Refused(f"{p.pods:,} pods do not fit on {fewest:,} nodes ({POD_CAPACITY} pods each: {fewest * POD_CAPACITY:,})")
    if p.tenants < len(p.into):
        raise Refused(f"--tenants {p.tenants}: every partition of --into needs a tenant ({len(p.into)})")
    if p.tenants > p.pods:
        raise Refused(f"--tenants {p.tenants} is more than --pods {p.pods}")
    if p.hollow_kubelets < 0 or p.clients < 1 or p.drain_seconds <= 0:
        raise Refused("--hollow-kubelets must be >= 0, --clients >= 1, --drain-seconds > 0")
    if not p.sides or any(s not in ("proxy", "direct") for s in p.sides) or len(set(p.sides)) != len(p.sides):
        raise Refused(f"--sides must be proxy and/or direct, each once, not {','.join(p.sides)!r}")


def tenant_namespaces(p: Params) -> dict[str, str]:
    """namespace -> the tenant partition that owns it: tenant i goes to into[i mod len(into)],
    named from that partition's letter range (a-m: tp1, n-z: tp2)."""
    ranges = {r["partition"]: (r["first"], r["last"]) for r in tenant_ranges(list(TENANT_PARTITIONS))}
    out: dict[str, str] = {}
    for i in range(p.tenants):
        tp = p.into[i % len(p.into)]
        first, last = ranges[tp]
        words = [w for w in TENANT_WORDS if first <= w[0] <= last]
        k = i // len(p.into)
        word = words[k % len(words)] + (str(k // len(words) + 1) if k >= len(words) else "")
        out[f"{word}-density"] = tp
    return out


# -- processes ------------------------------------------------------------------------------


class GoClients:
    """The Go load clients of a run: stdout (the report) to a file, stderr (progress) to the
    terminal, killed with this process (PDEATHSIG); `stop_all()` from a finally."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, args: Sequence[str]) -> tuple[subprocess.Popen[bytes], Path]:
        self.directory.mkdir(parents=True, exist_ok=True)
        out = self.directory / f"{name}.json"
        main = threading.current_thread() is threading.main_thread()
        with out.open("wb") as f:
            proc = subprocess.Popen([str(RVCHECK), *args], stdout=f, stderr=sys.stderr, stdin=subprocess.DEVNULL,
                                    start_new_session=True, preexec_fn=die_with_parent if main else None)
        self.procs.append(proc)
        return proc, out

    @staticmethod
    def report(proc: subprocess.Popen[bytes], out: Path, timeout: float) -> dict[str, Any]:
        """Wait (seconds) for `proc` and parse its report; past `timeout` it is sent SIGTERM
        (the watchers still write their report) and waited for 10 s more."""
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            rc = proc.wait(10)
        text = out.read_bytes()
        if not text.strip():
            raise RuntimeError(f"{proc.args!r} exited {rc} without a report")
        doc: dict[str, Any] = orjson.loads(text)
        doc["exit_status"] = rc
        return doc

    def stop_all(self) -> None:
        for proc in self.procs:
            stop_process(proc, grace=5)
        self.procs.clear()


def wait_ready_file(path: Path, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path.name} not written within {timeout:.0f} s")
        time.sleep(0.2)


def etcd_pid(fed: Federation, partition: str) -> int | None:
    want = fed.partition(partition).etcd_url.encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                if argv and argv[0].endswith(b"etcd") and want in argv:
                    return int(entry)
    return None


def foreign_apiservers(root: Path) -> int:
    """kube-apiservers running on this machine that are not of this run (someone else's
    federation: the figures of a run that shared the machine with one say so)."""
    mine = str(root).encode()
    n = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{entry}/cmdline").read_bytes()
                if argv.split(b"\0", 1)[0].endswith(b"kube-apiserver") and mine not in argv:
                    n += 1
    return n


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent not idle (/proc/stat: every field but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


class Timeline:
    """CPU seconds and RSS of named pids and the machine's busy seconds, sampled every second in
    a thread, with named marks; pids can be added while it runs."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.pids: dict[str, int] = {}
        self.samples: list[tuple[float, dict[str, tuple[float, int]], float]] = []
        self.marks: list[tuple[float, str]] = []
        self.waits: list[dict[str, float]] = []  # run-queue wait seconds (schedstat) per sample
        self.schedstat_of = ("proxy",)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="timeline", daemon=True)
        self.t0 = time.monotonic()

    def watch(self, pids: dict[str, int]) -> None:
        with self._lock:
            self.pids.update(pids)

    def forget(self, names: Iterable[str]) -> None:
        with self._lock:
            for n in names:
                self.pids.pop(n, None)

    def mark(self, label: str) -> float:
        t = time.monotonic()
        with self._lock:
            self.marks.append((t, label))
        return t

    def _sample(self) -> None:
        with self._lock:
            pids = dict(self.pids)
        snap = {}
        for name, pid in pids.items():
            with contextlib.suppress(OSError, RuntimeError, ValueError):
                snap[name] = (cpu_seconds(pid), rss_bytes(pid))
        wait = {}
        for name in self.schedstat_of:
            if name in pids:
                with contextlib.suppress(OSError):
                    wait[name] = schedstat(pids[name])[1]
        with self._lock:
            self.samples.append((time.monotonic(), snap, machine_busy_seconds()))
            self.waits.append(wait)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> Timeline:
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def series(self, name: str, t_from: float, t_to: float) -> list[dict[str, float]]:
        """[{t_s (since t_from), cores (over the interval before), rss_mib}] of `name`
        ("machine": busy cores, no rss) between two monotonic times."""
        with self._lock:
            idx = [i for i, s in enumerate(self.samples) if t_from - self.interval <= s[0] <= t_to + self.interval]
            samples = [self.samples[i] for i in idx]
            waits = [self.waits[i] for i in idx]
        out = []
        for (ta, ca, ma), (tb, cb, mb), wa, wb in zip(samples, samples[1:], waits, waits[1:]):
            if tb < t_from or tb <= ta:
                continue
            if name == "machine":
                out.append({"t_s": round(tb - t_from, 2), "cores": round((mb - ma) / (tb - ta), 3)})
            elif name in ca and name in cb:
                point = {"t_s": round(tb - t_from, 2), "cores": round((cb[name][0] - ca[name][0]) / (tb - ta), 3),
                         "rss_mib": round(cb[name][1] / 2**20, 1)}
                if name in wa and name in wb:
                    # seconds per second the process was runnable but waiting for a CPU
                    point["runqueue_wait"] = round((wb[name] - wa[name]) / (tb - ta), 3)
                out.append(point)
        return out

    def cpu_between(self, name: str, t_from: float, t_to: float) -> dict[str, float] | None:
        """CPU seconds, mean and busiest-second cores of `name` between two monotonic times."""
        pts = self.series(name, t_from, t_to)
        if not pts:
            return None
        secs = max(t_to - t_from, 1e-9)
        cpu = sum(p["cores"] for p in pts) * self.interval
        out = {"cpu_s": round(cpu, 2), "mean_cores": round(cpu / secs, 3), "max_cores": round(max(p["cores"] for p in pts), 3)}
        if all("runqueue_wait" in p for p in pts):
            out["runqueue_wait_s"] = round(sum(p["runqueue_wait"] for p in pts) * self.interval, 2)
        return out


# -- HTTP straight to partitions and to the proxy (plain threads: no event loop needed) -------


class Http:
    """GETs with a client certificate to one server (http.client, one connection per call)."""

    def __init__(self, server: str, ctx: ssl.SSLContext) -> None:
        self.port = int(server.rsplit(":", 1)[1])
        self.ctx = ctx

    def get(self, path: str, *, accept: str = "application/json") -> bytes:
        conn = http.client.HTTPSConnection(HOST, self.port, context=self.ctx, timeout=HTTP_TIMEOUT)
        try:
            conn.request("GET", path, headers={"Accept": accept})
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"GET {path}: {resp.status} {body[:200]!r}")
            return body
        finally:
            conn.close()

    def get_json(self, path: str) -> Any:
        return orjson.loads(self.get(path))


class LivenessProbe:
    """GET /livez on one keep-alive connection every PROBE_SECONDS in a thread, recording the
    round trip (s): on the proxy, an answer of its own (no partition involved), so its latency
    is how long a request waits for the proxy's event loop."""

    def __init__(self, http: Http) -> None:
        self.http = http
        self.points: list[tuple[float, float]] = []  # (monotonic time, seconds)
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="liveness-probe", daemon=True)

    def _run(self) -> None:
        conn: http.client.HTTPSConnection | None = None
        while not self._stop.wait(PROBE_SECONDS):
            try:
                if conn is None:
                    conn = http.client.HTTPSConnection(HOST, self.http.port, context=self.http.ctx, timeout=HTTP_TIMEOUT)
                t = time.monotonic()
                conn.request("GET", "/livez")
                conn.getresponse().read()
                self.points.append((t, time.monotonic() - t))
            except (OSError, http.client.HTTPException):
                self.errors += 1
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def start(self) -> LivenessProbe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(HTTP_TIMEOUT)

    def between(self, t_from: float, t_to: float) -> list[float]:
        return [v for t, v in self.points if t_from <= t <= t_to]


def parse_time(text: str) -> float:
    """RFC 3339 (kube MicroTime or Time) -> Unix seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def nodes_poll_seconds(nodes: int) -> float:
    """Seconds between two `nodes_state` reads while waiting for the nodes: 1 s per 2,000 nodes,
    at least 1 s. Each read lists every node in JSON from Python; at 10,000 nodes a read a second
    kept half a core of this 2-core machine busy, and the load client must not be the limit."""
    return max(1.0, nodes / 2000)


def nodes_state(clients: Sequence[Http], infix: str) -> dict[str, int]:
    """Nodes whose name holds `infix` on the partitions: total, Ready, Ready without any taint."""
    total = ready = schedulable = 0
    for h in clients:
        items = h.get_json(f"/api/v1/nodes?labelSelector={KWOK_SELECTOR}&resourceVersion=0")["items"]
        for n in items:
            if infix not in n["metadata"]["name"]:
                continue
            total += 1
            ok = any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
            ready += ok
            schedulable += ok and not n["spec"].get("taints")
    return {"total": total, "ready": ready, "ready_untainted": schedulable}


def count_leases(clients: Sequence[Http], infix: str) -> int:
    """Leases in kube-node-lease whose name holds `infix`, straight from the partitions."""
    return sum(1 for h in clients
               for lease in h.get_json("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases?resourceVersion=0")["items"]
               if infix in lease["metadata"]["name"])


class LeaseMonitor:
    """Lists the node Leases in kube-node-lease straight from the partitions every
    LEASE_SAMPLE_SECONDS in a thread; per lease of a node whose name holds `infix`, its first and last
    renewTime seen and the largest age (sample time - renewTime) seen."""

    def __init__(self, clients: Sequence[Http], infix: str) -> None:
        self.clients = clients
        self.infix = infix
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.renewals: dict[str, set[float]] = {}
        self.max_age: dict[str, float] = {}
        self.samples = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-monitor", daemon=True)

    def _sample(self) -> None:
        for h in self.clients:
            try:
                items = h.get_json("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases?resourceVersion=0")["items"]
            except (OSError, RuntimeError, http.client.HTTPException) as exc:
                self.errors.append(repr(exc))
                continue
            now = time.time()
            for lease in items:
                name = lease["metadata"]["name"]
                renew = lease.get("spec", {}).get("renewTime")
                if self.infix not in name or not renew:
                    continue
                t = parse_time(renew)
                self.first.setdefault(name, t)
                self.last[name] = t
                self.renewals.setdefault(name, set()).add(t)
                self.max_age[name] = max(self.max_age.get(name, 0.0), now - t)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(LEASE_SAMPLE_SECONDS):
            self._sample()

    def start(self) -> LeaseMonitor:
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(HTTP_TIMEOUT)
        self._sample()
        renewed = sum(1 for n in self.first if self.last[n] > self.first[n])
        ages = sorted(self.max_age.values())
        return {
            "leases_seen": len(self.first),
            "renewed_during_window": renewed,
            "not_renewed": sorted(n for n in self.first if self.last[n] <= self.first[n])[:20],
            "renewals_seen_mean": round(sum(len(v) for v in self.renewals.values()) / max(len(self.renewals), 1), 2),
            "max_renew_age_s": round(ages[-1], 2) if ages else None,
            "p99_of_max_renew_age_s": round(percentile(ages, 99), 2) if ages else None,
            "samples": self.samples,
            "errors": self.errors[:5],
        }


# -- Prometheus text ------------------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str, names: Iterable[str]) -> list[tuple[str, dict[str, str], float]]:
    """Samples of the metric families `names` (exact sample names, e.g. `x_bucket`)."""
    wanted = set(names)
    out = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if m and m.group(1) in wanted:
            out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


SliKey = tuple[str, str, str, str]  # verb, resource (group/resource), subresource, scope
Histogram = dict[SliKey, dict[float, float]]  # key -> {le: cumulative count}


def sli_histograms(text: str) -> Histogram:
    """apiserver_request_sli_duration_seconds buckets by (verb, group/resource, subresource, scope)."""
    out: Histogram = {}
    for _, labels, value in parse_metrics(text, [f"{SLI}_bucket"]):
        resource = labels.get("resource", "")
        if labels.get("group"):
            resource = f"{resource}.{labels['group']}"
        key = (labels.get("verb", ""), resource, labels.get("subresource", ""), labels.get("scope", ""))
        le = math.inf if labels["le"] == "+Inf" else float(labels["le"])
        buckets = out.setdefault(key, {})
        buckets[le] = buckets.get(le, 0.0) + value
    return out


def sum_histograms(hs: Iterable[Histogram]) -> Histogram:
    out: Histogram = {}
    for h in hs:
        for key, buckets in h.items():
            acc = out.setdefault(key, {})
            for le, v in buckets.items():
                acc[le] = acc.get(le, 0.0) + v
    return out


def diff_histograms(after: Histogram, before: Histogram) -> Histogram:
    out: Histogram = {}
    for key, buckets in after.items():
        prev = before.get(key, {})
        d = {le: v - prev.get(le, 0.0) for le, v in buckets.items()}
        if d.get(math.inf, 0) > 0:
            out[key] = d
    return out


def histogram_quantile(q: float, buckets: dict[float, float]) -> tuple[float, float] | None:
    """Prometheus' histogram_quantile (linear within the bucket; the highest finite bound when
    the rank falls in +Inf) and the upper bound of the bucket the rank falls in. Seconds."""
    les = sorted(buckets)
    total = buckets.get(math.inf, 0.0)
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le in les:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return prev_le, le
            if count == prev_count:
                return le, le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count), le
        prev_le, prev_count = le, count
    return prev_le, math.inf


def sli_rows(h: Histogram) -> dict[str, dict[str, Any]]:
    """Per key 'VERB resource[/subresource] scope' of a resource request (WATCH and CONNECT
    left out, as clusterloader2 does): count, p50 and p99 (ms, interpolated as
    histogram_quantile does, and the upper bound of their bucket: the histogram's first bucket
    ends at 50 ms, so anything faster reads as "< 50"), the SLO (s) and whether p99 meets it."""
    out = {}
    for (verb, resource, sub, scope), buckets in sorted(h.items()):
        if verb in ("WATCH", "CONNECT") or not resource:
            continue
        p50, p99 = histogram_quantile(0.5, buckets), histogram_quantile(0.99, buckets)
        slo = SLO_SECONDS.get(scope)
        out[f"{verb} {resource}{'/' + sub if sub else ''} {scope}"] = {
            "verb": verb, "resource": resource, "subresource": sub, "scope": scope,
            "count": int(buckets.get(math.inf, 0)),
            "p50_ms": None if p50 is None else round(p50[0] * 1000, 1),
            "p50_bucket_le_ms": None if p50 is None else (None if math.isinf(p50[1]) else round(p50[1] * 1000)),
            "p99_ms": None if p99 is None else round(p99[0] * 1000, 1),
            "p99_bucket_le_ms": None if p99 is None else (None if math.isinf(p99[1]) else round(p99[1] * 1000)),
            "slo_s": slo,
            "slo_met": None if slo is None or p99 is None else p99[0] <= slo,
        }
    return out


def watch_counts(text: str) -> dict[str, int]:
    """WATCH requests open on a kube-apiserver per resource (apiserver_longrunning_requests;
    kube-apiserver 1.36 no longer exports apiserver_registered_watchers)."""
    out: dict[str, int] = {}
    for _, labels, v in parse_metrics(text, ["apiserver_longrunning_requests"]):
        if labels.get("verb") == "WATCH" and v:
            r = labels.get("resource", "")
            if labels.get("group"):
                r = f"{r}.{labels['group']}"
            out[r] = out.get(r, 0) + int(v)
    return dict(sorted(out.items()))


def terminated_watchers(text: str) -> dict[str, int]:
    """Watchers kube-apiserver closed because they did not take their events in time
    (apiserver_terminated_watchers_total, per resource; counted since the apiserver started)."""
    out: dict[str, int] = {}
    for _, labels, v in parse_metrics(text, ["apiserver_terminated_watchers_total"]):
        if v:
            out[labels.get("resource", "")] = out.get(labels.get("resource", ""), 0) + int(v)
    return out


def watch_delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    d = {r: after.get(r, 0) - before.get(r, 0) for r in set(after) | set(before)}
    return {r: n for r, n in sorted(d.items()) if n}


def proxy_watch_counts(text: str) -> dict[str, Any]:
    inflight = {labels.get("kind", ""): int(v) for _, labels, v in parse_metrics(text, ["partition_proxy_inflight_requests"])}
    cache = {labels.get("cache", ""): int(v) for _, labels, v in parse_metrics(text, ["partition_proxy_watch_cache_watchers"])}
    return {"long_running_requests": inflight.get("long-running", 0), "cache_watchers": cache}


# -- per-pod analysis -----------------------------------------------------------------------


@dataclass
class PodTimes:
    seq: int
    pod: str
    sent: float  # Unix seconds; 0 = unknown
    added: float
    bound: float
    running: float
    failed: float
    node: str


def read_pod_csv(path: Path) -> dict[int, PodTimes]:
    out: dict[int, PodTimes] = {}
    if not path.exists():
        return out
    with path.open() as f:
        for row in csv.reader(f):
            seq, pod, sent, added, bound, running, failed, node = row
            ns = [int(x) / 1e9 for x in (sent, added, bound, running, failed)]
            out[int(seq)] = PodTimes(int(seq), pod, sent=ns[0], added=ns[1], bound=ns[2], running=ns[3], failed=ns[4], node=node)
    return out


def dist(values: Sequence[float]) -> dict[str, Any]:
    """p50/p90/p99/max/mean of seconds (nearest rank), in seconds with ms precision."""
    if not values:
        return {"count": 0}
    return {
        "count": len(values),
        "p50_s": round(percentile(values, 50), 3), "p90_s": round(percentile(values, 90), 3),
        "p99_s": round(percentile(values, 99), 3), "max_s": round(max(values), 3),
        "mean_s": round(sum(values) / len(values), 3),
    }


def startup_figures(watch: dict[int, PodTimes], pods: int) -> dict[str, Any]:
    running = [p for p in watch.values() if p.running and p.sent]
    startup = [p.running - p.sent for p in running]
    scheduled = [p.bound - p.sent for p in watch.values() if p.bound and p.sent]
    to_running = [p.running - p.bound for p in running if p.bound]
    failed_phase = sum(1 for p in watch.values() if p.failed and not p.running)
    span = (max(p.running for p in running) - min(p.sent for p in running)) if running else 0.0
    return {
        "pods": pods,
        "seen": len(watch),
        "running": len(running),
        "failed": pods - len(running),
        "failed_phase": failed_phase,
        "create_to_running": dist(startup),
        "create_to_scheduled": dist(scheduled),
        "scheduled_to_running": dist(to_running),
        "pods_per_s": round(len(running) / span, 2) if span > 0 else None,
        "first_create_to_last_running_s": round(span, 2),
        "cdf_s": [round(v, 3) for v in sorted(startup)],
        "nodes_used": len({p.node for p in watch.values() if p.node}),
        "pods_per_resource_partition": _count_by(p.node.split("-", 1)[0] for p in watch.values() if p.node),
        "pods_per_namespace": _count_by(p.pod.split("/", 1)[0] for p in watch.values()),
    }


def _count_by(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))


def hops(front: dict[int, PodTimes], back: dict[int, PodTimes] | None, created: dict[int, tuple[float, float]]) -> dict[str, Any]:
    """Per-hop times (seconds): `back` is the watcher closest to the data (straight to the TPs on
    the proxy side; None on the direct side, where `front` is that watcher)."""
    back = back if back is not None else front
    rows: dict[str, list[float]] = {k: [] for k in (
        "create_answered", "create_to_added_in_partition", "added_to_bound_in_partition",
        "bound_to_running_in_partition", "running_in_partition_to_client_watch", "bound_in_partition_to_client_watch",
    )}
    for seq, b in back.items():
        f = front.get(seq)
        if seq in created:
            sent, answered = created[seq]
            rows["create_answered"].append(answered - sent)
        if b.sent and b.added:
            rows["create_to_added_in_partition"].append(b.added - b.sent)
        if b.added and b.bound:
            rows["added_to_bound_in_partition"].append(b.bound - b.added)
        if b.bound and b.running:
            rows["bound_to_running_in_partition"].append(b.running - b.bound)
        if f is not None and b.running and f.running:
            rows["running_in_partition_to_client_watch"].append(f.running - b.running)
        if f is not None and b.bound and f.bound:
            rows["bound_in_partition_to_client_watch"].append(f.bound - b.bound)
    return {k: dist(v) for k, v in rows.items()}


def read_created(path: Path) -> dict[int, tuple[float, float]]:
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            seq, sent, answered = line.split(",")
            out[int(seq)] = (int(sent) / 1e9, int(answered) / 1e9)
    return out


# -- one side of a step ---------------------------------------------------------------------


@dataclass
class Step:
    nodes: int
    params: Params
    fed: Federation
    proxy: ProxyProcess
    proxy_kubeconfig: Path
    timeline: Timeline
    clients: GoClients
    directory: Path
    artifacts: Path
    profiles: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # WATCH requests open per partition and resource with the federation and the proxy up and
    # no control plane: kube-apiserver's own informers and the proxy's reflectors
    baseline_watches: dict[str, dict[str, int]] = field(default_factory=dict)

    def http(self, partition: str) -> Http:
        p = self.fed.partition(partition)
        return Http(p.server, client_ssl(self.fed, p.admin_cert))

    def proxy_http(self) -> Http:
        crt = self.fed.ca.issue_client(self.fed.root / "density-clients", "density-metrics", "density-metrics", [PROXY_ADMINS_GROUP])
        return Http(self.proxy.server, client_ssl(self.fed, crt))


def proxy_pid(proxy: ProxyProcess) -> int:
    assert proxy.popen is not None
    return proxy.popen.pid


def proxy_rss_mib(step: Step, samples: int = 3) -> float:
    """The median of `samples` RSS readings of the proxy one second apart (MiB)."""
    values = []
    for i in range(samples):
        values.append(rss_bytes(proxy_pid(step.proxy)) / 2**20)
        if i + 1 < samples:
            time.sleep(1.0)
    return round(sorted(values)[len(values) // 2], 2)


_NODE_CONDITIONS = (
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"),
)


def ready_kwok_node(name: str) -> dict[str, Any]:
    """`kwok_node(name)` created with the status kwok's node-initialize stage would give it
    (Ready, addresses, nodeInfo), as a kubelet registers its node: without it the node
    lifecycle controller taints every new node not-ready and untaints it once kwok has made it
    Ready, two PATCHes per node at kube-controller-manager's 20 QPS (5 nodes/s on this machine,
    33 minutes for 10,000 nodes of fixtures). kwok still manages it (its Lease, its pods)."""
    node = kwok_node(name)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    i = zlib.crc32(name.encode()) & 0xFFFFFF
    node["status"].update({
        "conditions": [{"type": t, "status": st, "reason": r, "message": m, "lastHeartbeatTime": now, "lastTransitionTime": now}
                       for t, st, r, m in _NODE_CONDITIONS],
        "addresses": [{"type": "InternalIP", "address": f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"},
                      {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "kwok", "kernelVersion": "kwok",
                     "kubeProxyVersion": "kwok", "kubeletVersion": "kwok", "machineID": "", "operatingSystem": "linux",
                     "osImage": "", "systemUUID": ""},
        "phase": "Running",
    })
    return node


async def untaint_nodes(session: aiohttp.ClientSession, server: str, names: Sequence[str], *, deadline: float) -> None:
    """Remove the `node.kubernetes.io/not-ready` taint kube-apiserver's TaintNodesByCondition
    admission puts on every new node (the node lifecycle controller would lift it at its 20 QPS
    client limit: 5 nodes/s here) with one merge patch per node, 32 at a time."""
    it = iter(names)

    async def worker() -> None:
        for name in it:
            if time.monotonic() > deadline:
                raise RuntimeError(f"untainting nodes on {server}: past the deadline")
            async with session.patch(f"{server}/api/v1/nodes/{name}", data=b'{"spec":{"taints":null}}',
                                     headers={"Content-Type": "application/merge-patch+json"}) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"PATCH node {name}: {resp.status}")

    await asyncio.gather(*(worker() for _ in range(32)))


async def _create_nodes(step: Step, placement: dict[str, list[str]]) -> dict[str, int]:
    deadline = time.monotonic() + 120 + step.nodes / 20
    sessions = {p: new_session(client_ssl(step.fed, step.fed.partition(p).admin_cert)) for p in placement}
    try:
        counts = await asyncio.gather(*(
            post_objects(sessions[p], step.fed.partition(p).server, names, ready_kwok_node, deadline=deadline)
            for p, names in placement.items()
        ))
        await asyncio.gather(*(untaint_nodes(sessions[p], step.fed.partition(p).server, names, deadline=deadline)
                               for p, names in placement.items()))
    finally:
        for s in sessions.values():
            await s.close()
    return dict(zip(placement, counts))


def create_namespaces(kubeconfig: Path, namespaces: Sequence[str]) -> None:
    """Create the tenants' namespaces with kubectl (through the proxy or straight)."""
    docs = "---\n".join(f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n" for ns in namespaces)
    r = subprocess.run([find_kubectl(), "--kubeconfig", str(kubeconfig), "apply", "-f", "-"], input=docs,
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"creating namespaces: {r.stderr.strip()}")


def run_side(step: Step, side: str) -> dict[str, Any]:
    p, fed, tl = step.params, step.fed, step.timeline
    is_proxy = side == "proxy"
    tag = f"{side}-{step.nodes}"
    out: dict[str, Any] = {"side": side}
    rps = list(p.nodes_on) if is_proxy else [PEER]
    tps = list(p.into) if is_proxy else [PEER]
    partitions = list(PROXIED) if is_proxy else [PEER]
    t_start = tl.mark(f"{side}: start")
    out["foreign_apiservers_at_start"] = foreign_apiservers(step.directory)
    out["loadavg_at_start"] = os.getloadavg()[0]
    if out["foreign_apiservers_at_start"]:
        log(f"[{tag}] WARNING: {out['foreign_apiservers_at_start']} kube-apiservers of another run share this machine")
    log(f"[{tag}] starting the control plane ({'through the proxy' if is_proxy else f'straight at {PEER}'})")
    plane: ControlPlane | DirectControlPlane = ControlPlane(fed, step.proxy) if is_proxy else DirectControlPlane(fed, PEER)
    go_watch: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    monitor: LeaseMonitor | None = None
    probe: LivenessProbe | None = None
    try:
        plane.start(timeout=180)
        names = {proc.name: proc.pid for proc in plane.group.processes}
        tl.watch({f"{side}:{n}": pid for n, pid in names.items()})
        tl.watch({f"{side}:{x}-apiserver": apiserver_pid(fed.partition(x)) for x in partitions})
        tl.watch({f"{side}:{x}-etcd": pid for x in partitions if (pid := etcd_pid(fed, x))})
        out["control_plane_start_s"] = round(time.monotonic() - t_start, 1)
        out["components"] = sorted(names)
        tl.mark(f"{side}: control plane up")
        rss_before_nodes = proxy_rss_mib(step)

        # N nodes straight on the partitions (fixtures), alternately over the RPs.
        node_names = [f"{rps[i % len(rps)]}{NODE_INFIX}{i:05d}" for i in range(step.nodes)]
        placement = {rp: [n for n in node_names if n.startswith(f"{rp}-")] for rp in rps}
        t = time.monotonic()
        created = asyncio.run(_create_nodes(step, placement))
        out["nodes_created"] = created
        out["nodes_create_s"] = round(time.monotonic() - t, 1)
        log(f"[{tag}] created {sum(created.values()):,} nodes {created} in {out['nodes_create_s']} s; waiting until Ready")
        rp_http = [step.http(rp) for rp in rps]
        deadline = time.monotonic() + 180 + step.nodes / 10
        last_log = 0.0
        while True:
            state = nodes_state(rp_http, NODE_INFIX)
            if state["ready_untainted"] >= step.nodes:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes not Ready and untainted in time: {state}")
            if time.monotonic() - last_log > 5:
                log(f"[{tag}] nodes: {state}")
                last_log = time.monotonic()
            time.sleep(nodes_poll_seconds(step.nodes))
        out["nodes_ready_s"] = round(time.monotonic() - t, 1)
        tl.mark(f"{side}: nodes Ready")
        log(f"[{tag}] {step.nodes:,} nodes Ready and untainted {out['nodes_ready_s']} s after the first create")
        # kwok creates each node's Lease (through the proxy on the proxy side): the memory per
        # node is read once every Lease exists (nodes and Leases are both cached by the proxy).
        while (leases := count_leases(rp_http, NODE_INFIX)) < step.nodes and time.monotonic() < deadline:
            if time.monotonic() - last_log > 5:
                log(f"[{tag}] node Leases: {leases:,}/{step.nodes:,}")
                last_log = time.monotonic()
            time.sleep(1.0)
        out["leases_created_s"] = round(time.monotonic() - t, 1)
        time.sleep(SETTLE_SECONDS)
        rss_after_nodes = proxy_rss_mib(step)
        out["proxy_rss_mib"] = {"before_nodes": rss_before_nodes, "after_nodes": rss_after_nodes}
        if is_proxy:
            out["proxy_memory_per_node_bytes"] = round((rss_after_nodes - rss_before_nodes) * 2**20 / step.nodes)

        # Hollow kubelets (the real kubelet): memory per kubelet at the proxy.
        if p.hollow_kubelets:
            hollow = [HollowNode(f"{rps[i % len(rps)]}-hollow-{i + 1}", rps[i % len(rps)], through_proxy=is_proxy)
                      for i in range(p.hollow_kubelets)]
            before = proxy_rss_mib(step)
            t = time.monotonic()
            procs = plane.start_hollow_nodes(hollow, timeout=120)
            tl.watch({f"{side}:{proc.name}": proc.pid for proc in procs})
            time.sleep(10.0)  # their informers have listed and are watching
            after = proxy_rss_mib(step)
            out["hollow_kubelets"] = {"count": len(hollow), "registered_s": round(time.monotonic() - t - 10.0, 1),
                                      "proxy_rss_before_mib": before, "proxy_rss_after_mib": after}
            if is_proxy:
                out["proxy_memory_per_hollow_kubelet_bytes"] = round((after - before) * 2**20 / len(hollow))
            log(f"[{tag}] {len(hollow)} hollow kubelets registered; proxy RSS {before} -> {after} MiB")

        # Tenants' namespaces, through the proxy (or straight at the peer).
        namespaces = tenant_namespaces(p)
        kubeconfig = step.proxy_kubeconfig if is_proxy else fed.partition(PEER).admin_kubeconfig
        create_namespaces(kubeconfig, list(namespaces))
        out["namespaces"] = namespaces if is_proxy else {ns: PEER for ns in namespaces}

        # Steady state before any load client: upstream and downstream watches.
        metric_http = {x: step.http(x) for x in partitions}
        proxy_http = step.proxy_http()
        watches = {x: watch_counts(metric_http[x].get("/metrics", accept="text/plain").decode()) for x in partitions}
        baseline = step.baseline_watches
        added = {x: watch_delta(watches[x], baseline.get(x, {})) for x in partitions}
        out["upstream_watches"] = {
            "per_partition_total": {x: sum(w.values()) for x, w in watches.items()},
            "per_partition_before_control_plane": {x: sum(baseline.get(x, {}).values()) for x in partitions},
            "added_by_control_plane": added,
            "added_by_control_plane_per_partition": {x: sum(a.values()) for x, a in added.items()},
            "added_by_control_plane_total": sum(sum(a.values()) for a in added.values()),
            "added_pods_watches_per_partition": {x: a.get("pods", 0) for x, a in added.items()},
        }
        if is_proxy:
            out["proxy_downstream_watches"] = proxy_watch_counts(proxy_http.get("/metrics", accept="text/plain").decode())

        # The pod phase.
        sli_before = {x: sli_histograms(metric_http[x].get("/metrics", accept="text/plain").decode()) for x in partitions}
        proxy_sli_before = sli_histograms(proxy_http.get("/metrics", accept="text/plain").decode()) if is_proxy else {}
        monitor = LeaseMonitor(rp_http, NODE_INFIX).start()
        probe = LivenessProbe(proxy_http if is_proxy else metric_http[PEER]).start()
        bound = p.pods / p.rate + p.drain_seconds
        ready_files = []
        watchers = [("watch-client", [str(kubeconfig)])]
        if is_proxy:
            watchers.append(("watch-partitions", [str(fed.partition(x).admin_kubeconfig) for x in tps]))
        for name, kcs in watchers:
            ready = step.directory / f"{tag}-{name}.ready"
            ready.unlink(missing_ok=True)
            csv_path = step.artifacts / f"{tag}-{name}.csv"
            proc, report = step.clients.start(f"{tag}-{name}", [
                "pod-watch", "--kubeconfig", ",".join(kcs), "--run", tag, "--expect", str(p.pods),
                "--duration", f"{bound:.0f}s", "--idle", "60s", "--ready-file", str(ready), "--events-out", str(csv_path),
                "--content-type", p.content_type, "--name", f"{tag} {name}",
                "--progress", "5s" if name == "watch-client" else "0",
            ])
            go_watch.append((name, proc, report))
            ready_files.append((ready, proc))
        for ready, proc in ready_files:
            wait_ready_file(ready, proc, READY_FILE_TIMEOUT)
        tl.watch({f"{side}:{name}": proc.pid for name, proc, _ in go_watch})
        profile = start_profile(step, tag, bound) if is_proxy and p.profile else None
        if profile is not None:
            step.profiles.append(profile)
        created_csv = step.artifacts / f"{tag}-created.csv"
        log(f"[{tag}] creating {p.pods:,} pods at {p.rate:g}/s into {len(namespaces)} namespaces "
            f"({'through the proxy' if is_proxy else 'straight'})")
        t_pods = tl.mark(f"{side}: pods start")
        creator, creator_out = step.clients.start(f"{tag}-create", [
            "create-pods", "--kubeconfig", str(kubeconfig), "--namespace", ",".join(namespaces), "--count", str(p.pods),
            "--rate", f"{p.rate:g}", "--run", tag, "--clients", str(p.clients), "--log-out", str(created_csv),
            "--content-type", p.content_type,
        ])
        tl.watch({f"{side}:creator": creator.pid})
        out["creator"] = GoClients.report(creator, creator_out, 3 * p.pods / p.rate + 120)
        reports = {name: GoClients.report(proc, rep, bound + 60) for name, proc, rep in go_watch}
        t_done = tl.mark(f"{side}: pods done")
        if profile is not None:
            stop_profile(profile)
        if t_done - t_pods < MIN_LEASE_WINDOW_SECONDS:
            time.sleep(MIN_LEASE_WINDOW_SECONDS - (t_done - t_pods))
        probe.stop()
        during = probe.between(t_pods, t_done)
        out["livez"] = {"target": "proxy" if is_proxy else f"{PEER} kube-apiserver", **dist(during), "errors": probe.errors,
                        "series": [{"t_s": round(t - t_start, 2), "ms": round(v * 1000, 1)} for t, v in probe.points]}
        out["leases"] = monitor.stop()
        monitor = None
        out["leases"]["expected"] = step.nodes
        out["leases"]["window_s"] = round(time.monotonic() - t_pods, 1)
        out["nodes_at_end"] = nodes_state(rp_http, NODE_INFIX)
        out["foreign_apiservers_at_end"] = foreign_apiservers(step.directory)
        out["watchers"] = {k: {kk: v.get(kk) for kk in ("seen", "bound", "running", "failed", "stop_reason", "watched_seconds",
                                                        "cpu_seconds", "streams", "fatal", "exit_status")}
                           for k, v in reports.items()}
        texts_after = {x: metric_http[x].get("/metrics", accept="text/plain").decode() for x in partitions}
        sli_after = {x: sli_histograms(t) for x, t in texts_after.items()}
        out["terminated_watchers"] = {x: terminated_watchers(texts_after[x]) for x in partitions}
        if is_proxy:
            proxy_sli = diff_histograms(sli_histograms(proxy_http.get("/metrics", accept="text/plain").decode()), proxy_sli_before)
            out["api_latency"] = sli_rows(proxy_sli)
            out["api_latency_upstream"] = sli_rows(sum_histograms(diff_histograms(sli_after[x], sli_before[x]) for x in partitions))
            out["proxy_peak_rss_mib"] = round(hwm_bytes(proxy_pid(step.proxy)) / 2**20, 1)
        else:
            out["api_latency"] = sli_rows(diff_histograms(sli_after[PEER], sli_before[PEER]))

        # Per pod.
        front = read_pod_csv(step.artifacts / f"{tag}-watch-client.csv")
        back = read_pod_csv(step.artifacts / f"{tag}-watch-partitions.csv") if is_proxy else None
        out["startup"] = startup_figures(front, p.pods)
        out["hops"] = hops(front, back, read_created(created_csv))
        out["window"] = {"pods_start_s": round(t_pods - step.timeline.t0, 1), "pods_done_s": round(t_done - step.timeline.t0, 1)}
        out["cpu_during_pods"] = {name: c for name in sorted(tl.pids) if name.startswith(f"{side}:") or name in ("proxy", "machine")
                                  if (c := tl.cpu_between(name, t_pods, t_done))}
        if (m := tl.cpu_between("machine", t_pods, t_done)):
            out["cpu_during_pods"]["machine"] = m
        s = out["startup"]
        log(f"[{tag}] {s['running']:,}/{p.pods:,} Running, {s['failed']} failed; create->Running p50 "
            f"{s['create_to_running'].get('p50_s')} s p99 {s['create_to_running'].get('p99_s')} s; {s['pods_per_s']} pods/s")
    finally:
        if monitor is not None:
            monitor.stop()
        if probe is not None:
            probe.stop()
        for _, proc, _ in go_watch:
            stop_process(proc, grace=5)
        plane.stop()
        t_end = tl.mark(f"{side}: stopped")
        tl.forget([n for n in tl.pids if n.startswith(f"{side}:")])
    out["timeline"] = {
        "t_from_s": round(t_start - tl.t0, 1), "t_to_s": round(t_end - tl.t0, 1),
        "proxy": tl.series("proxy", t_start, t_end), "machine": tl.series("machine", t_start, t_end),
        "marks": [{"t_s": round(t - t_start, 1), "label": label} for t, label in tl.marks if t_start <= t <= t_end],
    }
    if not is_proxy:
        out["timeline"]["peer_apiserver"] = []
    return out


def stop_profile(proc: subprocess.Popen[bytes]) -> None:
    """py-spy writes its profile on SIGINT (as on Ctrl-C)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(60)


def start_profile(step: Step, tag: str, seconds: float) -> subprocess.Popen[bytes]:
    """py-spy record of the proxy for `seconds` (speedscope JSON next to the CSVs)."""
    exe = Path(sys.executable).parent / "py-spy"
    if not exe.exists():
        raise RuntimeError(f"--profile needs py-spy: {Path(sys.executable).parent / 'pip'} install py-spy")
    out = step.artifacts / f"{tag}-proxy.speedscope.json"
    log(f"[{tag}] py-spy recording the proxy for {seconds:.0f} s -> {out}")
    return subprocess.Popen([str(exe), "record", "--pid", str(proxy_pid(step.proxy)), "--duration", str(int(seconds)),
                             "--rate", "50", "--format", "speedscope", "--output", str(out), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=die_with_parent)


# -- a step: one federation, both sides -----------------------------------------------------


def run_step(p: Params, nodes: int, root: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    fed = Federation(root, tenant_partitions=len(TENANT_PARTITIONS), resource_partitions=len(RESOURCE_PARTITIONS) + 1)
    proxy: ProxyProcess | None = None
    timeline = Timeline().start()
    clients = GoClients(root / "clients")
    artifacts = ARTIFACTS
    artifacts.mkdir(parents=True, exist_ok=True)
    step: Step | None = None
    result: dict[str, Any] = {"nodes": nodes, "pods": p.pods, "rate": p.rate}
    try:
        log(f"[{nodes} nodes] starting the federation (tp1, tp2, rp1, rp2 behind the proxy; {PEER} the peer)")
        fed.start()
        proxy = ProxyProcess(fed, root / "proxy", partitions=list(PROXIED))
        proxy.start(timeout=180)
        timeline.watch({"proxy": proxy_pid(proxy)})
        if p.renice_proxy:
            os.setpriority(os.PRIO_PROCESS, proxy_pid(proxy), p.renice_proxy)
            log(f"[{nodes} nodes] proxy reniced to {p.renice_proxy}")
        proxy_kubeconfig = fed.issue_client_kubeconfig("density-admin", user="density-admin", groups=[PROXY_ADMINS_GROUP],
                                                       server=proxy.server)
        result["federation_start_s"] = round(time.monotonic() - t0, 1)
        log(f"[{nodes} nodes] federation and proxy up in {result['federation_start_s']} s (proxy pid {proxy_pid(proxy)})")
        step = Step(nodes=nodes, params=p, fed=fed, proxy=proxy, proxy_kubeconfig=proxy_kubeconfig, timeline=timeline,
                    clients=clients, directory=root, artifacts=artifacts)
        step.baseline_watches = {x: watch_counts(step.http(x).get("/metrics", accept="text/plain").decode())
                                 for x in (*PROXIED, PEER)}
        for side in p.sides:
            result[side] = run_side(step, side)
            clients.stop_all()
    finally:
        clients.stop_all()
        if step is not None:
            for prof in step.profiles:
                stop_profile(prof)
                stop_process(prof, grace=5)
        timeline.stop()
        if proxy is not None:
            proxy.stop()
        fed.stop()
    result["step_seconds"] = round(time.monotonic() - t0, 1)
    result["comparison"] = compare(result)
    return result


def compare(step: dict[str, Any]) -> dict[str, Any]:
    if "proxy" not in step or "direct" not in step:
        return {}
    pr, dr = step["proxy"]["startup"], step["direct"]["startup"]
    out: dict[str, Any] = {}
    for what in ("create_to_running", "create_to_scheduled", "scheduled_to_running"):
        for q in ("p50_s", "p90_s", "p99_s"):
            out[f"{what}_{q[:-2]}_ratio"] = ratio(pr[what].get(q, math.nan), dr[what].get(q, math.nan))
    out["pods_per_s_ratio"] = ratio(pr["pods_per_s"] or math.nan, dr["pods_per_s"] or math.nan)
    return out


def targets(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for s in steps:
        if "proxy" not in s or "direct" not in s:
            continue
        pr, dr = s["proxy"], s["direct"]
        p99, d99 = pr["startup"]["create_to_running"].get("p99_s"), dr["startup"]["create_to_running"].get("p99_s")
        where = f"{s['nodes']:,} nodes / {s['pods']:,} pods at {s['rate']:g} pods/s"
        is_target = s["nodes"] == TARGET_NODES and s["pods"] == TARGET_PODS
        if p99 is not None and d99:
            out.append({"target": f"pod startup p99 through the proxy <= {TARGET_P99_RATIO}x direct", "where": where,
                        "at_target_size": is_target, "proxy_s": p99, "direct_s": d99, "ratio": ratio(p99, d99),
                        "met": p99 <= TARGET_P99_RATIO * d99})
            if d99 < TARGET_DIRECT_UNDER_SECONDS:
                out.append({"target": f"pod startup p99 through the proxy <= {TARGET_P99_SECONDS:g} s (direct under "
                                      f"{TARGET_DIRECT_UNDER_SECONDS:g} s)", "where": where, "at_target_size": is_target,
                            "proxy_s": p99, "direct_s": d99, "met": p99 <= TARGET_P99_SECONDS})
        out.append({"target": "0 failed pods", "where": where, "at_target_size": is_target,
                     "proxy": pr["startup"]["failed"], "direct": dr["startup"]["failed"],
                     "met": pr["startup"]["failed"] == 0 and dr["startup"]["failed"] == 0})
        lp, ld = pr["leases"], dr["leases"]
        out.append({"target": "every node Lease renewed", "where": where, "at_target_size": is_target,
                    "proxy": f"{lp['renewed_during_window']}/{lp['expected']}", "direct": f"{ld['renewed_during_window']}/{ld['expected']}",
                    "proxy_max_renew_age_s": lp["max_renew_age_s"], "direct_max_renew_age_s": ld["max_renew_age_s"],
                    "met": lp["renewed_during_window"] >= lp["expected"] and ld["renewed_during_window"] >= ld["expected"]})
    return out


# -- figures --------------------------------------------------------------------------------


def plots(doc: dict[str, Any], prefix: str = NAME) -> list[str]:
    """PNGs under .local/bench/: the startup CDF (every step, proxy vs direct) and the proxy's
    CPU and RSS over time (one per step). Returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(9, 5.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, s in enumerate(doc["steps"]):
        for side, style in (("proxy", "-"), ("direct", "--")):
            if side not in s:
                continue
            cdf = s[side]["startup"]["cdf_s"]
            if not cdf:
                continue
            y = [(k + 1) / s["pods"] for k in range(len(cdf))]
            p99 = s[side]["startup"]["create_to_running"].get("p99_s")
            ax.step(cdf, y, style, where="post", color=colors[i % len(colors)],
                    label=f"{side}, {s['nodes']:,} nodes / {s['pods']:,} pods (p99 {p99} s)")
    ax.axvline(TARGET_P99_SECONDS, color="grey", lw=0.8, ls=":")
    ax.axhline(0.99, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("pod startup latency: create -> Running seen by a watch (s, log scale)")
    ax.set_ylabel("fraction of pods")
    ax.set_title(f"Pod startup latency CDF, through the proxy vs direct ({doc['params']['rate']:g} pods/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path = OUT_DIR / f"{prefix}-startup-cdf.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    paths.append(str(path.relative_to(REPO)))

    for s in doc["steps"]:
        if "proxy" not in s:
            continue
        tl = s["proxy"]["timeline"]
        pts, machine = tl["proxy"], tl["machine"]
        if not pts:
            continue
        fig, (a1, a2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
        a1.plot([q["t_s"] for q in machine], [q["cores"] for q in machine], color="lightgrey", label="machine busy (2 cores)")
        a1.plot([q["t_s"] for q in pts], [q["cores"] for q in pts], color=colors[0], label="proxy")
        if all("runqueue_wait" in q for q in pts):
            a1.plot([q["t_s"] for q in pts], [q["runqueue_wait"] for q in pts], color=colors[3], lw=0.8,
                    label="proxy runnable, waiting for a CPU (s/s)")
        a1.set_ylabel("CPU (cores, per second)")
        a1.legend(loc="upper left", fontsize=8)
        a2.plot([q["t_s"] for q in pts], [q["rss_mib"] for q in pts], color=colors[1], label="proxy RSS")
        a2.set_ylabel("RSS (MiB)")
        live = s["proxy"].get("livez", {}).get("series", [])
        if live:
            a3 = a2.twinx()
            a3.plot([q["t_s"] for q in live], [q["ms"] for q in live], color=colors[2], lw=0.7, alpha=0.8,
                    label="GET /livez at the proxy (ms)")
            a3.set_ylabel("/livez round trip (ms)")
            a3.set_yscale("log")
            a3.legend(loc="lower right", fontsize=8)
        a2.set_xlabel("seconds since the proxy side started")
        for m in tl["marks"]:
            for a in (a1, a2):
                a.axvline(m["t_s"], color="grey", lw=0.7, ls="--")
            a1.annotate(m["label"].split(": ", 1)[-1], (m["t_s"], 0.02), xycoords=a1.get_xaxis_transform(), fontsize=7,
                        rotation=90, va="bottom", ha="right", color="grey")
        for a in (a1, a2):
            a.grid(True, alpha=0.3)
        fig.suptitle(f"The proxy during the density test: {s['nodes']:,} nodes, {s['pods']:,} pods at {s['rate']:g} pods/s")
        fig.tight_layout()
        path = OUT_DIR / f"{prefix}-proxy-resources-{s['nodes']}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(str(path.relative_to(REPO)))
    return paths


# -- main -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    try:
        params = parse_args(argv)
    except Refused as exc:
        print(f"density: {exc}", file=sys.stderr)
        return 2
    if not RVCHECK.exists():
        print(f"density: {RVCHECK} missing: run `bash hack/build-components.sh`", file=sys.stderr)
        return 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("density: matplotlib missing: `make venv` (the test extra) installs it", file=sys.stderr)
        return 2

    install_sigterm()
    root = WORK_DIR / NAME
    t0 = time.monotonic()
    doc: dict[str, Any] = {
        "benchmark": NAME,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": host_info(),
        "params": {**params.__dict__, "steps": list(params.steps)},
        "peer": f"{PEER}: the same components (one kube-scheduler, one kube-controller-manager, kwok) straight at a "
                f"kube-apiserver the proxy does not front, the same nodes, pods and rate, in the same run",
        "steps": [],
    }
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    doc["steps"], interrupted = run_steps(params.steps, lambda nodes: run_step(params, nodes, root), root, keep=params.keep)
    if interrupted:
        log(f"interrupted: every process stopped, {root} deleted")
        return 130
    doc["targets"] = targets(doc["steps"])
    doc["total_seconds"] = round(time.monotonic() - t0, 1)
    doc["figures"] = plots(doc)
    emit(NAME, doc)
    for t in doc["targets"]:
        log(f"target {t['target']} ({t['where']}): {'met' if t['met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
