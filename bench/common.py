"""Shared set-up of the benchmarks: the federation with its peer, node objects, process figures.

Set-up (always against a peer in the same run):
- `Federation(root, tenant_partitions=1, resource_partitions=3)`: tp1, rp1, rp2, rp3, each a real
  etcd + kube-apiserver on 127.0.0.1.
- The proxy in front of tp1, rp1, rp2 only, with one watch cache of nodes.
- rp3 is the PEER: it holds ALL N nodes, while rp1 and rp2 hold N/2 each (names `rp1-...` on rp1,
  `rp2-...` on rp2, both on rp3), so the proxy's union of rp1+rp2 is the same N nodes as rp3.

Figures: RSS from /proc/<pid>/status VmRSS (bytes), CPU from /proc/<pid>/stat utime+stime
(seconds). Every benchmark prints one JSON document to stdout, progress to stderr, and saves the
JSON to .local/bench/<name>.json.

This module owns no process by itself: `Setup` starts the federation and the proxy, and its
`stop()` (always called from a `finally`) stops both.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import random
import platform
import resource
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from hack.federation import PROXY_ADMINS_GROUP, Federation, PartitionInfo
from hack.proxy_process import ProxyProcess

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / ".local" / "bench"
WORK_DIR = OUT_DIR / "work"  # federation roots (wiped by Federation.start)
MIB = 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")  # bytes
PROXIED = ["tp1", "rp1", "rp2"]
PEER = "rp3"
# parallel POSTs per kube-apiserver while creating nodes (brief: ~32)
CREATE_CONCURRENCY = 32

NodeBuilder = Callable[[str], dict[str, Any]]


NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"  # a kubelet's Lease lives here


def node_leases_cache() -> list[dict[str, Any]]:
    """The proxy's caches config for the benchmarks: the node Leases (as the proxy's default)."""
    return [{"name": "node-leases", "group": "coordination.k8s.io", "resource": "leases", "namespace": "kube-node-lease",
             "role": "resource"}]


def node_lease(name: str) -> dict[str, Any]:
    """The Lease a kubelet keeps for node `name` (pkg/kubelet/nodelease: owned by its Node,
    40 s, renewed every 10 s)."""
    return {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name))}]},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": "2026-11-24T11:00:00.000000Z"},
    }


def nodes_cache(label_selector: str = "") -> list[dict[str, Any]]:
    """The proxy's caches config for the benchmarks: one cache of nodes."""
    cache: dict[str, Any] = {"name": "nodes", "resource": "nodes", "role": "resource"}
    if label_selector:
        cache["label_selector"] = label_selector
    return [cache]


# -- output ---------------------------------------------------------------------------------


def log(*parts: object) -> None:
    """Progress to stderr (stdout carries only the JSON document)."""
    print(f"[{time.strftime('%H:%M:%S')}]", *parts, file=sys.stderr, flush=True)


def host_info() -> dict[str, Any]:
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return {
        "cpus": os.cpu_count(),
        "mem_total_mib": round(mem_kib / 1024),
        "python": platform.python_version(),
        "loadavg_at_start": os.getloadavg()[0],
        "git": git_state(),
    }


def git_state() -> dict[str, Any]:
    """The commit under test and whether the working tree differs from it (the proxy's
    source may hold uncommitted changes while benchmarks run)."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    changed = [line[3:] for line in git("status", "--porcelain", "--", "proxy", "routing", "config", "hack").splitlines() if line]
    return {"commit": git("rev-parse", "--short", "HEAD").strip(), "uncommitted_source_files": changed}


def emit(name: str, doc: dict[str, Any]) -> Path:
    """Print `doc` as the one JSON document on stdout and save it to .local/bench/<name>.json."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=2, sort_keys=False)
    path = OUT_DIR / f"{name}.json"
    path.write_text(text + "\n")
    print(text, flush=True)
    log(f"saved {path}")
    return path


# -- process figures ------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    """VmRSS of `pid` in bytes."""
    return _status_kib(pid, "VmRSS:") * 1024


def hwm_bytes(pid: int) -> int:
    """VmHWM (peak RSS since start) of `pid` in bytes."""
    return _status_kib(pid, "VmHWM:") * 1024


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/{pid}/status")


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


def session_pids(sid: int) -> list[tuple[list[bytes], int]]:
    """(the /proc/<pid>/stat fields after the command, pid) of every process in session `sid`
    (hack.procs.spawn starts each server in a session of its own: a proxy's supervisor and
    workers are its session)."""
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
            out.append((fields, int(entry)))
    return out


