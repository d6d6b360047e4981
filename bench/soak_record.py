"""The soak's recorders and samplers (bench/soak.py): they watch, probe and sample, and write
records; the checkers (bench/soak_checks.py) judge them afterwards.

- `Recorder`: a reflector-like watcher of one collection: LIST, then WATCH with bookmarks
  resumed from its last resourceVersion whenever a stream ends, a relist (a new segment) only
  after 410 Expired. Through a proxy replica it sees proxy RVs, straight on a partition native
  ones (the partition's own history: the truth the checkers compare against).
- `EpochArchive`: every epoch of the proxy's resourceVersion table ever seen (read straight
  from the system partition), so every proxy RV recorded can be decoded afterwards even if the
  table dropped its epoch meanwhile; `Decoder` decodes with it.
- `Prober`: a few GETs through each replica every second (status, latency: the plot's latency
  series, and client-visible errors).
- `Sampler`: every few seconds, the replicas' RSS, open fds and CPU (/proc), their /metrics
  (requests in flight, 5xx answered, cache relists, asyncio tasks), the fleet's status files.
- `LeaseSampler`: every node Lease read straight from its RP.
- `ErrorLog`: every failed request of the soak's clients through the proxy, with its time.

Times are `Clock` seconds since the soak started. Nothing here decides pass or fail.
"""

from __future__ import annotations

import asyncio
import os
import random
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.soak_checks import LISTED, ClientError, Event, LeaseSample, Segment, WatcherLog
from hack.procs import children
from routing import rv as rvcodec

# seconds
WATCH_SECONDS = (240, 360)  # a watch's timeoutSeconds, drawn per request (client-go: 5-10 min)
WATCH_IDLE_SECONDS = 90.0  # no byte for this long: the stream is dead, resume (bookmarks come every minute)
REQUEST_SECONDS = 30.0  # a LIST or a probe
BACKOFF_SECONDS = (0.2, 2.0)  # first and largest retry delay (doubling, jittered)
TABLE = ("kube-system", "partition-proxy-resource-versions")  # the proxy's default epoch table
METRICS_WANTED = (
    "partition_proxy_inflight_requests", "partition_proxy_requests_total", "partition_proxy_watch_cache_relists",
    "process_open_fds", "process_resident_memory_bytes", "partition_proxy_asyncio_tasks",
    "partition_proxy_partition_set_info", "partition_proxy_partition_connections",
)


class Clock:
    """Seconds since the soak started (monotonic), and the wall clock at that start."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.wall0 = time.time()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def from_unix(self, unix_s: float) -> float:
        return unix_s - self.wall0


@dataclass
class ErrorLog:
    """Failed requests of the soak's clients through the proxy (ClientError records)."""

    clock: Clock
    errors: list[ClientError] = field(default_factory=list)

    def add(self, status: int, source: str, detail: str = "") -> None:
        self.errors.append(ClientError(t=self.clock.now(), status=status, source=source, detail=detail[:300]))


class Backoff:
    """Retry delays doubling from BACKOFF_SECONDS[0] to [1], jittered; `reset()` after a success."""

    def __init__(self) -> None:
        self.delay = BACKOFF_SECONDS[0]

    async def wait(self) -> None:
        await asyncio.sleep(self.delay * random.uniform(0.5, 1.0))
        self.delay = min(BACKOFF_SECONDS[1], self.delay * 2)

    def reset(self) -> None:
        self.delay = BACKOFF_SECONDS[0]


def ssl_context(ca_file: Path, cert: tuple[Path, Path]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca_file))
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


def session(ctx: ssl.SSLContext) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=ctx, limit=0, force_close=False),
        headers={"Accept": "application/json", "Accept-Encoding": "identity"},
    )


# -- the reflector-like recorder --------------------------------------------------------------

# (t, type, key, partition, rv as sent, phase, deleting)
RawItem = tuple[float, str, tuple[str, str, str], str, str, str, bool]


