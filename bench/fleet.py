"""A fleet of kubelets: N simulated kubelets through the proxy vs the same fleet straight at one
kube-apiserver, per kubelet: server memory and CPU, connections and watches, and the reconnect
storm after the server restarts.

Set-up per step (a fresh federation each; `--kubelets 1000,5000` makes a ladder):
`Federation(root, tenant_partitions=2, resource_partitions=3)`: tp1, tp2, rp1, rp2 behind one
proxy (`ProxyProcess`, the proxy's default caches; `failure.max_inflight_long_running` raised to
`LONG_RUNNING_PER_KUBELET` x N so the proxy's global cap of watches does not refuse the fleet:
its default, 50,000, is exactly 10,000 kubelets' five watches) and rp3, which the proxy does
not front, the peer. N nodes (`hollow_node`, `rp1-fleet-00000`, `rp2-fleet-00001`, ...
alternately on rp1 and rp2, all of them on rp3) and their Leases (`node_lease`) are created
straight on the partitions before any kubelet starts. On the proxy side the protobuf twin of any
cache serving what a kubelet watches (nodes, pods, services, CSIDrivers, RuntimeClasses) is
filled by one protobuf-first LIST each before the baseline, so the memory per kubelet does not
include it.

The fleet is `rvcheck fleet` (Go, client-go, hack/k8s/clients/rvcheck/fleet.go): N kubelets in
one process, each with its own client certificate (CN=system:node:<node>, minted from the
federation CA), its own HTTP/2 connection and the kubelet's requests: GET its Node, streaming
lists + watches of its Node, its pods, services, CSIDrivers and RuntimeClasses, its Lease
renewed every `--lease-interval` s by the kubelet's own lease controller, its node status
PATCHed every `--status-interval` s. Through the proxy each kubelet's server URL is pinned to
its RP (`/partitions/<rp>`, as `partition-proxy kubeconfig --role kubelet` writes it).

The sides run one after the other (proxy, then direct), each with its own fleet. Per side:
1. baseline: server RSS (the proxy process, or rp3's kube-apiserver), every partition's
   kube-apiserver RSS, WATCH requests open on each partition
   (`apiserver_longrunning_requests`), TCP connections;
2. the fleet starts at `--ramp` kubelets/s; the time until every kubelet had all five watches
   open (the fleet's status file);
3. `SETTLE_SECONDS` of rest, then a steady window of `--duration` s; at its end: server RSS
   growth / N (bytes per kubelet), server CPU over the window / N (us per kubelet-second),
   downstream connections (ESTABLISHED TCP connections to the server's port, from
   /proc/net/tcp), upstream connections per partition (the proxy process's ESTABLISHED sockets
   to each partition's port), upstream watches per partition (their growth over the baseline),
   each partition's kube-apiserver RSS growth and CPU, the fleet's own CPU and RSS, Lease
   renewals and their latency;
4. the reconnect storm (unless `--no-storm`): a mark written to the fleet's mark file, the
   server stopped (SIGTERM: the proxy, or on the direct side rp3's kube-apiserver, its etcd
   left running; either ends every watch) and started again on the same port; the time from
   the mark until every kubelet had every watch open again, the server's down time, and on the
   proxy side the SubjectAccessReviews the partitions answered meanwhile
   (`apiserver_request_total{resource="subjectaccessreviews"}` growth, per kubelet;
   kube-apiserver authorizes its own clients in-process).

`--profile`: py-spy samples the proxy's workers through the steady window (native frames
included, as `bench.where_cpu_goes` does) and the step reports where a kubelet-second goes, part
by part (`bench.where_cpu_goes.account`: microseconds per kubelet-second per part). py-spy
stops each worker briefly per sample, so the window's CPU figures of such a run read a few per
cent high; compare parts within it, and CPU across runs without it.

`--workers N` runs the proxy with N worker processes (`serve --workers N`, each with its own
caches and upstream watches; a kubelet's connection stays with one). The proxy side's CPU, RSS
and sockets are then all of its processes together (its session); each worker's caches are
waited for, and each worker's protobuf twins filled, over 8 new connections per worker (the
kernel gives a connection to a worker by a hash of its addresses). For the steady state only:
it needs `--no-storm` and refuses `--trace-memory` and `--profile`, which read one process.

Output: one JSON document (stdout and .local/bench/fleet.json); the fleets' own reports (and
`--profile`'s py-spy samples, `proxy-<N>.raw`) in .local/bench/fleet/. Ctrl-C/SIGTERM stops every process and deletes the federation root
(`.local/bench/work/fleet`, also deleted after a normal run unless `--keep`).

Run: `python -m bench.fleet [--kubelets 1000[,5000,10000]] [--sides proxy,direct] [--duration 120] [--workers 1]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.common import (
    NODE_LEASES,
    OUT_DIR,
    PAGE_SIZE,
    REPO,
    WORK_DIR,
    apiserver_pid,
    client_ssl,
    close_sessions,
    cpu_seconds,
    emit,
    fill_protobuf_twin,
    group_cpu_seconds,
    group_rss_bytes,
    host_info,
    hollow_node,
    install_sigterm,
    log,
    new_session,
    node_lease,
    post_objects,
    ratio,
    rss_bytes,
    run_steps,
    session_pids,
)
from bench.density import GoClients, Http, parse_metrics, proxy_watch_counts, watch_counts
from bench.where_cpu_goes import PY_SPY, account, busy_parts
from hack.federation import PROXY_ADMINS_GROUP, Federation
from hack.procs import TCP_ESTABLISHED, TcpSocket, read_sockets, socket_inodes
from hack.proxy_process import ProxyProcess

NAME = "fleet"
RVCHECK = REPO / ".local" / "bin" / "rvcheck"
ARTIFACTS = OUT_DIR / NAME  # the fleets' reports and status files of the last run
TENANT_PARTITIONS = ("tp1", "tp2")
RESOURCE_PARTITIONS = ("rp1", "rp2")
PROXIED = (*TENANT_PARTITIONS, *RESOURCE_PARTITIONS)
PEER = "rp3"  # the partition the proxy does not front: the direct side's cluster
NODE_INFIX = "-fleet-"  # in the name of every node (and Lease) the bench creates
WATCHES_PER_KUBELET = 5  # its Node, its pods, services, CSIDrivers, RuntimeClasses (fleet.go)
KUBELET_COLLECTIONS = ("/api/v1/nodes", "/api/v1/pods", "/api/v1/services", "/apis/storage.k8s.io/v1/csidrivers",
                       "/apis/node.k8s.io/v1/runtimeclasses")
# long-running requests the proxy may serve per kubelet: its five watches, twice (a reconnect
# storm's new watches may arrive before the proxy has counted the old ones out), plus a margin.
LONG_RUNNING_PER_KUBELET = 2 * WATCHES_PER_KUBELET
LONG_RUNNING_FLOOR = 50_000  # the proxy's own default (config/models.py FailureConfig)
# open files per kubelet the proxy may need: one downstream connection and, before watches
# are served from shared caches, about 8 upstream ones (issue 28); plus the partitions'.
FDS_PER_KUBELET = 16
FDS_BASE = 8192
# seconds
SETTLE_SECONDS = 10.0  # after every watch opened, before the steady window: the proxy's allocations settle
# CPU of the idle servers measured over this long before the fleet starts (their own timers,
# the proxy's table refresh and reflectors): subtracted from the window's CPU, as a few
# kubelets would otherwise be charged the servers' background work.
IDLE_CPU_SECONDS = 10.0
BASELINE_SETTLE_SECONDS = 3.0  # after the caches hold every node, before the baseline reading
RSS_SAMPLE_SECONDS = 1.0  # between the RSS readings whose median is taken
RSS_SAMPLES = 3
OPEN_TIMEOUT_SECONDS = 180.0  # for every kubelet to open its watches, beyond the ramp itself
STORM_TIMEOUT_SECONDS = 300.0  # for every kubelet to reopen its watches after the proxy restarted
MARK_ACK_TIMEOUT_SECONDS = 10.0  # for the fleet to read the storm mark (it polls every second)
CACHE_TIMEOUT_SECONDS = 300.0  # for the proxy's caches to hold every node and Lease
FLEET_STOP_TIMEOUT_SECONDS = 60.0  # for the fleet's report after SIGTERM
TWIN_TIMEOUT_SECONDS = 10.0  # for a cache's protobuf twin to answer (a path no cache serves answers protobuf at once)
POLL_SECONDS = 0.5
# new connections per worker that stand for all of a proxy's workers (answers_per_worker_set):
# 8 per worker miss a given one of 2 workers with a chance of 2 ** -16
CONNECTIONS_PER_WORKER = 8


class Refused(Exception):
    """Parameters that cannot work: one line, exit 2, nothing started."""


# -- parameters -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    steps: tuple[int, ...]  # kubelet counts, one federation each
    sides: tuple[str, ...]
    duration: float  # seconds of steady window
    ramp: float  # kubelets started per second
    status_interval: float  # seconds between a kubelet's node status PATCHes (0: none)
    lease_interval: float  # seconds between a kubelet's Lease renewals
    storm: bool
    content_type: str
    keep: bool
    trace_memory: bool = False  # the proxy traces Python's allocations (PYTHONTRACEMALLOC=1, /debug/memory)
    profile: bool = False  # py-spy samples the proxy through the steady window (module docstring)
    workers: int = 1  # the proxy's worker processes (`serve --workers`); the proxy side's figures are all of them


def parse_args(argv: Sequence[str] | None = None) -> Params:
    """The command line as Params. Raises Refused (one line) for parameters that cannot work."""
    ap = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubelets", default="1000", help="kubelet counts, one step each: 1000,5000,10000")
    ap.add_argument("--sides", default="proxy,direct", help="sides in the order they run")
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of the steady window")
    ap.add_argument("--ramp", type=float, default=200.0, help="kubelets started per second")
    ap.add_argument("--status-interval", type=float, default=60.0,
                    help="seconds between a kubelet's node status PATCHes (kubelet 1.36: 300 unless the status changes; 0: none)")
    ap.add_argument("--lease-interval", type=float, default=10.0, help="seconds between a kubelet's Lease renewals")
    ap.add_argument("--no-storm", action="store_true", help="skip the reconnect storm (the server restarted under its fleet)")
    ap.add_argument("--content-type", default="protobuf", choices=("protobuf", "json"), help="of the fleet")
    ap.add_argument("--keep", action="store_true", help="keep the federation root (logs, etcd data) after the run")
    ap.add_argument("--trace-memory", action="store_true",
                    help="the proxy traces Python's allocations: where each kubelet's bytes go (RSS is then inflated by the tracing)")
    ap.add_argument("--profile", action="store_true",
                    help="py-spy samples the proxy through the steady window: where a kubelet-second goes (needs py-spy)")
    ap.add_argument("--workers", type=int, default=1,
                    help="the proxy's worker processes (serve --workers): its CPU, RSS and sockets are all of them together")
    a = ap.parse_args(argv)
    try:
        steps = tuple(int(x) for x in a.kubelets.split(",") if x.strip())
    except ValueError:
        raise Refused(f"--kubelets must be counts separated by commas, not {a.kubelets!r}") from None
    params = Params(steps=steps, sides=tuple(x.strip() for x in a.sides.split(",") if x.strip()), duration=a.duration,
                    ramp=a.ramp, status_interval=a.status_interval, lease_interval=a.lease_interval, storm=not a.no_storm,
                    content_type=a.content_type, keep=a.keep, trace_memory=a.trace_memory, profile=a.profile,
                    workers=a.workers)
    validate(params)
    return params


def validate(p: Params) -> None:
    """Raise Refused (one line) for parameters that cannot work."""
    if not p.steps or any(n <= 0 for n in p.steps):
        raise Refused("--kubelets must be positive counts")
    if not p.sides or any(s not in ("proxy", "direct") for s in p.sides) or len(set(p.sides)) != len(p.sides):
        raise Refused(f"--sides must be proxy and/or direct, each once, not {','.join(p.sides)!r}")
    if not p.duration > 0 or not p.ramp > 0 or not p.lease_interval > 0 or p.status_interval < 0:
        raise Refused("--duration, --ramp and --lease-interval must be positive, --status-interval not negative")
    if p.workers < 1:
        raise Refused("--workers must be at least 1")
    if p.workers > 1 and (p.storm or p.trace_memory or p.profile):
        raise Refused("--workers above 1 is for the steady state: add --no-storm, and leave out --trace-memory and --profile "
                      "(they read one process)")
    if p.profile and not PY_SPY.exists():
        raise Refused(f"--profile needs py-spy ({PY_SPY}): pip install py-spy")


def fleet_node_names(n: int) -> list[str]:
    """Node names of kubelets 0..n-1: even ones on rp1, odd on rp2 (the proxy's prefix placement)."""
    return [f"{RESOURCE_PARTITIONS[i % 2]}{NODE_INFIX}{i:05d}" for i in range(n)]


def placement(names: Iterable[str]) -> dict[str, list[str]]:
    """Which partitions hold which nodes: each RP its own (by name prefix), the peer all of them."""
    names = list(names)
    out = {rp: [n for n in names if n.startswith(f"{rp}-")] for rp in RESOURCE_PARTITIONS}
    out[PEER] = names
    return out


def proxy_extra(kubelets: int) -> dict[str, Any]:
    """Config keys for the proxy of a step: a global cap of long-running requests that N
    kubelets' watches (and a reconnect storm's) fit under, and no drain at SIGTERM: the storm
    measured here is every kubelet of a replica at once, as when no other replica is there to
    take them one by one (the soak's rolling restart measures the drain)."""
    return {"failure": {"max_inflight_long_running": max(LONG_RUNNING_FLOOR, LONG_RUNNING_PER_KUBELET * kubelets),
                        "shutdown_drain_seconds": 0}}


def nofile_wanted(kubelets: int) -> int:
    """Open files the bench wants for its children at `kubelets` kubelets."""
    return FDS_BASE + FDS_PER_KUBELET * kubelets


def raise_nofile_to(want: int) -> tuple[int, int]:
    """Raise this process's open-file limit (children inherit it): the soft limit to the hard
    one, and both to `want` (at most fs.nr_open) when allowed (root); returns (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        nr_open = int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        nr_open = hard
    target = min(max(want, hard), nr_open)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, target))
        return resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


# -- figures from /proc and /metrics (pure parts first) -------------------------------------


def count_established(sockets: Iterable[TcpSocket], *, local_port: int | None = None, remote_port: int | None = None,
                      inodes: set[int] | None = None) -> int:
    """ESTABLISHED sockets with the given local port, remote port and owner (inode set)."""
    return sum(1 for s in sockets if s.state == TCP_ESTABLISHED
               and (local_port is None or s.local_port == local_port)
               and (remote_port is None or s.remote_port == remote_port)
               and (inodes is None or s.inode in inodes))


def request_total(text: str, *, resource: str | None = None) -> dict[str, int]:
    """apiserver_request_total of a kube-apiserver's /metrics, summed per verb (all codes),
    only for `resource` when given (e.g. "subjectaccessreviews")."""
    out: dict[str, int] = {}
    for _, labels, value in parse_metrics(text, ["apiserver_request_total"]):
        if resource is not None and labels.get("resource") != resource:
            continue
        verb = labels.get("verb", "")
        out[verb] = out.get(verb, 0) + int(value)
    return dict(sorted(out.items()))


def counts_delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """after - before per key, keys with no change left out."""
    d = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
    return {k: v for k, v in sorted(d.items()) if v}


def per_kubelet(value: float, kubelets: int, digits: int = 1) -> float | None:
    """`value` / kubelets, rounded; None without kubelets."""
    return round(value / kubelets, digits) if kubelets else None


def cpu_us_per_kubelet_second(cpu_s: float, window_s: float, kubelets: int) -> float | None:
    """CPU seconds over a window as microseconds of CPU per kubelet and second of the window."""
    if not kubelets or window_s <= 0:
        return None
    return round(cpu_s / window_s / kubelets * 1e6, 2)


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


# -- process and socket readings (I/O) ------------------------------------------------------


def rss_median(pid: int, *, group: bool = False) -> int:
    """The median of RSS_SAMPLES readings of `pid`'s RSS (with `group`, of every process of its
    session: a proxy's supervisor and workers), RSS_SAMPLE_SECONDS apart (bytes)."""
    values = []
    for i in range(RSS_SAMPLES):
        values.append(group_rss_bytes(pid) if group else rss_bytes(pid))
        if i + 1 < RSS_SAMPLES:
            time.sleep(RSS_SAMPLE_SECONDS)
    return int(median(values))


def server_cpu_seconds(side: str, pid: int) -> float:
    """CPU seconds of the side's server: the proxy's whole session (supervisor and workers), or
    the peer's kube-apiserver."""
    return group_cpu_seconds(pid) if side == "proxy" else cpu_seconds(pid)


# -- a step: one federation, both sides -----------------------------------------------------


@dataclass
class Step:
    kubelets: int
    params: Params
    fed: Federation
    proxy: ProxyProcess
    clients: GoClients
    directory: Path  # the federation root
    nodes_file: Path  # the node names, one per line (the fleet's --nodes-file)
    proxy_kubeconfig: Path  # server URL and CA of the proxy (the fleet ignores its user)
    admin: Http  # an admin through the proxy (/metrics, /debug/caches)

    def http(self, partition: str) -> Http:
        p = self.fed.partition(partition)
        return Http(p.server, client_ssl(self.fed, p.admin_cert))

    def proxy_pid(self) -> int:
        assert self.proxy.popen is not None
        return self.proxy.popen.pid

    def partitions(self, side: str) -> list[str]:
        return list(PROXIED) if side == "proxy" else [PEER]

    def server_port(self, side: str) -> int:
        return self.proxy.port if side == "proxy" else self.fed.partition(PEER).port

    def server_pid(self, side: str) -> int:
        return self.proxy_pid() if side == "proxy" else apiserver_pid(self.fed.partition(PEER))


@dataclass
class Snapshot:
    """Figures of one side at one moment (monotonic `t`); sizes in bytes, CPU in seconds."""

    t: float
    server_cpu: float
    server_rss: int
    apiserver_cpu: dict[str, float]
    apiserver_rss: dict[str, int]
    fleet_cpu: float | None
    fleet_rss: int | None
    downstream: int  # ESTABLISHED connections to the server's port
    upstream: dict[str, int]  # proxy side: the proxy's ESTABLISHED connections to each partition
    watches: dict[str, dict[str, int]]  # per partition: WATCH requests open per resource
    requests: dict[str, dict[str, int]]  # per partition: apiserver_request_total per verb
    sars: dict[str, int]  # per partition: SubjectAccessReviews answered (all verbs)
    proxy_watches: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] | None = None  # the proxy's /debug/memory, when it traces allocations
    # proxy side: the RSS of each of its processes, the session leader (with --workers above 1,
    # the supervisor) first, then its workers by pid
    server_rss_by_process: list[int] = field(default_factory=list)


