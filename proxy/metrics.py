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

With `serve --workers N` (N > 1) every worker process writes its samples to the directory named
by PROMETHEUS_MULTIPROC_DIR (prometheus-client's multiprocess mode, set by the supervisor
before the workers import anything) and `/metrics`, whichever worker answers, is the aggregate
of all of them: counters and histograms summed; gauges summed over live workers (`livesum`:
connections, requests in flight, cache bytes and watchers, relists) or their maximum (`max`:
objects in a cache and the resourceVersion it reached, the same in every worker's copy). Gauges
read from the process (connections, caches) are copied in at scrape time and, with workers,
every METRICS_REFRESH_SECONDS by each worker (so another worker's scrape sees them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from routing.sli import SLI_BUCKETS, SLI_LABELS

# seconds; how often each worker copies its process-read gauges into the shared samples when
# there are several workers: Prometheus scrapes every 15-60 s, so 2 s stale is fresh enough and
# costs a few hundred microseconds per refresh.
METRICS_REFRESH_SECONDS = 2.0
# The environment variable prometheus-client's multiprocess mode reads (at import time).
MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

# seconds; loop lag and GC pauses, from 1 ms (noise) to 5 s (a stall that breaks watches).
_PAUSE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# seconds; from 5 ms (a cached answer on loopback) to 60 s (the partitions' request timeout).
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True, slots=True)
class Metrics:
    registry: CollectorRegistry
    requests: Counter
    duration: Histogram
    sli: Histogram
    inflight: Gauge
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
    multiprocess: bool = False
    _connection_counts: list[tuple[Callable[[], Mapping[str, int]], Mapping[str, int]]] = field(default_factory=list)

    def count_connections(self, open_now: Callable[[], Mapping[str, int]], accepted: Mapping[str, int]) -> None:
        """Read the listener's connection counts per protocol at each `refresh`."""
        self._connection_counts.append((open_now, accepted))

    def refresh(self, caches: Sequence[Any]) -> None:
        """Copy the figures read from the process (connections, caches) into the gauges."""
        for open_now, accepted in self._connection_counts:
            counts = open_now()
            for protocol in ("h2", "http/1.1"):
                self.connections.labels(protocol).set(counts.get(protocol, 0))
                self.connections_accepted.labels(protocol).set(accepted.get(protocol, 0))
        self.observe_caches(caches)

    def exposition(self, caches: Sequence[Any]) -> bytes:
        """The Prometheus text of this process, or of every worker in multiprocess mode."""
        self.refresh(caches)
        if not self.multiprocess:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)

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
    def create(cls) -> Metrics:
        """The proxy's metrics; in multiprocess mode when PROMETHEUS_MULTIPROC_DIR is set (a
        worker of `serve --workers N`)."""
        registry = CollectorRegistry(auto_describe=True)
        multiprocess = bool(os.environ.get(MULTIPROC_DIR_ENV))
        return cls(
            multiprocess=multiprocess,
            registry=registry,
            requests=Counter(
                "partition_proxy_requests",
                "Requests answered by the proxy.",
                ("verb", "route", "partition", "code"),
                registry=registry,
            ),
            duration=Histogram(
                "partition_proxy_request_duration_seconds",
                "Time from request to the end of the answer, in seconds.",
                ("verb", "route"),
                buckets=_BUCKETS,
                registry=registry,
            ),
            sli=Histogram(
                "apiserver_request_sli_duration_seconds",
                "Response latency distribution in seconds for each verb, group, version, resource, subresource, "
                "scope and component (kube-apiserver's SLI histogram, measured at the proxy).",
                SLI_LABELS,
                buckets=SLI_BUCKETS,
                registry=registry,
            ),
            inflight=Gauge(
                "partition_proxy_inflight_requests",
                "Requests being served now.",
                ("kind",),
                multiprocess_mode="livesum", registry=registry,
            ),
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
            cache_objects=Gauge("partition_proxy_watch_cache_objects", "Objects in a watch cache.", ("cache",), multiprocess_mode="max", registry=registry),
            cache_bytes=Gauge(
                "partition_proxy_watch_cache_bytes", "Compact JSON bytes held by a watch cache.", ("cache",), multiprocess_mode="livesum", registry=registry
            ),
            cache_watchers=Gauge(
                "partition_proxy_watch_cache_watchers", "Client watches served by a watch cache.", ("cache",), multiprocess_mode="livesum", registry=registry
            ),
            cache_relists=Gauge(
                "partition_proxy_watch_cache_relists",
                "Relists after 410 Expired, per partition.",
                ("cache", "partition"),
                multiprocess_mode="livesum", registry=registry,
            ),
            connections=Gauge(
                "partition_proxy_connections",
                "Client connections open now, per protocol negotiated by ALPN (h2, http/1.1).",
                ("protocol",),
                multiprocess_mode="livesum", registry=registry,
            ),
            connections_accepted=Gauge(
                "partition_proxy_connections_accepted",
                "Client connections accepted since start, per protocol (a count that only grows).",
                ("protocol",),
                multiprocess_mode="livesum", registry=registry,
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
                ("version",),
                multiprocess_mode="livesum", registry=registry,
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
                ("partition", "resource"),
                multiprocess_mode="max", registry=registry,
            ),
            cache_resource_version=Gauge(
                "partition_proxy_watch_cache_resource_version",
                "Native resourceVersion a watch cache has reached, per partition.",
                ("cache", "partition"),
                multiprocess_mode="max", registry=registry,
            ),
        )