@dataclass
class RawSegment:
    """A segment as received: RVs as the server sent them (proxy RVs or native)."""

    start_rv: str
    end_rv: str
    t_start: float
    listed: list[RawItem] = field(default_factory=list)
    events: list[RawItem] = field(default_factory=list)


class Recorder:
    """A reflector-like watcher of `path` on `base` (module docstring). `owner(namespace, name)`
    names the partition that owns an object; `list_rv` is the resourceVersion of its LISTs
    ("0": from a watch cache; "": consistent); `via` names the replica or partition for the
    error log ("" for a partition: its failures are not the proxy's)."""

    def __init__(self, *, name: str, base: str, path: str, http: aiohttp.ClientSession, clock: Clock, errors: ErrorLog | None,
                 owner: Callable[[str, str], str], list_rv: str, pods: bool = False) -> None:
        self.name = name
        self.base = base
        self.path = path
        self.http = http
        self.clock = clock
        self.errors = errors
        self.owner = owner
        self.list_rv = list_rv
        self.pods = pods
        self.segments: list[RawSegment] = []
        self.rv_regressions = 0  # an RV lower than the one before it in a continuous stream
        self.watch_requests = 0
        self.last_receive = 0.0  # clock time of the last event or bookmark

    def _error(self, status: int, what: str, detail: str = "") -> None:
        if self.errors is not None:
            self.errors.add(status, f"{self.name} {what}", detail)

    async def run(self) -> None:
        """LIST and WATCH until cancelled."""
        backoff = Backoff()
        while True:
            seg = await self._list(backoff)
            self.segments.append(seg)
            await self._watch(seg, backoff)

    def _item(self, t: float, typ: str, obj: dict[str, Any]) -> RawItem:
        meta = obj.get("metadata", {})
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        phase = obj.get("status", {}).get("phase", "") if self.pods else ""
        return (t, typ, (ns, name, meta.get("uid", "")), self.owner(ns, name), meta.get("resourceVersion", ""), phase,
                "deletionTimestamp" in meta)

    async def _list(self, backoff: Backoff) -> RawSegment:
        params = {"resourceVersion": self.list_rv} if self.list_rv else {}
        while True:
            try:
                async with self.http.get(self.base + self.path, params=params,
                                         timeout=aiohttp.ClientTimeout(total=REQUEST_SECONDS, sock_connect=10)) as resp:
                    body = await resp.read()
                    if resp.status != 200:
                        self._error(resp.status, "list", body[:200].decode(errors="replace"))
                        await backoff.wait()
                        continue
                doc = orjson.loads(body)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                self._error(0, "list", repr(exc))
                await backoff.wait()
                continue
            backoff.reset()
            t = self.clock.now()
            rv = doc["metadata"]["resourceVersion"]
            seg = RawSegment(start_rv=rv, end_rv=rv, t_start=t)
            seg.listed = [self._item(t, LISTED, obj) for obj in doc.get("items") or []]
            return seg

    async def _watch(self, seg: RawSegment, backoff: Backoff) -> None:
        """Watch from the segment's last RV until a 410 (return: the caller relists)."""
        while True:
            params = {"watch": "1", "resourceVersion": seg.end_rv, "allowWatchBookmarks": "true",
                      "timeoutSeconds": str(random.randint(*WATCH_SECONDS))}
            self.watch_requests += 1
            try:
                async with self.http.get(self.base + self.path, params=params,
                                         timeout=aiohttp.ClientTimeout(total=None, sock_connect=10,
                                                                       sock_read=WATCH_IDLE_SECONDS)) as resp:
                    if resp.status == 410:
                        return
                    if resp.status != 200:
                        self._error(resp.status, "watch", (await resp.read())[:200].decode(errors="replace"))
                        await backoff.wait()
                        continue
                    backoff.reset()
                    if await self._stream(seg, resp):
                        return
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
                self._error(0, "watch", repr(exc))
                await backoff.wait()

    async def _stream(self, seg: RawSegment, resp: aiohttp.ClientResponse) -> bool:
        """Read one watch stream into the segment; True when it ended with 410 Expired."""
        async for line in resp.content:
            if not line.strip():
                continue
            event = orjson.loads(line)
            typ, obj = event["type"], event["object"]
            t = self.clock.now()
            if typ == "ERROR":
                code = int(obj.get("code") or 0)
                if code == 410:
                    return True
                self._error(code, "watch ERROR event", str(obj.get("message", ""))[:200])
                return False
            rv = obj["metadata"]["resourceVersion"]
            if _rv_less(rv, seg.end_rv):
                self.rv_regressions += 1
            seg.end_rv = rv
            self.last_receive = t
            if typ != "BOOKMARK":
                seg.events.append(self._item(t, typ, obj))
        return False