def snapshot(step: Step, side: str, fleet_pid: int | None) -> Snapshot:
    """Read the side's figures: CPU first (one instant), then metrics, sockets, RSS medians."""
    parts = step.partitions(side)
    pids = {x: apiserver_pid(step.fed.partition(x)) for x in parts}
    server_pid = step.server_pid(side)
    t = time.monotonic()
    server_cpu, fleet_cpu = server_cpu_seconds(side, server_pid), cpu_seconds(fleet_pid) if fleet_pid else None
    apiserver_cpu = {x: cpu_seconds(pid) for x, pid in pids.items()}
    texts = {x: step.http(x).get("/metrics", accept="text/plain").decode() for x in parts}
    sockets = read_sockets()
    upstream: dict[str, int] = {}
    proxy_watches: dict[str, Any] = {}
    memory: dict[str, Any] | None = None
    if side == "proxy":
        mine = set().union(*(socket_inodes(pid) for _, pid in session_pids(server_pid)))
        upstream = {x: count_established(sockets, remote_port=step.fed.partition(x).port, inodes=mine) for x in parts}
        proxy_watches = proxy_watch_counts(step.admin.get("/metrics", accept="text/plain").decode())
        if step.params.trace_memory:
            memory = step.admin.get_json("/debug/memory")
    return Snapshot(
        t=t, server_cpu=server_cpu, server_rss=rss_median(server_pid, group=side == "proxy"), apiserver_cpu=apiserver_cpu,
        apiserver_rss={x: rss_bytes(pid) for x, pid in pids.items()}, fleet_cpu=fleet_cpu,
        fleet_rss=rss_bytes(fleet_pid) if fleet_pid else None,
        server_rss_by_process=[int(f[21]) * PAGE_SIZE for f, pid in sorted(session_pids(server_pid), key=lambda e: (e[1] != server_pid, e[1]))]
        if side == "proxy" else [],
        downstream=count_established(sockets, local_port=step.server_port(side)), upstream=upstream,
        watches={x: watch_counts(t) for x, t in texts.items()}, requests={x: request_total(t) for x, t in texts.items()},
        sars={x: sum(request_total(t, resource="subjectaccessreviews").values()) for x, t in texts.items()},
        proxy_watches=proxy_watches, memory=memory,
    )