def group_cpu_seconds(sid: int) -> float:
    """User + system CPU seconds of every process in session `sid`."""
    return sum(int(f[11]) + int(f[12]) for f, _ in session_pids(sid)) / CLK_TCK  # utime, stime


def group_rss_bytes(sid: int) -> int:
    """Resident bytes of every process in session `sid` (summed: a proxy's workers are
    separate interpreters, started by exec, and share no heap)."""
    return sum(int(f[21]) for f, _ in session_pids(sid)) * PAGE_SIZE  # rss, pages


def mib(n: float) -> float:
    return round(n / MIB, 2)


class RssSampler:
    """Samples VmRSS of some pids every `interval` seconds in a thread (the event loop may be busy
    reading bodies); `peak[pid]` is the largest sample."""

    def __init__(self, pids: Iterable[int], interval: float = 0.05) -> None:
        self.pids = list(pids)
        self.interval = interval
        self.peak = {pid: rss_bytes(pid) for pid in self.pids}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for pid in self.pids:
                try:
                    self.peak[pid] = max(self.peak[pid], rss_bytes(pid))
                except (OSError, RuntimeError):
                    pass
            self.samples += 1

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): with 30 samples p99 is the largest."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary_ms(values_s: Sequence[float]) -> dict[str, float]:
    """Median/p50/p99/min/max of durations given in seconds, in milliseconds."""
    if not values_s:
        return {"count": 0}
    ms = [v * 1000 for v in values_s]
    return {
        "count": len(ms),
        "median_ms": round(statistics.median(ms), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "min_ms": round(min(ms), 3),
        "max_ms": round(max(ms), 3),
    }


def ratio(a: float, b: float) -> float | None:
    if not b or a != a or b != b:  # zero or NaN
        return None
    return round(a / b, 3)


def raise_nofile() -> tuple[int, int]:
    """Raise this process's open-file soft limit to the hard limit (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def install_sigterm() -> None:
    """SIGTERM (and SIGINT) raise KeyboardInterrupt, so `finally` blocks stop what was started;
    once: the cleanup in those blocks must not be interrupted by a second signal."""

    def on_signal(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def run_steps(steps: Iterable[Any], run_step: Callable[[Any], dict[str, Any]], root: Path, *, keep: bool) -> tuple[list[dict[str, Any]], bool]:
    """Each step's result, in order, and whether Ctrl-C/SIGTERM (`install_sigterm`) cut the run
    short. Signals are ignored once the steps are over (the caller stops and reports); `root`,
    a benchmark's federation root, is deleted after the run unless `keep`, always when cut."""
    results: list[dict[str, Any]] = []
    interrupted = False
    try:
        for step in steps:
            results.append(run_step(step))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if interrupted or not keep:
            shutil.rmtree(root, ignore_errors=True)
    return results, interrupted


# -- node objects ---------------------------------------------------------------------------

_ZONES = ("zone-a", "zone-b", "zone-c")
_TYPES = ("n2-standard-8", "n2-standard-16", "m5.2xlarge")
_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)
_T = "2026-01-01T00:00:00Z"


def _hex(name: str, salt: str, n: int = 32) -> str:
    return hashlib.sha256(f"{salt}:{name}".encode()).hexdigest()[:n]