def _rv_less(a: str, b: str) -> bool:
    """KEP-5504's comparison of two resourceVersions: by length, then lexically."""
    return (len(a), a) < (len(b), b)


# -- decoding what was recorded ----------------------------------------------------------------


class EpochArchive:
    """Every epoch of the proxy's resourceVersion table seen so far (module docstring)."""

    def __init__(self, base: str, http: aiohttp.ClientSession) -> None:
        self.url = f"{base}/api/v1/namespaces/{TABLE[0]}/configmaps/{TABLE[1]}"
        self.http = http
        self.epochs: dict[int, rvcodec.Epoch] = {}
        self.reads = 0

    async def read(self) -> bool:
        """Read the table once and merge its epochs; False when the system partition did not answer."""
        try:
            async with self.http.get(self.url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
                if resp.status != 200:
                    return False
                doc = orjson.loads(await resp.read())
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False
        table = rvcodec.table_from_json(doc["data"]["epochs"])
        for e in table.epochs:
            self.epochs.setdefault(e.number, e)
        self.reads += 1
        return True

    def count(self, space: Sequence[str]) -> int:
        """Epochs of exactly this partition list seen so far."""
        return sum(1 for e in self.epochs.values() if e.partitions == tuple(space))

    async def run(self, interval: float) -> None:
        while True:
            await self.read()
            await asyncio.sleep(interval)


class Decoder:
    """Proxy RVs -> native RVs per partition, with every epoch an archive holds."""

    def __init__(self, epochs: Mapping[int, rvcodec.Epoch], partitions: Iterable[str]) -> None:
        ordered = sorted(epochs.values(), key=lambda e: e.number)
        # a table of every epoch ever seen: bases never decrease within a space, so it is valid
        self.table = rvcodec.EpochTable(tuple(ordered))
        self.ids = {rvcodec.partition_id(p): p for p in partitions}
        self.undecodable = 0

    def vector(self, rv: str) -> dict[str, int]:
        """The native positions a proxy RV names ({} when it cannot be decoded)."""
        try:
            value = int(rv)
        except ValueError:
            self.undecodable += 1
            return {}
        if value >= 1 << rvcodec.FIELD_BITS:
            try:
                epoch, vector = self.table.decode_vector(value)
            except rvcodec.RVError:
                self.undecodable += 1
                return {}
            return {p: n for p, n in zip(epoch.partitions, vector) if n}
        if rvcodec.OBJECT_MARKER <= value < rvcodec.OBJECT_MARKER + (1 << 96):
            partition = self.ids.get((value >> 64) & 0xFFFFFFFF)
            if partition is None:
                self.undecodable += 1
                return {}
            return {partition: value & (rvcodec.NATIVE_LIMIT - 1)}
        self.undecodable += 1
        return {}


def native_log(rec: Recorder, partition: str) -> WatcherLog:
    """A recorder straight on `partition` as a WatcherLog (its RVs are native)."""
    log = WatcherLog(rec.name)
    for raw in rec.segments:
        seg = Segment(start={partition: int(raw.start_rv)}, end={partition: int(raw.end_rv)})
        seg.listed = [Event(t, typ, key, partition, int(rv), phase, deleting) for t, typ, key, _, rv, phase, deleting in raw.listed]
        seg.events = [Event(t, typ, key, partition, int(rv), phase, deleting) for t, typ, key, _, rv, phase, deleting in raw.events]
        log.segments.append(seg)
    return log


def proxy_log(rec: Recorder, decoder: Decoder) -> WatcherLog:
    """A recorder through the proxy as a WatcherLog: list items (object form) and events
    (vector form, the owner's field) decoded to native RVs; events that cannot be decoded are
    left out (counted in `decoder.undecodable`)."""
    log = WatcherLog(rec.name)
    for raw in rec.segments:
        seg = Segment(start=decoder.vector(raw.start_rv), end=decoder.vector(raw.end_rv))
        for items, out in ((raw.listed, seg.listed), (raw.events, seg.events)):
            for t, typ, key, owner, rv, phase, deleting in items:
                native = decoder.vector(rv).get(owner)
                if native:
                    out.append(Event(t, typ, key, owner, native, phase, deleting))
        log.segments.append(seg)
    return log


def merged(logs: Sequence[WatcherLog], name: str) -> WatcherLog:
    """Several truth logs of one partition (its recorder restarted) as one, in order."""
    out = WatcherLog(name)
    for log in logs:
        out.segments.extend(log.segments)
    return out


# -- probes -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProbeResult:
    t: float
    replica: str
    probe: str
    status: int  # 0: no answer
    seconds: float


class Prober:
    """GETs through each replica every `interval` seconds (module docstring)."""

    def __init__(self, replicas: Mapping[str, str], http: aiohttp.ClientSession, paths: Mapping[str, str], clock: Clock,
                 errors: ErrorLog) -> None:
        self.replicas = dict(replicas)
        self.http = http
        self.paths = dict(paths)
        self.clock = clock
        self.errors = errors
        self.results: list[ProbeResult] = []

    async def one(self, replica: str, server: str, probe: str, path: str) -> None:
        t0 = time.monotonic()
        status = 0
        try:
            async with self.http.get(server + path, timeout=aiohttp.ClientTimeout(total=REQUEST_SECONDS, sock_connect=5)) as resp:
                body = await resp.read()
                status = resp.status
                if status >= 500 or status == 429:
                    self.errors.add(status, f"probe {probe}@{replica}", body[:200].decode(errors="replace"))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self.errors.add(0, f"probe {probe}@{replica}", repr(exc))
        self.results.append(ProbeResult(self.clock.now(), replica, probe, status, time.monotonic() - t0))

    async def run(self, interval: float) -> None:
        while True:
            started = time.monotonic()
            await asyncio.gather(*(self.one(r, s, p, path) for r, s in self.replicas.items() for p, path in self.paths.items()))
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))