@dataclass
class Fleet:
    """A running `rvcheck fleet`: its process, report, status and mark files."""

    proc: subprocess.Popen[bytes]
    report: Path
    status_file: Path
    mark_file: Path

    def status(self) -> dict[str, Any] | None:
        """The fleet's last status (written once a second), None before the first."""
        try:
            doc: dict[str, Any] = orjson.loads(self.status_file.read_bytes())
            return doc
        except (OSError, orjson.JSONDecodeError):
            return None


def start_fleet(step: Step, side: str) -> Fleet:
    """Start `rvcheck fleet` for the side: through the proxy (pinned to each node's RP) or
    straight at the peer."""
    p, tag = step.params, f"{side}-{step.kubelets}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    status, mark = ARTIFACTS / f"{tag}-status.json", ARTIFACTS / f"{tag}-mark"
    for path in (status, mark):
        path.unlink(missing_ok=True)
    kubeconfig = step.proxy_kubeconfig if side == "proxy" else step.fed.partition(PEER).admin_kubeconfig
    args = ["fleet", "--kubeconfig", str(kubeconfig), "--ca-cert", str(step.fed.ca.cert_file),
            "--ca-key", str(step.fed.ca.key_file), "--nodes-file", str(step.nodes_file), "--ramp", f"{p.ramp:g}",
            "--status-interval", f"{p.status_interval:g}s", "--lease-interval", f"{p.lease_interval:g}s",
            "--status-file", str(status), "--mark-file", str(mark), "--report-interval", "10s",
            "--content-type", p.content_type, *(["--pin"] if side == "proxy" else [])]
    proc, report = step.clients.start(f"{tag}-fleet", args)
    return Fleet(proc=proc, report=report, status_file=status, mark_file=mark)