def _uuid(name: str, salt: str) -> str:
    h = _hex(name, salt)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def hollow_node(name: str, extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node about the size of a kubemark hollow node (~2 KB compact JSON before the
    apiserver adds uid/managedFields): 8 labels, capacity/allocatable, 5 conditions,
    2 addresses, nodeInfo, daemonEndpoints."""
    i = int(_hex(name, "i", 8), 16)
    ip = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
    zone, itype = _ZONES[i % 3], _TYPES[i % 3]
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": itype,
        "topology.kubernetes.io/zone": zone,
        "topology.kubernetes.io/region": "region-1",
        **(extra_labels or {}),
    }
    resources = {"cpu": "8", "memory": "32863616Ki", "pods": "110", "ephemeral-storage": "101203028Ki"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"podCIDR": f"100.{(i >> 8) & 255}.{i & 255}.0/24", "providerID": f"kubemark://{name}"},
        "status": {
            "capacity": resources,
            "allocatable": {**resources, "cpu": "7910m", "memory": "31712640Ki"},
            "conditions": [
                {"type": t, "status": s, "lastHeartbeatTime": _T, "lastTransitionTime": _T, "reason": r, "message": m}
                for t, s, r, m in _CONDITIONS
            ],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _hex(name, "machine"),
                "systemUUID": _uuid(name, "system"),
                "bootID": _uuid(name, "boot"),
                "kernelVersion": "6.1.0-28-cloud-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.24",
                "kubeletVersion": "v1.36.3",
                "kubeProxyVersion": "v1.36.3",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


_IMAGE_REPOS = (
    "registry.k8s.io/kube-proxy", "registry.k8s.io/pause", "registry.k8s.io/coredns/coredns",
    "docker.io/library/nginx", "docker.io/library/redis", "docker.io/library/postgres",
    "quay.io/prometheus/node-exporter", "quay.io/prometheus/prometheus", "gcr.io/cadvisor/cadvisor",
    "docker.io/grafana/grafana", "docker.io/bitnami/kafka", "docker.io/library/busybox",
    "ghcr.io/fluxcd/source-controller", "quay.io/jetstack/cert-manager-controller",
    "docker.io/calico/node", "docker.io/calico/cni", "registry.k8s.io/ingress-nginx/controller",
)


_CPU_FEATURES = (
    "ADX", "AESNI", "AVX", "AVX2", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512F", "AVX512VL",
    "AVX512VNNI", "FMA3", "GFNI", "IBPB", "MOVBE", "MPX", "SHA", "SPEC_CTRL_SSBD", "STIBP",
    "VAES", "VPCLMULQDQ", "WBNOINVD", "X87", "XGETBV1", "XSAVE", "XSAVEC",
)


def real_size_node(name: str, extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node the size of a busy production node (~15 KB compact JSON): the hollow node plus
    50 container images (names with digest and tag, sizes), more labels and annotations."""
    obj = hollow_node(name, extra_labels)
    meta, status = obj["metadata"], obj["status"]
    meta["labels"].update({
        "node.kubernetes.io/pool": "general-purpose",
        "cloud.google.com/gke-nodepool": "pool-1",
        "cloud.google.com/machine-family": "n2",
        "node-role.kubernetes.io/worker": "",
        "failure-domain.beta.kubernetes.io/zone": meta["labels"]["topology.kubernetes.io/zone"],
        "failure-domain.beta.kubernetes.io/region": "region-1",
        "topology.gke.io/zone": meta["labels"]["topology.kubernetes.io/zone"],
        "example.com/team": "platform",
        # node-feature-discovery labels, common on production nodes
        **{f"feature.node.kubernetes.io/cpu-cpuid.{f}": "true" for f in _CPU_FEATURES},
    })
    obj["spec"]["taints"] = [
        {"key": "example.com/dedicated", "value": "general", "effect": "PreferNoSchedule"},
    ]
    meta["annotations"] = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "csi.volume.kubernetes.io/nodeid": json.dumps({"pd.csi.storage.gke.io": f"projects/p/zones/z/instances/{name}"}),
        "container.googleapis.com/instance_id": str(int(_hex(name, "inst", 15), 16)),
        "projectcalico.org/IPv4Address": status["addresses"][0]["address"] + "/24",
        "projectcalico.org/IPv4IPIPTunnelAddr": "100.64." + status["addresses"][0]["address"].split(".", 2)[2],
        "node.gke.io/last-applied-node-labels": ",".join(f"{k}={v}" for k, v in sorted(meta["labels"].items())),
    }
    status["images"] = [
        {
            "names": [
                f"{_IMAGE_REPOS[k % len(_IMAGE_REPOS)]}@sha256:{_hex(name, f'img{k}', 64)}",
                f"{_IMAGE_REPOS[k % len(_IMAGE_REPOS)]}:v1.{k}.{k % 7}",
            ],
            "sizeBytes": 1_000_000 + int(_hex(name, f'size{k}', 8), 16) % 900_000_000,
        }
        for k in range(50)
    ]
    status["volumesAttached"] = [
        {"name": f"kubernetes.io/csi/pd.csi.storage.gke.io^projects/p/zones/z/disks/pvc-{_uuid(name, f'v{k}')}",
         "devicePath": ""}
        for k in range(4)
    ]
    status["volumesInUse"] = [v["name"] for v in status["volumesAttached"]]
    return obj


BUILDERS: dict[str, NodeBuilder] = {"hollow": hollow_node, "real": real_size_node}


