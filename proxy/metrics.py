"""Prometheus metrics of the proxy, in a registry owned by the application (no globals).

partition_proxy_requests_total{verb, route, partition, code}: requests answered; `route` is the
  route kind (forward, fan-out, reject, local), `partition` the target (a name, or `union`).
partition_proxy_request_duration_seconds{verb, route}: time to the end of the answer (seconds;
  for watches, the life of the stream).
partition_proxy_inflight_requests{kind}: requests being served now (`kind`: long-running or
  other), the concurrency signal an autoscaler can follow.
partition_proxy_degraded_answers_total{partition, kind}: union answers with a partition down
  (kind stale: its part from a watch cache; partial: left out).
partition_proxy_rejected_requests_total{class, reason}: 429s from the in-flight limits.
apiserver_request_sli_duration_seconds{verb, group, version, resource, subresource, scope,
  component}: kube-apiserver's request SLI histogram, same name, labels and buckets
  (routing.sli), for every resource request that is not long-running, so clusterloader2's API
  responsiveness measurement reads the proxy as it reads kube-apiserver.
partition_proxy_connections{protocol}, partition_proxy_connections_accepted{protocol}: client
  connections open now and accepted since start, per protocol ALPN chose (h2, http/1.1).
partition_proxy_event_loop_lag_seconds: how much later than asked a probe sleeping 50 ms woke
  (proxy.loop_health): the wait of every ready callback, the signal of a stalled loop.
partition_proxy_gc_pause_seconds{generation}: duration of each garbage collection.
partition_proxy_partition_set_info{version}: 1 for the partition-set version this process serves
  (config.changes.partition_set_version; with workers, the number of workers serving it), 0
  for versions it served before. partition_proxy_partition_set_reloads_total{result}: reloads
  of the config file (applied, unchanged, refused).
partition_proxy_replication_failures_total{partition, resource}: writes of cluster-scoped
  definitions (CRDs, admission policies, ...) the system partition took and a TP did not.
partition_proxy_definitions_differing{partition, resource}: copies of those definitions in a TP
  that differ from the system partition's (routing.replicas), as of the last definitions sync.
partition_proxy_watch_cache_{objects,bytes,watchers}{cache} and
partition_proxy_watch_cache_{relists,resource_version}{cache, partition}: per watch cache.
partition_proxy_watchers_behind_total{cache}: cache watchers closed (410 Expired) because their
  client did not read its events as fast as they came (the watcher's bounded queue filled).
partition_proxy_partition_available{partition}: 1 while the proxy sends the partition requests,
  0 while its circuit breaker holds it marked down (requests it owns get 503 at once).
partition_proxy_partition_connections{partition, state}: connections open to a partition now,
  `idle` (pooled, waiting for a request; at most 64 per endpoint, closed 60 s after their last
  answer: proxy.clients.transport) or `busy` (a request, an answer or a watch on it).
partition_proxy_resource_version_table_age_seconds: seconds since the resourceVersion table was
  last read from the system partition (it is read every `refresh_seconds`; RVs of merged
  resources need it).
partition_proxy_asyncio_tasks: asyncio tasks alive in the process at scrape time (every stream
  and request holds one): flat under steady load, a task leak grows it (bench/soak.py checks it).
process_*: prometheus-client's process figures (resident memory, CPU seconds, open files), per
  process; with workers, summed over them (the start time: the earliest).

The per-request figures (requests, duration, the SLI histogram, requests in flight) are kept by
`RequestMetrics`: plain dict and list arithmetic per request (no lock, no label lookup, no
shared-memory write), turned into metric families only when scraped. The other metrics change a
few times a second at most and use prometheus-client's instruments.

With `serve --workers N` (N > 1) each worker keeps its own registry and answers, on a Unix
socket in the directory named by PARTITION_PROXY_METRICS_DIR (made by the supervisor), with its
samples as JSON; `/metrics`, whichever worker answers it, asks every other worker at scrape
time and merges (`proxy.metrics_workers`): counters and histograms summed; gauges summed
(connections, requests in flight, cache bytes and watchers, relists) or their maximum (objects in
a cache and the resourceVersion it reached, the same in every worker's copy; the definitions
differing). A worker that does not answer within a second is left out of that scrape.

Why not prometheus-client's multiprocess mode (used until 2026-11): it writes every change to a
memory-mapped file under a lock, and the hot path made five such changes per request; measured
by `bench/metrics_cost.py` (docs/benchmarks.md).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from routing.sli import SLI_BUCKETS, SLI_LABELS

# The environment variable naming the directory of the workers' metrics sockets (set by the
# supervisor of `serve --workers N`, proxy.workers).
METRICS_DIR_ENV = "PARTITION_PROXY_METRICS_DIR"
# How a gauge merges over workers: "max" for the ones every worker holds the same copy of,
# summed otherwise (proxy.metrics_workers).
GAUGE_MAX = frozenset({
    "partition_proxy_watch_cache_objects",
    "partition_proxy_watch_cache_resource_version",
    "partition_proxy_definitions_differing",
    "partition_proxy_resource_version_table_age_seconds",  # the oldest worker's table
    "process_max_fds",
})
# ... and the smallest, for those where one worker's 0 must show (a partition marked down), and
# the process start time (the replica's oldest worker).
GAUGE_MIN = frozenset({"partition_proxy_partition_available", "process_start_time_seconds"})

# seconds; loop lag and GC pauses, from 1 ms (noise) to 5 s (a stall that breaks watches).
_PAUSE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# seconds; from 5 ms (a cached answer on loopback) to 60 s (the partitions' request timeout).
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class RequestMetrics(Collector):
    """The per-request metrics (module docstring): partition_proxy_requests_total,
    partition_proxy_request_duration_seconds, apiserver_request_sli_duration_seconds and
    partition_proxy_inflight_requests. `started` and `ended` are plain defs that only add to
    dicts; `collect` (the registry's scrape) makes the families."""

    def __init__(self) -> None:
        self.inflight = {"long-running": 0, "other": 0}
        self._requests: dict[tuple[str, str, str, str], int] = {}
        # per label set: a count per bucket (the last one +Inf), then the sum of the observations
        self._duration: dict[tuple[str, str], list[float]] = {}
        self._sli: dict[tuple[str, ...], list[float]] = {}

    def started(self, kind: str) -> None:
        """A request began (`kind`: long-running or other)."""
        self.inflight[kind] += 1

    def ended(self, kind: str, verb: str, route: str, partition: str, code: str, elapsed: float,
              sli: tuple[str, ...] | None) -> None:
        """A request ended after `elapsed` seconds; `sli`: its SLI label values, or None when
        it is not counted there (routing.sli)."""
        self.inflight[kind] -= 1
        key = (verb, route, partition, code)
        requests = self._requests
        requests[key] = requests.get(key, 0) + 1
        _observe(self._duration, (verb, route), _BUCKETS, elapsed)
        if sli is not None:
            _observe(self._sli, sli, SLI_BUCKETS, elapsed)

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("partition_proxy_requests", "Requests answered by the proxy.",
                                       labels=("verb", "route", "partition", "code"))
        for labels, count in self._requests.items():
            requests.add_metric(labels, count)
        yield requests
        yield _histogram("partition_proxy_request_duration_seconds", "Time from request to the end of the answer, in seconds.",
                         ("verb", "route"), _BUCKETS, self._duration)
        yield _histogram("apiserver_request_sli_duration_seconds",
                         "Response latency distribution in seconds for each verb, group, version, resource, subresource, "
                         "scope and component (kube-apiserver's SLI histogram, measured at the proxy).",
                         SLI_LABELS, SLI_BUCKETS, self._sli)
        inflight = GaugeMetricFamily("partition_proxy_inflight_requests", "Requests being served now.", labels=("kind",))
        for kind, count in self.inflight.items():
            inflight.add_metric((kind,), count)
        yield inflight


def _observe(histograms: dict[Any, list[float]], key: Any, buckets: Sequence[float], value: float) -> None:
    counts = histograms.get(key)
    if counts is None:
        counts = histograms[key] = [0.0] * (len(buckets) + 2)
    counts[bisect_left(buckets, value)] += 1  # the first bucket whose upper bound is >= value
    counts[-1] += value


def _histogram(name: str, documentation: str, labels: Sequence[str], buckets: Sequence[float],
               histograms: dict[Any, list[float]]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=labels)
    bounds = [*(_le(b) for b in buckets), "+Inf"]
    for key, counts in histograms.items():
        cumulative, total = [], 0.0
        for bound, count in zip(bounds, counts):
            total += count
            cumulative.append((bound, total))
        family.add_metric(key, cumulative, counts[-1])
    return family


def _le(bound: float) -> str:
    """A bucket bound as prometheus-client writes it (`0.05`, `1.0`, `10.0`)."""
    return repr(float(bound))


@dataclass(frozen=True, slots=True)
class Metrics:
    registry: CollectorRegistry
    requests: RequestMetrics
    degraded: Counter
    rejected: Counter
    cache_objects: Gauge
    cache_bytes: Gauge
    cache_watchers: Gauge
    cache_relists: Gauge
    cache_resource_version: Gauge
    connections: Gauge
    connections_accepted: Gauge
    loop_lag: Histogram
    gc_pause: Histogram
    partition_set: Gauge
    reloads: Counter
    replication_failures: Counter
    definitions_differing: Gauge
    watchers_behind: Counter
    partition_available: Gauge
    partition_connections: Gauge
    table_age: Gauge
    tasks: Gauge
    # with `serve --workers N`: the directory of every worker's metrics socket
    workers_dir: str | None = None
    _connection_counts: list[tuple[Callable[[], Mapping[str, int]], Mapping[str, int]]] = field(default_factory=list)
    _readers: list[Callable[[Metrics], None]] = field(default_factory=list)

    def read_at_scrape(self, reader: Callable[[Metrics], None]) -> None:
        """Call `reader(metrics)` at each `refresh`: it sets gauges from the process's state."""
        self._readers.append(reader)

    def count_connections(self, open_now: Callable[[], Mapping[str, int]], accepted: Mapping[str, int]) -> None:
        """Read the listener's connection counts per protocol at each `refresh`."""
        self._connection_counts.append((open_now, accepted))

    def refresh(self, caches: Sequence[Any]) -> None:
        """Copy the figures read from the process (connections, caches, readers) into the gauges."""
        for reader in self._readers:
            reader(self)
        for open_now, accepted in self._connection_counts:
            counts = open_now()
            for protocol in ("h2", "http/1.1"):
                self.connections.labels(protocol).set(counts.get(protocol, 0))
                self.connections_accepted.labels(protocol).set(accepted.get(protocol, 0))
        self.observe_caches(caches)

    def exposition(self, caches: Sequence[Any]) -> bytes:
        """The Prometheus text of this process (the figures of other workers are merged in by
        `proxy.metrics_workers`)."""
        self.refresh(caches)
        return generate_latest(self.registry)

    def observe_caches(self, caches: Sequence[Any]) -> None:
        """Copy the watch caches' figures into the gauges (at scrape time)."""
        for cache in caches:
            name = cache.spec.name
            self.cache_objects.labels(name).set(len(cache.objects))
            self.cache_bytes.labels(name).set(cache.bytes_total)
            self.cache_watchers.labels(name).set(cache.watcher_count)
            relists, vector = cache.relists, cache.vector
            for slot, partition in enumerate(cache.space):
                self.cache_relists.labels(name, partition).set(relists[slot])
                self.cache_resource_version.labels(name, partition).set(vector[slot])

    @classmethod
    def create(cls, *, workers_dir: str | None = None) -> Metrics:
        """The proxy's metrics, in a registry of their own; `workers_dir`: the directory of the
        workers' metrics sockets when this process is one of several workers."""
        registry = CollectorRegistry(auto_describe=True)
        requests = RequestMetrics()
        registry.register(requests)
        ProcessCollector(registry=registry)  # process_resident_memory_bytes, process_cpu_seconds_total, ...
        return cls(
            workers_dir=workers_dir,
            registry=registry,
            requests=requests,
            degraded=Counter(
                "partition_proxy_degraded_answers",
                "Union answers missing a partition: its part stale from a cache, or left out.",
                ("partition", "kind"),
                registry=registry,
            ),
            rejected=Counter(
                "partition_proxy_rejected_requests",
                "Requests refused with 429 because a class or identity was at its in-flight limit.",
                ("class", "reason"),
                registry=registry,
            ),
            cache_objects=Gauge("partition_proxy_watch_cache_objects", "Objects in a watch cache.", ("cache",), registry=registry),
            cache_bytes=Gauge(
                "partition_proxy_watch_cache_bytes", "Compact JSON bytes held by a watch cache.", ("cache",), registry=registry
            ),
            cache_watchers=Gauge(
                "partition_proxy_watch_cache_watchers", "Client watches served by a watch cache.", ("cache",), registry=registry
            ),
            cache_relists=Gauge(
                "partition_proxy_watch_cache_relists",
                "Relists after 410 Expired, per partition.",
                ("cache", "partition"), registry=registry,
            ),
            connections=Gauge(
                "partition_proxy_connections",
                "Client connections open now, per protocol negotiated by ALPN (h2, http/1.1).",
                ("protocol",), registry=registry,
            ),
            connections_accepted=Gauge(
                "partition_proxy_connections_accepted",
                "Client connections accepted since start, per protocol (a count that only grows).",
                ("protocol",), registry=registry,
            ),
            loop_lag=Histogram(
                "partition_proxy_event_loop_lag_seconds",
                "How much later than asked a periodic probe of the event loop woke, in seconds.",
                buckets=_PAUSE_BUCKETS,
                registry=registry,
            ),
            gc_pause=Histogram(
                "partition_proxy_gc_pause_seconds",
                "Duration of each garbage collection, in seconds, per generation.",
                ("generation",),
                buckets=_PAUSE_BUCKETS,
                registry=registry,
            ),
            partition_set=Gauge(
                "partition_proxy_partition_set_info",
                "1 for the partition-set version served (summed over workers), 0 for earlier ones.",
                ("version",), registry=registry,
            ),
            reloads=Counter(
                "partition_proxy_partition_set_reloads",
                "Reloads of the config file by result: applied, unchanged, refused.",
                ("result",),
                registry=registry,
            ),
            replication_failures=Counter(
                "partition_proxy_replication_failures",
                "Replicated writes of cluster-scoped definitions a tenant partition did not take.",
                ("partition", "resource"),
                registry=registry,
            ),
            definitions_differing=Gauge(
                "partition_proxy_definitions_differing",
                "Copies of replicated definitions in a tenant partition that differ from the system partition's, at the last sync.",
                ("partition", "resource"), registry=registry,
            ),
            watchers_behind=Counter(
                "partition_proxy_watchers_behind",
                "Cache watchers closed (410 Expired) because their client did not read its events as fast as they came.",
                ("cache",),
                registry=registry,
            ),
            partition_available=Gauge(
                "partition_proxy_partition_available",
                "1 while the proxy sends the partition requests, 0 while its circuit breaker holds it marked down.",
                ("partition",),
                registry=registry,
            ),
            partition_connections=Gauge(
                "partition_proxy_partition_connections",
                "Connections open to a partition now: idle (pooled) or busy (a request, an answer or a watch).",
                ("partition", "state"),
                registry=registry,
            ),
            tasks=Gauge(
                "partition_proxy_asyncio_tasks",
                "asyncio tasks alive in the process, read at scrape time.",
                registry=registry,
            ),
            table_age=Gauge(
                "partition_proxy_resource_version_table_age_seconds",
                "Seconds since the resourceVersion table was last read from the system partition.",
                registry=registry,
            ),
            cache_resource_version=Gauge(
                "partition_proxy_watch_cache_resource_version",
                "Native resourceVersion a watch cache has reached, per partition.",
                ("cache", "partition"), registry=registry,
            ),
        )
