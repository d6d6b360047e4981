"""Prometheus metrics of the proxy, in a registry owned by the application (no globals).

partition_proxy_requests_total{verb, route, partition, code}: requests answered; `route` is the
  route kind (forward, fan-out, reject, local), `partition` the target (a name, or `union`).
partition_proxy_request_duration_seconds{verb, route}: time to the end of the answer (seconds;
  for watches, the life of the stream).
partition_proxy_inflight_requests{kind}: requests being served now (`kind`: long-running or
  other), the concurrency signal an autoscaler can follow.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# seconds; from 5 ms (a cached answer on loopback) to 60 s (the partitions' request timeout).
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True, slots=True)
class Metrics:
    registry: CollectorRegistry
    requests: Counter
    duration: Histogram
    inflight: Gauge

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
            inflight=Gauge(
                "partition_proxy_inflight_requests",
                "Requests being served now.",
                ("kind",),
                registry=registry,
            ),
        )