def compact_size(obj: dict[str, Any]) -> int:
    return len(orjson.dumps(obj))


def node_names(kind: str, start: int, stop: int) -> list[str]:
    """Names of nodes start..stop-1: even on rp1, odd on rp2 (the proxy's prefix placement)."""
    return [f"rp{1 + i % 2}-{kind}-{i:06d}" for i in range(start, stop)]


# -- TLS and HTTP ---------------------------------------------------------------------------


def client_ssl(fed: Federation, cert: tuple[Path, Path]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(fed.ca_file))
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


def new_session(ctx: ssl.SSLContext, *, limit: int = 0, timeout: aiohttp.ClientTimeout | None = None) -> aiohttp.ClientSession:
    """A session that asks for identity encoding (kube-apiserver gzips large responses for
    clients that accept gzip; the proxy does not, so both are compared uncompressed)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=ctx, limit=limit),
        headers={"Accept": "application/json", "Accept-Encoding": "identity"},
        timeout=timeout or aiohttp.ClientTimeout(total=300, sock_connect=15),
    )


async def get_json(session: aiohttp.ClientSession, url: str, **params: str) -> Any:
    async with session.get(url, params=params) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET {url} {params}: {resp.status} {body[:300]!r}")
        return orjson.loads(body)


async def post_objects(
    session: aiohttp.ClientSession,
    server: str,
    names: Sequence[str],
    builder: NodeBuilder,
    *,
    concurrency: int = CREATE_CONCURRENCY,
    deadline: float,
    path: str = "/api/v1/nodes",
) -> int:
    """POST builder(name) for every name to `server`'s collection `path` (default: nodes) with
    `concurrency` parallel requests; 409 counts as done. Returns the number created. Raises
    RuntimeError on other errors or past `deadline` (time.monotonic() seconds)."""
    url = f"{server}{path}"
    it = iter(names)
    created = 0

    async def worker() -> None:
        nonlocal created
        for name in it:
            body = orjson.dumps(builder(name))
            for attempt in range(5):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"creating nodes on {server}: past the deadline")
                async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                    await resp.read()
                    if resp.status == 201:
                        created += 1
                        break
                    if resp.status == 409:
                        break
                    if resp.status in (429, 500, 503, 504) and attempt < 4:
                        await asyncio.sleep(0.2 * (attempt + 1))
                        continue
                    raise RuntimeError(f"POST {url} {name}: {resp.status}")

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return created


# -- the set-up -----------------------------------------------------------------------------


def apiserver_pid(p: PartitionInfo) -> int:
    """The pid of partition `p`'s kube-apiserver (found by its unique --secure-port)."""
    want = f"--secure-port={p.port}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"kube-apiserver") and want in argv:
            return int(entry)
    raise RuntimeError(f"kube-apiserver of {p.name} not found")