def wait_status(fleet: Fleet, done: Any, timeout: float, what: str) -> dict[str, Any]:
    """Poll the fleet's status until `done(status)`; RuntimeError when the fleet exits or after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_log = 0.0
    while True:
        status = fleet.status()
        if status is not None and done(status):
            return status
        if fleet.proc.poll() is not None:
            raise RuntimeError(f"the fleet exited ({fleet.proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"not {what} within {timeout:.0f} s: {status}")
        if time.monotonic() - last_log > 10:
            last_log = time.monotonic()
            if status is not None:
                log(f"waiting for {what}: {status['kubelets_all_open']}/{status['kubelets']} kubelets all open, "
                    f"{status['open_watches']} watches, {status['recovered_since_mark']} recovered since the mark")
        time.sleep(POLL_SECONDS)


def stop_fleet(fleet: Fleet) -> dict[str, Any]:
    """SIGTERM the fleet and read its report."""
    if fleet.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(fleet.proc.pid, signal.SIGTERM)
    return GoClients.report(fleet.proc, fleet.report, FLEET_STOP_TIMEOUT_SECONDS)


# -- figures of a side ----------------------------------------------------------------------


def server_figures(n: int, base: Snapshot, s0: Snapshot, s1: Snapshot, idle: dict[str, float]) -> dict[str, Any]:
    """The server (proxy process, or the peer's kube-apiserver): RSS growth over the baseline
    at the end of the steady window, per kubelet; CPU over the window per kubelet-second, net
    of the idle server's (`idle["server"]`, cores) and gross."""
    window = s1.t - s0.t
    growth = s1.server_rss - base.server_rss
    cpu = s1.server_cpu - s0.server_cpu
    return {
        "rss_before_mib": round(base.server_rss / 2**20, 1), "rss_after_mib": round(s1.server_rss / 2**20, 1),
        "rss_growth_bytes": growth, "rss_per_kubelet_bytes": per_kubelet(growth, n, 0),
        "rss_by_process_mib": [round(b / 2**20, 1) for b in s1.server_rss_by_process],
        "cpu_s_window": round(cpu, 3), "cpu_cores_window": round(cpu / window, 3) if window > 0 else None,
        "cpu_cores_idle": round(idle["server"], 4),
        "cpu_us_per_kubelet_s": cpu_us_per_kubelet_second(cpu - idle["server"] * window, window, n),
        "cpu_us_per_kubelet_s_gross": cpu_us_per_kubelet_second(cpu, window, n),
    }


def idle_cpu(step: Step, side: str, base: Snapshot) -> dict[str, float]:
    """CPU cores the server and each partition's kube-apiserver use with no kubelet, from the
    baseline's reading over IDLE_CPU_SECONDS ("server" and partition names)."""
    time.sleep(max(0.0, IDLE_CPU_SECONDS - (time.monotonic() - base.t)))
    dt = time.monotonic() - base.t
    out = {"server": (server_cpu_seconds(side, step.server_pid(side)) - base.server_cpu) / dt}
    for x in base.apiserver_cpu:
        out[x] = (cpu_seconds(apiserver_pid(step.fed.partition(x))) - base.apiserver_cpu[x]) / dt
    return out


def connection_figures(n: int, side: str, base: Snapshot, s1: Snapshot) -> dict[str, Any]:
    """Downstream connections to the server's port and, through the proxy, its upstream
    connections per partition: at the end of the window, added over the baseline, per kubelet."""
    out: dict[str, Any] = {
        "downstream": s1.downstream, "downstream_added": s1.downstream - base.downstream,
        "downstream_added_per_kubelet": per_kubelet(s1.downstream - base.downstream, n, 3),
    }
    if side == "proxy":
        added = {x: s1.upstream[x] - base.upstream.get(x, 0) for x in s1.upstream}
        out.update({
            "upstream": s1.upstream, "upstream_before": base.upstream, "upstream_added": added,
            "upstream_added_per_kubelet": {x: per_kubelet(v, n, 3) for x, v in added.items()},
            "upstream_added_total": sum(added.values()),
            "upstream_added_total_per_kubelet": per_kubelet(sum(added.values()), n, 3),
        })
    return out


def watch_figures(n: int, base: Snapshot, s1: Snapshot) -> dict[str, Any]:
    """WATCH requests open on each partition (apiserver_longrunning_requests): at the end of
    the window, added over the baseline (per resource), per kubelet."""
    added = {x: counts_delta(s1.watches[x], base.watches.get(x, {})) for x in s1.watches}
    totals = {x: sum(v.values()) for x, v in added.items()}
    return {
        "per_partition": {x: sum(w.values()) for x, w in s1.watches.items()},
        "added_per_partition": totals, "added_by_resource": added,
        "added_per_kubelet": {x: per_kubelet(v, n, 3) for x, v in totals.items()},
        "added_total": sum(totals.values()), "added_total_per_kubelet": per_kubelet(sum(totals.values()), n, 3),
    }


def partition_figures(n: int, base: Snapshot, s0: Snapshot, s1: Snapshot, idle: dict[str, float]) -> dict[str, Any]:
    """Per partition: kube-apiserver RSS growth over the baseline and per kubelet, its CPU over
    the window per kubelet-second net of its idle CPU, requests per second by verb and
    SubjectAccessReviews."""
    window = s1.t - s0.t
    out = {}
    for x in s1.apiserver_rss:
        growth = s1.apiserver_rss[x] - base.apiserver_rss[x]
        requests = counts_delta(s1.requests[x], s0.requests[x])
        cpu = s1.apiserver_cpu[x] - s0.apiserver_cpu[x] - idle[x] * window
        out[x] = {
            "rss_mib": round(s1.apiserver_rss[x] / 2**20, 1), "rss_growth_mib": round(growth / 2**20, 1),
            "rss_per_kubelet_bytes": per_kubelet(growth, n, 0), "cpu_cores_idle": round(idle[x], 4),
            "cpu_us_per_kubelet_s": cpu_us_per_kubelet_second(cpu, window, n),
            "requests_per_s": {verb: round(v / window, 2) for verb, v in requests.items()} if window > 0 else {},
            "subjectaccessreviews_window": s1.sars[x] - s0.sars[x],
        }
    return out


def fleet_figures(n: int, s0: Snapshot, s1: Snapshot, st0: dict[str, Any], st1: dict[str, Any]) -> dict[str, Any]:
    """The load client itself (it must not be the bottleneck) and its Lease renewals over the window."""
    window = s1.t - s0.t
    cpu = (s1.fleet_cpu or 0.0) - (s0.fleet_cpu or 0.0)
    return {
        "cpu_cores_window": round(cpu / window, 3) if window > 0 else None,
        "cpu_us_per_kubelet_s": cpu_us_per_kubelet_second(cpu, window, n),
        "rss_mib": round((s1.fleet_rss or 0) / 2**20, 1), "rss_per_kubelet_bytes": per_kubelet(s1.fleet_rss or 0, n, 0),
        "lease_renewals_ok_window": st1["lease_renewals_ok"] - st0["lease_renewals_ok"],
        "lease_renewals_failed_window": st1["lease_renewals_failed"] - st0["lease_renewals_failed"],
        "oldest_renew_age_at_end_s": st1["oldest_renew_age_s"],
        "errors_window": st1["errors"] - st0["errors"],
    }


def trimmed(report: dict[str, Any]) -> dict[str, Any]:
    """The fleet's report without its per-second timeline (kept in .local/bench/fleet/)."""
    return {k: v for k, v in report.items() if k != "timeline"}


# -- the reconnect storm --------------------------------------------------------------------


def sar_counts(step: Step) -> dict[str, int]:
    """SubjectAccessReviews each partition behind the proxy answered so far."""
    return {x: sum(request_total(step.http(x).get("/metrics", accept="text/plain").decode(),
                                 resource="subjectaccessreviews").values()) for x in PROXIED}


def storm(step: Step, fleet: Fleet, side: str) -> dict[str, Any]:
    """Restart the side's server under its fleet: a mark the fleet acknowledges, the server
    stopped (SIGTERM: the proxy, or the peer's kube-apiserver, ends every watch) and started
    again on its port (the peer's etcd keeps running), then the wait until every kubelet
    reopened all its watches. Times in seconds from the mark. SubjectAccessReviews are the
    proxy's: kube-apiserver authorizes its own clients in-process."""
    n, tag, proxy = step.kubelets, f"{side}-{step.kubelets}", side == "proxy"
    sars_before = sar_counts(step) if proxy else {}
    mark, t_mark = time.time_ns(), time.monotonic()
    fleet.mark_file.write_text(f"{mark}\n")
    wait_status(fleet, lambda s: s["mark_ns"] == mark, MARK_ACK_TIMEOUT_SECONDS, "the storm mark read")
    t_stop = time.monotonic()
    log(f"[{tag}] storm: restarting the {'proxy' if proxy else PEER + ' kube-apiserver'} under {n:,} kubelets")
    if proxy:
        step.proxy.stop()
        t_stopped = time.monotonic()
        step.proxy.start(timeout=180)
    else:
        step.fed.stop_apiserver(PEER)
        t_stopped = time.monotonic()
        step.fed.start_apiserver(PEER, timeout=180)
    t_ready = time.monotonic()
    out: dict[str, Any] = {"mark_unix_ns": mark, "server_stop_s": round(t_stopped - t_stop, 2),
                           "server_ready_s": round(t_ready - t_mark, 2), "server_down_s": round(t_ready - t_stopped, 2)}
    try:
        status = wait_status(fleet, lambda s: s["recovered_since_mark"] >= n, STORM_TIMEOUT_SECONDS + n / 100,
                             "every kubelet's watches reopened")
    except RuntimeError as exc:
        out["error"] = str(exc)
        status = fleet.status() or {}
    out.update({
        "recovered": status.get("recovered_since_mark"), "all_recovered_s": status.get("all_recovered_s"),
        "all_recovered_after_ready_s": round(status["all_recovered_s"] - (t_ready - t_mark), 2)
        if (status.get("all_recovered_s") or -1) >= 0 else None,
        "lease_renewals_failed": status.get("lease_renewals_failed"), "oldest_renew_age_s": status.get("oldest_renew_age_s"),
    })
    sars = counts_delta(sar_counts(step), sars_before) if proxy else {}  # before the snapshot's seconds
    after = snapshot(step, side, fleet.proc.pid)
    out["after"] = {"server_rss_mib": round(after.server_rss / 2**20, 1), "downstream_connections": after.downstream}
    reviews = ""
    if proxy:
        out["subjectaccessreviews"] = sars
        out["subjectaccessreviews_per_kubelet"] = per_kubelet(sum(sars.values()), n, 3)
        out["after"].update(upstream_connections=after.upstream,
                            upstream_watches={x: sum(w.values()) for x, w in after.watches.items()})
        reviews = f"; {out['subjectaccessreviews_per_kubelet']} SubjectAccessReviews per kubelet"
    log(f"[{tag}] storm: server down {out['server_down_s']} s; every kubelet's watches open again "
        f"{out['all_recovered_s']} s after the mark{reviews}")
    return out


# -- one side -------------------------------------------------------------------------------


def run_side(step: Step, side: str) -> dict[str, Any]:
    """Baseline, the fleet's start, the steady window, the storm (proxy side); the figures."""
    n, p, tag = step.kubelets, step.params, f"{side}-{step.kubelets}"
    time.sleep(BASELINE_SETTLE_SECONDS)
    base = snapshot(step, side, None)
    idle = idle_cpu(step, side, base)
    log(f"[{tag}] baseline: server RSS {base.server_rss / 2**20:.1f} MiB, {idle['server']:.3f} cores idle, "
        f"{base.downstream} downstream connections; starting {n:,} kubelets at {p.ramp:g}/s")
    fleet = start_fleet(step, side)
    out: dict[str, Any] = {"side": side, "server": "proxy" if side == "proxy" else f"{PEER} kube-apiserver"}
    try:
        t = time.monotonic()
        wait_status(fleet, lambda s: s["kubelets_all_open"] >= n, OPEN_TIMEOUT_SECONDS + n / p.ramp,
                    "every kubelet's watches open")
        out["all_open_s"] = round(time.monotonic() - t, 2)
        log(f"[{tag}] every kubelet's watches open after {out['all_open_s']} s; settling {SETTLE_SECONDS:g} s, "
            f"then {p.duration:g} s of steady state")
        time.sleep(SETTLE_SECONDS)
        st0, s0 = fleet.status() or {}, snapshot(step, side, fleet.proc.pid)
        raw = ARTIFACTS / f"{tag}.raw" if p.profile and side == "proxy" else None
        if raw is not None:
            sample(step.proxy_pid(), raw, p.duration)
        else:
            time.sleep(p.duration)
        st1, s1 = fleet.status() or {}, snapshot(step, side, fleet.proc.pid)
        out.update(steady_figures(n, side, base, idle, (s0, s1), (st0, st1)))
        if raw is not None:
            out["profile"] = profile_parts(raw, out["server_figures"]["cpu_us_per_kubelet_s_gross"] or 0.0)
        if p.storm:
            out["storm"] = storm(step, fleet, side)
    finally:
        report = stop_fleet(fleet)
    out["fleet_report"] = trimmed(report)
    return out


MEMORY_SITES_SHOWN = 20  # allocation sites listed per step, the largest growth first
PY_SPY_RATE = 100  # samples per second per worker: ~12,000 over a 120 s window, little overhead


def sample(pid: int, raw: Path, seconds: float) -> None:
    """py-spy on the proxy `pid` and its workers for `seconds`, native frames included, its
    collapsed stacks written to `raw`. Raises CalledProcessError."""
    subprocess.run([str(PY_SPY), "record", "-p", str(pid), "--subprocesses", "--native", "-r", str(PY_SPY_RATE),
                    "-d", str(round(seconds)), "-f", "raw", "-o", str(raw)], check=True, capture_output=True)


def profile_parts(raw: Path, cpu_us_per_kubelet_s: float) -> dict[str, Any]:
    """The proxy's CPU per kubelet-second (gross: the idle proxy's included, as the samples
    are), split by part in proportion to the busy samples (`bench.where_cpu_goes.account`)."""
    counts = account(raw)
    return {"samples": dict(counts), "us_per_kubelet_s": busy_parts(counts, cpu_us_per_kubelet_s)}


def memory_growth(n: int, before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Where `n` kubelets' bytes went, from two /debug/memory readings of a tracing proxy:
    RSS and traced (Python) growth per kubelet, the rest (native: OpenSSL, the event loop's
    buffers, the allocator's slack) and the allocation sites that grew most, per kubelet
    (bytes). A site present in only one reading counts 0 in the other (the listing is capped)."""
    old = {x["site"]: x["bytes"] for x in before.get("sites", [])}
    new = {x["site"]: x["bytes"] for x in after.get("sites", [])}
    growth = sorted(((site, new.get(site, 0) - old.get(site, 0)) for site in old.keys() | new.keys()),
                    key=lambda kv: kv[1], reverse=True)
    rss = after["rss_bytes"] - before["rss_bytes"]
    traced = after["traced_bytes"] - before["traced_bytes"]
    return {
        "rss_bytes": round(rss / n), "traced_bytes": round(traced / n), "untraced_bytes": round((rss - traced) / n),
        "sites": [{"site": site, "bytes": round(grown / n)} for site, grown in growth[:MEMORY_SITES_SHOWN]],
    }


def steady_figures(n: int, side: str, base: Snapshot, idle: dict[str, float], window: tuple[Snapshot, Snapshot],
                   status: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    """Every figure of the steady window (its first and last snapshot and fleet status), logged
    in one line."""
    (s0, s1), (st0, st1) = window, status
    out: dict[str, Any] = {
        "window_s": round(s1.t - s0.t, 2),
        "server_figures": server_figures(n, base, s0, s1, idle),
        "connections": connection_figures(n, side, base, s1),
        "upstream_watches": watch_figures(n, base, s1),
        "partitions": partition_figures(n, base, s0, s1, idle),
        "fleet": fleet_figures(n, s0, s1, st0, st1),
    }
    if side == "proxy":
        out["proxy_downstream_watches"] = s1.proxy_watches
    if base.memory and s1.memory:
        out["memory_per_kubelet"] = memory_growth(n, base.memory, s1.memory)
    sf, c, w = out["server_figures"], out["connections"], out["upstream_watches"]
    log(f"[{side}-{n}] per kubelet: server RSS {sf['rss_per_kubelet_bytes']} B, CPU {sf['cpu_us_per_kubelet_s']} us/s "
        f"(net of idle), "
        f"downstream connections {c['downstream_added_per_kubelet']}, upstream connections "
        f"{c.get('upstream_added_per_kubelet', '-')}, upstream watches {w['added_per_kubelet']}")
    return out


# -- a step ---------------------------------------------------------------------------------


async def create_objects(fed: Federation, names: Sequence[str]) -> dict[str, dict[str, int]]:
    """Create the nodes and their Leases straight on their partitions (the peer gets all)."""
    where = placement(names)
    deadline = time.monotonic() + 120 + len(names) / 20
    sessions = {x: new_session(client_ssl(fed, fed.partition(x).admin_cert)) for x in where}
    try:
        nodes = await asyncio.gather(*(post_objects(sessions[x], fed.partition(x).server, ns, hollow_node, deadline=deadline)
                                       for x, ns in where.items()))
        leases = await asyncio.gather(*(post_objects(sessions[x], fed.partition(x).server, ns, node_lease, deadline=deadline,
                                                     path=NODE_LEASES) for x, ns in where.items()))
    finally:
        await close_sessions(sessions)
    return {x: {"nodes": a, "leases": b} for x, a, b in zip(where, nodes, leases)}


def answers_per_worker_set(workers: int) -> int:
    """How many answers, each on a new connection, stand for every worker of the proxy (1 for
    one worker): the kernel gives a connection to a worker by a hash of its addresses, so
    CONNECTIONS_PER_WORKER x workers of them miss a given worker with a chance of
    (1 - 1/workers) ** (CONNECTIONS_PER_WORKER x workers), 2 ** -16 at 2 workers."""
    return 1 if workers == 1 else CONNECTIONS_PER_WORKER * workers


def wait_caches(admin: Http, want: int, workers: int = 1) -> dict[str, int]:
    """Poll /debug/caches (a new connection each: a worker's own caches) until the nodes cache
    (and the node-leases cache, when the proxy has one) holds `want` objects each, in
    `answers_per_worker_set(workers)` answers in a row."""
    deadline = time.monotonic() + CACHE_TIMEOUT_SECONDS
    in_a_row = 0
    while True:
        caches = {c["name"]: c for c in admin.get_json("/debug/caches")["caches"]}
        held = {name: caches[name]["objects"] for name in ("nodes", "node-leases") if name in caches}
        if all(v == want and caches[k].get("synced", True) for k, v in held.items()):
            in_a_row += 1
            if in_a_row >= answers_per_worker_set(workers):
                return held
            continue
        in_a_row = 0
        if time.monotonic() > deadline:
            raise RuntimeError(f"the proxy's caches hold {held}, want {want} each")
        time.sleep(POLL_SECONDS)


async def fill_twins(fed: Federation, proxy: ProxyProcess, cert: tuple[Path, Path], workers: int = 1) -> dict[str, float | None]:
    """One protobuf-first LIST of each collection a kubelet watches, through the proxy, repeated
    until it answers protobuf: the protobuf twin of any cache serving it is filled before the
    baseline (seconds each, the longest over the workers; None when it did not within
    TWIN_TIMEOUT_SECONDS). Each worker has its own twins: with several, the same on
    `answers_per_worker_set(workers)` new connections."""
    out: dict[str, float | None] = {}
    for _ in range(answers_per_worker_set(workers)):
        session = new_session(client_ssl(fed, cert), limit=1)
        try:
            for path in KUBELET_COLLECTIONS:
                try:
                    seconds: float | None = round(await fill_protobuf_twin(session, proxy.server, timeout=TWIN_TIMEOUT_SECONDS, path=path), 2)
                except RuntimeError:
                    seconds = None
                before = out.get(path, 0.0)
                out[path] = None if seconds is None or before is None else max(before, seconds)
        finally:
            await session.close()
    return out


def prepare(p: Params, n: int, fed: Federation, proxy: ProxyProcess, clients: GoClients) -> Step:
    """With the federation started: start the proxy, create the nodes and Leases, wait until
    the caches hold them and fill their protobuf twins. The caller stops `fed` and `proxy`."""
    root = fed.root
    proxy.start(timeout=180)
    cert = fed.ca.issue_client(root / "fleet-clients", "fleet-admin", "fleet-admin", [PROXY_ADMINS_GROUP])
    step = Step(kubelets=n, params=p, fed=fed, proxy=proxy, clients=clients, directory=root,
                nodes_file=root / "fleet-nodes.txt", admin=Http(proxy.server, client_ssl(fed, cert)),
                proxy_kubeconfig=fed.issue_client_kubeconfig("fleet-server", user="fleet-server", server=proxy.server))
    names = fleet_node_names(n)
    step.nodes_file.write_text("\n".join(names) + "\n")
    t = time.monotonic()
    created = asyncio.run(create_objects(fed, names))
    log(f"[{n} kubelets] created nodes and Leases {created} in {time.monotonic() - t:.1f} s")
    held = wait_caches(step.admin, n, p.workers)
    twins = asyncio.run(fill_twins(fed, proxy, cert, p.workers))
    log(f"[{n} kubelets] the proxy's caches hold {held}; protobuf twins filled in {twins} s")
    return step


def run_step(p: Params, n: int, root: Path) -> dict[str, Any]:
    """One federation, then every side of `p.sides` one after the other."""
    t0 = time.monotonic()
    clients = GoClients(ARTIFACTS)
    fed = Federation(root, tenant_partitions=len(TENANT_PARTITIONS), resource_partitions=len(RESOURCE_PARTITIONS) + 1)
    proxies: list[ProxyProcess] = []
    result: dict[str, Any] = {"kubelets": n}
    try:
        log(f"[{n} kubelets] starting the federation (tp1, tp2, rp1, rp2 behind the proxy; {PEER} the peer)")
        fed.start()
        proxies.append(ProxyProcess(fed, root / "proxy", partitions=list(PROXIED), extra=proxy_extra(n), workers=p.workers,
                                    env={"PYTHONTRACEMALLOC": "1"} if p.trace_memory else None))
        step = prepare(p, n, fed, proxies[0], clients)
        result["setup_s"] = round(time.monotonic() - t0, 1)
        for side in p.sides:
            try:
                result[side] = run_side(step, side)
            except RuntimeError as exc:  # a fleet that could not open its watches: where it stops, and why
                log(f"[{side}-{n}] stopped: {exc}")
                result[side] = {"side": side, "stopped": str(exc)[:4000]}
            clients.stop_all()
    finally:
        clients.stop_all()
        for proxy in proxies:
            proxy.stop()
        fed.stop()
    result["step_seconds"] = round(time.monotonic() - t0, 1)
    result["comparison"] = compare(result)
    return result


def compare(step: dict[str, Any]) -> dict[str, Any]:
    """Proxy / direct ratios of the per-kubelet server figures."""
    if "proxy" not in step or "direct" not in step or "server_figures" not in step["proxy"] \
            or "server_figures" not in step["direct"]:
        return {}
    pr, dr = step["proxy"]["server_figures"], step["direct"]["server_figures"]
    return {
        "rss_per_kubelet_ratio": ratio(pr["rss_per_kubelet_bytes"] or float("nan"), dr["rss_per_kubelet_bytes"] or float("nan")),
        "cpu_per_kubelet_s_ratio": ratio(pr["cpu_us_per_kubelet_s"] or float("nan"), dr["cpu_us_per_kubelet_s"] or float("nan")),
        "all_open_s_ratio": ratio(step["proxy"].get("all_open_s", float("nan")), step["direct"].get("all_open_s", float("nan"))),
    }


# -- main -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    try:
        params = parse_args(argv)
    except Refused as exc:
        print(f"fleet: {exc}", file=sys.stderr)
        return 2
    if not RVCHECK.exists():
        print(f"fleet: {RVCHECK} missing: run `bash hack/build-components.sh`", file=sys.stderr)
        return 2

    install_sigterm()
    nofile = raise_nofile_to(nofile_wanted(max(params.steps)))
    root = WORK_DIR / NAME
    t0 = time.monotonic()
    doc: dict[str, Any] = {
        "benchmark": NAME, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": host_info(),
        "params": {**params.__dict__, "steps": list(params.steps)},
        "nofile": {"soft": nofile[0], "hard": nofile[1], "wanted": nofile_wanted(max(params.steps))},
        "peer": f"{PEER}: the same fleet straight at a kube-apiserver the proxy does not front, holding all the nodes, "
                f"in the same run",
        "steps": [],
    }
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    doc["steps"], interrupted = run_steps(params.steps, lambda n: run_step(params, n, root), root, keep=params.keep)
    if interrupted:
        log(f"interrupted: every process stopped, {root} deleted")
        return 130
    doc["total_seconds"] = round(time.monotonic() - t0, 1)
    emit(NAME, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