# -- process and metrics samples ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcSample:
    t: float
    replica: str
    pid: int
    rss_bytes: int
    fds: int
    cpu_s: float


@dataclass(frozen=True, slots=True)
class HeapSample:
    """What a replica's C allocator held (its /debug/memory `malloc`: glibc's mallinfo2), bytes,
    and its connections to the partitions: open, and objects not yet freed (-1: not reported)."""

    t: float
    replica: str
    rss_bytes: int
    in_use_bytes: int
    free_bytes: int
    mmapped_bytes: int
    connections_open: int = -1
    connection_objects: int = -1


def heap_sample(t: float, replica: str, doc: Mapping[str, Any]) -> HeapSample | None:
    """A HeapSample of a /debug/memory answer, None when it has no allocator figures."""
    heap = doc.get("malloc")
    if not isinstance(heap, dict) or not isinstance(doc.get("rss_bytes"), int):
        return None
    connections = doc.get("partition_connections") or {}
    return HeapSample(t, replica, doc["rss_bytes"], heap["in_use_bytes"], heap["free_bytes"], heap["mmapped_bytes"],
                      connections.get("open", -1), connections.get("objects", -1))


def read_proc(pid: int) -> tuple[int, int, float] | None:
    """(RSS bytes, open fds, CPU seconds) of a process with its children (a replica's workers),
    None when it is gone."""
    pids = [pid, *children(pid)]
    rss = fds = 0
    cpu = 0.0
    try:
        for p in pids:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1]) * 1024
            fds += len(os.listdir(f"/proc/{p}/fd"))
            text = Path(f"/proc/{p}/stat").read_text()
            fields = text[text.rindex(")") + 2:].split()
            cpu += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return rss, fds, cpu