@dataclass
class Setup:
    """The federation (tp1, rp1..rp3), the proxy in front of tp1/rp1/rp2, TLS contexts and pids.
    Use `Setup.start(...)` and always `stop()` in a finally."""

    name: str
    fed: Federation
    proxies: list[ProxyProcess] = field(default_factory=list)
    proxy_ssl: ssl.SSLContext | None = None
    partition_ssl: dict[str, ssl.SSLContext] = field(default_factory=dict)

    @classmethod
    def start(
        cls, name: str, *, caches: list[dict[str, Any]] | None = None, proxy: bool = True, extra: dict[str, Any] | None = None,
        event_loop: str | None = None,
    ) -> Setup:
        """Start the federation under .local/bench/work/<name> and (if `proxy`) one proxy with
        `caches` (default: nodes_cache()) and `extra` top-level config keys (e.g. limits).
        On failure, stops what it started and raises."""
        fed = Federation(WORK_DIR / name, tenant_partitions=1, resource_partitions=3)
        setup = cls(name=name, fed=fed)
        try:
            t0 = time.monotonic()
            fed.start()
            log(f"federation up in {time.monotonic() - t0:.1f} s: "
                + ", ".join(f"{p.name}={p.server}" for p in fed.partitions))
            crt = fed.ca.issue_client(fed.root / "bench-clients", "bench-admin", "admin", [PROXY_ADMINS_GROUP])
            setup.proxy_ssl = client_ssl(fed, crt)
            setup.partition_ssl = {p.name: client_ssl(fed, p.admin_cert) for p in fed.partitions}
            if proxy:
                setup.start_proxy("proxy", caches=caches if caches is not None else nodes_cache(), extra=extra, event_loop=event_loop)
        except BaseException:
            setup.stop()
            raise
        return setup

    def start_proxy(self, dirname: str, *, caches: list[dict[str, Any]], extra: dict[str, Any] | None = None,
                    event_loop: str | None = None) -> ProxyProcess:
        t0 = time.monotonic()
        kwargs: dict[str, Any] = {"extra": extra} if extra else {}
        if event_loop:
            kwargs["event_loop"] = event_loop
        proxy = ProxyProcess(self.fed, self.fed.root / dirname, partitions=PROXIED, caches=caches, **kwargs)
        self.proxies.append(proxy)
        proxy.start(timeout=180)
        log(f"proxy {dirname} up in {time.monotonic() - t0:.1f} s at {proxy.server} (pid {self.pid(proxy)})")
        return proxy

    @property
    def proxy(self) -> ProxyProcess:
        return self.proxies[0]

    @staticmethod
    def pid(proxy: ProxyProcess) -> int:
        assert proxy.popen is not None
        return proxy.popen.pid

    def apiserver_pid(self, partition: str) -> int:
        return apiserver_pid(self.fed.partition(partition))

    def server(self, partition: str) -> str:
        return self.fed.partition(partition).server

    def stop(self) -> None:
        for proxy in reversed(self.proxies):
            try:
                proxy.stop()
            except Exception as exc:  # keep stopping the rest
                log(f"stopping proxy: {exc!r}")
        self.fed.stop()
        log("federation and proxies stopped")

    # -- async helpers (call inside the event loop) ----------------------------------------

    def sessions(self) -> dict[str, aiohttp.ClientSession]:
        """One session per partition (admin cert) plus "proxy" (admin through the proxy)."""
        assert self.proxy_ssl is not None
        out = {p: new_session(ctx) for p, ctx in self.partition_ssl.items()}
        out["proxy"] = new_session(self.proxy_ssl)
        return out

    async def populate(
        self,
        sessions: dict[str, aiohttp.ClientSession],
        kind: str,
        start: int,
        stop: int,
        *,
        builder: NodeBuilder | None = None,
        timeout: float = 900,
    ) -> float:
        """Create nodes start..stop-1 of `kind`: even ones on rp1, odd on rp2, all on rp3
        (concurrently on the three). Returns the seconds it took."""
        builder = builder or BUILDERS[kind]
        names = node_names(kind, start, stop)
        deadline = time.monotonic() + timeout
        t0 = time.monotonic()
        counts = await asyncio.gather(
            post_objects(sessions["rp1"], self.server("rp1"), [n for n in names if n.startswith("rp1-")], builder, deadline=deadline),
            post_objects(sessions["rp2"], self.server("rp2"), [n for n in names if n.startswith("rp2-")], builder, deadline=deadline),
            post_objects(sessions[PEER], self.server(PEER), names, builder, deadline=deadline),
        )
        took = time.monotonic() - t0
        log(f"created {kind} nodes {start}..{stop - 1}: rp1={counts[0]} rp2={counts[1]} {PEER}={counts[2]} "
            f"in {took:.1f} s ({sum(counts) / max(took, 1e-9):.0f} POST/s)")
        return took

    async def caches_debug(self, session: aiohttp.ClientSession, proxy: ProxyProcess | None = None,
                           name: str = "nodes") -> dict[str, Any]:
        """The /debug/caches entry of cache `name` (a protobuf twin is `<cache>-protobuf`)."""
        doc = await get_json(session, f"{(proxy or self.proxy).server}/debug/caches")
        for cache in doc["caches"]:
            if cache["name"] == name:
                return cache
        raise RuntimeError(f"no cache named {name} in /debug/caches")

    async def watched_nodes(
        self, sessions: dict[str, aiohttp.ClientSession], kind: str, nodes: int, watches: int, *, patches: int, seed: int
    ) -> tuple[float, list[str], list[str]]:
        """The node set of a watch benchmark: `nodes` hollow nodes of `kind` created and in the
        proxy's cache; returns the seconds creating them took, their names, and `patches` names
        drawn (seeded) from the first `watches` of them: which node each patch goes to, the same
        sequence on both sides of the comparison."""
        took = await self.populate(sessions, kind, 0, nodes, builder=hollow_node)
        await self.wait_cached(sessions["proxy"], nodes)
        names = node_names(kind, 0, nodes)
        watched = names[: min(watches, len(names))]
        rng = random.Random(seed)
        return took, names, [rng.choice(watched) for _ in range(patches)]

    async def wait_cached(
        self, session: aiohttp.ClientSession, want: int, *, proxy: ProxyProcess | None = None, timeout: float = 300,
        name: str = "nodes",
    ) -> dict[str, Any]:
        """Poll /debug/caches until cache `name` holds `want` objects; returns its entry."""
        deadline = time.monotonic() + timeout
        while True:
            cache = await self.caches_debug(session, proxy, name)
            if cache["objects"] == want and cache["synced"]:
                return cache
            if time.monotonic() > deadline:
                raise RuntimeError(f"the proxy's {name} cache holds {cache['objects']} objects, want {want}")
            await asyncio.sleep(0.5)

    async def node_sizes(self, sessions: dict[str, aiohttp.ClientSession], kind: str, name: str) -> dict[str, int]:
        """Compact JSON sizes of one node of `kind`: as built, as the peer stores it (with
        uid, managedFields...), and as the proxy caches it (managedFields stripped)."""
        built = compact_size(BUILDERS[kind](name))
        stored = compact_size(await get_json(sessions[PEER], f"{self.server(PEER)}/api/v1/nodes/{name}"))
        cached = compact_size(await get_json(sessions["proxy"], f"{self.proxy.server}/api/v1/nodes/{name}", resourceVersion="0"))
        sizes = {"built_bytes": built, "apiserver_bytes": stored, "proxy_cached_bytes": cached}
        log(f"{kind} node compact JSON size: {sizes}")
        return sizes


