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
partition_proxy_watch_cache_{objects,bytes,watchers}{cache} and
partition_proxy_watch_cache_{relists,resource_version}{cache, partition}: per watch cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from routing.sli import SLI_BUCKETS, SLI_LABELS

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

    def count_connections(self, open_now: Callable[[], Mapping[str, int]], accepted: Mapping[str, int]) -> None:
        """Read the listener's connection counts per protocol at scrape time."""

        def reader(counts: Callable[[], Mapping[str, int]], protocol: str) -> Callable[[], float]:
            return lambda: float(counts().get(protocol, 0))

        for protocol in ("h2", "http/1.1"):
            self.connections.labels(protocol).set_function(reader(open_now, protocol))
            self.connections_accepted.labels(protocol).set_function(reader(lambda: accepted, protocol))

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
        registry = CollectorRegistry(auto_describe=True)
        return cls(
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
                registry=registry,
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
                ("cache", "partition"),
                registry=registry,
            ),
            connections=Gauge(
                "partition_proxy_connections",
                "Client connections open now, per protocol negotiated by ALPN (h2, http/1.1).",
                ("protocol",),
                registry=registry,
            ),
            connections_accepted=Gauge(
                "partition_proxy_connections_accepted",
                "Client connections accepted since start, per protocol (a count that only grows).",
                ("protocol",),
                registry=registry,
            ),
            cache_resource_version=Gauge(
                "partition_proxy_watch_cache_resource_version",
                "Native resourceVersion a watch cache has reached, per partition.",
                ("cache", "partition"),
                registry=registry,
            ),
        )