def parse_samples(text: str, names: Iterable[str]) -> list[tuple[str, dict[str, str], float]]:
    """Samples of the Prometheus text `text` whose name is one of `names`: (name, labels, value)."""
    wanted = set(names)
    out = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        if name not in wanted:
            continue
        parsed: dict[str, str] = {}
        for part in labels.rstrip("}").split('",'):
            if "=" in part:
                k, v = part.split("=", 1)
                parsed[k.strip(",")] = v.strip('"')
        try:
            out.append((name, parsed, float(value)))
        except ValueError:
            continue
    return out


@dataclass(frozen=True, slots=True)
class MetricsSample:
    t: float
    replica: str
    inflight_long_running: float
    inflight_other: float
    server_errors: float  # partition_proxy_requests_total with a 5xx code (cumulative, per process)
    requests: float  # partition_proxy_requests_total (cumulative, per process)
    relists: float  # partition_proxy_watch_cache_relists summed over caches and partitions
    tasks: float | None  # partition_proxy_asyncio_tasks (None: not exported)
    open_fds: float
    idle_partition_connections: float  # partition_proxy_partition_connections{state="idle"}, every partition's


def metrics_sample(t: float, replica: str, text: str) -> MetricsSample:
    samples = parse_samples(text, METRICS_WANTED)

    def total(name: str, pred: Callable[[dict[str, str]], bool] = lambda _: True) -> float:
        return sum(v for n, labels, v in samples if n == name and pred(labels))

    tasks = [v for n, _, v in samples if n == "partition_proxy_asyncio_tasks"]
    return MetricsSample(
        t=t, replica=replica,
        inflight_long_running=total("partition_proxy_inflight_requests", lambda lb: lb.get("kind") == "long-running"),
        inflight_other=total("partition_proxy_inflight_requests", lambda lb: lb.get("kind") == "other"),
        server_errors=total("partition_proxy_requests_total", lambda lb: lb.get("code", "").startswith("5")),
        requests=total("partition_proxy_requests_total"),
        relists=total("partition_proxy_watch_cache_relists"),
        tasks=sum(tasks) if tasks else None,
        open_fds=total("process_open_fds"),
        idle_partition_connections=total("partition_proxy_partition_connections", lambda lb: lb.get("state") == "idle"),
    )