async def fill_protobuf_twin(session: aiohttp.ClientSession, proxy_server: str, timeout: float = 60.0,
                             path: str = "/api/v1/nodes") -> float:
    """Seconds until the cache of `path` (default: nodes) answers a protobuf-first LIST in
    protobuf: the first such request starts filling its protobuf twin (docs/serving.md, "Watch caches"), as
    a fleet's first kubelet would; until it synced the answers are JSON. Raises RuntimeError
    after `timeout`."""
    t0 = time.monotonic()
    headers = {"Accept": "application/vnd.kubernetes.protobuf, application/json"}
    while True:
        async with session.get(f"{proxy_server}{path}", params={"resourceVersion": "0", "limit": "1"}, headers=headers) as resp:
            await resp.read()
            if resp.status == 200 and resp.headers.get("Content-Type") == "application/vnd.kubernetes.protobuf":
                return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"the protobuf twin of the cache of {path} did not sync within {timeout:.0f} s")
        await asyncio.sleep(0.2)


async def close_sessions(sessions: dict[str, aiohttp.ClientSession]) -> None:
    for s in sessions.values():
        await s.close()


async def proxy_stalls(session: aiohttp.ClientSession, server: str) -> dict[str, dict[str, float]]:
    """The proxy's event-loop lag and GC pause histograms from its /metrics, as cumulative
    bucket counts: {"loop_lag": {le: count}, "gc_pause_gen2": {le: count}, ...}."""
    async with session.get(f"{server}/metrics") as resp:
        text = await resp.text()
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for line in text.splitlines():
        if line.startswith("partition_proxy_event_loop_lag_seconds_bucket{"):
            key = "loop_lag"
        elif line.startswith("partition_proxy_gc_pause_seconds_bucket{"):
            key = "gc_pause_gen" + line.split('generation="', 1)[1][0]
        else:
            continue
        le = line.split('le="', 1)[1].split('"', 1)[0]
        out[key][le] = float(line.rsplit(" ", 1)[1])
    return dict(out)


def stall_summary(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Per histogram of `proxy_stalls`: observations between the two scrapes, the bucket bound
    holding their p99 (seconds, "+Inf" beyond the last) and how many took over 50 ms."""
    out: dict[str, Any] = {}
    for key, buckets in after.items():
        delta = {le: n - before.get(key, {}).get(le, 0.0) for le, n in buckets.items()}
        total = delta.get("+Inf", 0.0)
        bounds = sorted((le for le in delta if le != "+Inf"), key=float)
        p99 = next((le for le in bounds if delta[le] >= 0.99 * total), "+Inf") if total else None
        out[key] = {"count": int(total), "p99_le_s": p99, "over_50ms": int(total - delta.get("0.05", total))}
    return out