@dataclass(frozen=True, slots=True)
class FleetSample:
    t: float
    fleet: str
    kubelets: int
    all_open: int
    open_watches: int
    lease_ok: int
    lease_failed: int
    errors: int
    oldest_renew_age_s: float
    errors_by_class: dict[str, int] = field(default_factory=dict)  # `errors` by class ("update leases: 503": n)


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent not idle since boot (/proc/stat: every field but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


class Sampler:
    """Every `interval` seconds: the replicas' /proc figures and /metrics, the fleets' status
    files. `pids()` gives each replica's current pid (it changes when one restarts)."""

    def __init__(self, *, pids: Callable[[], Mapping[str, int | None]], servers: Mapping[str, str], http: aiohttp.ClientSession,
                 fleets: Mapping[str, Path], clock: Clock) -> None:
        self.pids = pids
        self.servers = dict(servers)
        self.http = http
        self.fleets = dict(fleets)
        self.clock = clock
        self.procs: list[ProcSample] = []
        self.metrics: list[MetricsSample] = []
        self.fleet: list[FleetSample] = []
        self.machine: list[tuple[float, float]] = []  # (t, CPU seconds all cores spent busy so far)
        self.heap: list[HeapSample] = []

    async def sample(self) -> None:
        t = self.clock.now()
        self.machine.append((t, machine_busy_seconds()))
        for replica, pid in self.pids().items():
            if pid is None:
                continue
            figures = read_proc(pid)
            if figures is not None:
                self.procs.append(ProcSample(t, replica, pid, *figures))
        for replica, server in self.servers.items():
            try:
                async with self.http.get(server + "/metrics", headers={"Accept": "text/plain"},
                                         timeout=aiohttp.ClientTimeout(total=10)) as resp:
                    if resp.status == 200:
                        self.metrics.append(metrics_sample(t, replica, (await resp.text())))
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                pass

    async def run(self, interval: float) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(interval)

    async def run_heap(self, interval: float, replica: str) -> None:
        """Every `interval` seconds, `replica`'s /debug/memory: what its C allocator holds in use
        and free, which tells live bytes from fragments when its RSS grows (one worker answers:
        meant for replica A, which has one)."""
        while True:
            t = self.clock.now()
            try:
                async with self.http.get(self.servers[replica] + "/debug/memory", timeout=aiohttp.ClientTimeout(total=10)) as resp:
                    if resp.status == 200 and (sample := heap_sample(t, replica, await resp.json(content_type=None))) is not None:
                        self.heap.append(sample)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
                pass
            await asyncio.sleep(interval)

    def sample_fleets(self) -> None:
        for name, path in self.fleets.items():
            try:
                doc = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                continue
            self.fleet.append(FleetSample(
                t=self.clock.from_unix(doc["t_unix_ns"] / 1e9), fleet=name, kubelets=doc["kubelets"],
                all_open=doc["kubelets_all_open"], open_watches=doc["open_watches"], lease_ok=doc["lease_renewals_ok"],
                lease_failed=doc["lease_renewals_failed"], errors=doc["errors"], oldest_renew_age_s=doc["oldest_renew_age_s"],
                errors_by_class=doc.get("errors_by_class") or {}))

    async def run_fleets(self, interval: float) -> None:
        """The fleets' status files (written every second) every `interval` seconds: when their
        failures happened, to the second."""
        while True:
            self.sample_fleets()
            await asyncio.sleep(interval)


# -- leases ---------------------------------------------------------------------------------------

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def parse_time(text: str) -> float:
    """A Kubernetes MicroTime/Time (RFC 3339, UTC) as Unix seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class LeaseSampler:
    """Every node Lease straight from each RP every `interval` seconds; keeps the samples of
    Leases older than half their duration (the checker needs only those) and the largest age
    per round. `partitions()` gives the RPs to read and their sessions' base URLs."""

    def __init__(self, partitions: Callable[[], Mapping[str, tuple[str, aiohttp.ClientSession]]], clock: Clock,
                 select: Callable[[str], bool]) -> None:
        self.partitions = partitions
        self.clock = clock
        self.select = select
        self.samples: list[LeaseSample] = []
        self.rounds = 0
        self.max_age: list[tuple[float, float]] = []  # (t, the oldest Lease's age)
        self.failed_reads = 0
        self.active = False  # set once every fleet kubelet renewed (a Lease created by the bench is old by design)

    async def sample(self) -> None:
        oldest = 0.0
        for partition, (base, http) in self.partitions().items():
            try:
                async with http.get(base + LEASES, timeout=aiohttp.ClientTimeout(total=15)) as resp:
                    if resp.status != 200:
                        self.failed_reads += 1
                        continue
                    doc = orjson.loads(await resp.read())
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                self.failed_reads += 1
                continue
            now = time.time()
            t = self.clock.now()
            for item in doc.get("items") or []:
                name = item["metadata"]["name"]
                spec = item.get("spec", {})
                if not self.select(name) or "renewTime" not in spec:
                    continue
                age = now - parse_time(spec["renewTime"])
                duration = float(spec.get("leaseDurationSeconds") or 40)
                oldest = max(oldest, age)
                if age > duration / 2:
                    self.samples.append(LeaseSample(t, partition, name, round(age, 2), duration))
        self.rounds += 1
        self.max_age.append((self.clock.now(), oldest))

    async def run(self, interval: float) -> None:
        while True:
            if self.active:
                await self.sample()
            await asyncio.sleep(interval)
