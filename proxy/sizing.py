"""The sizing model behind `partition-proxy size`: replicas, cores, memory, watches and
connections of a proxy tier for a federation. Pure: no I/O (the CLI prints `estimate`'s answer).

    Federation(nodes, pods, tenant_partitions, resource_partitions, kubelets_per_replica,
               pods_started_per_second, workers)
    estimate(federation) -> Estimate        what the tier needs; every figure a plain number
    Estimate.as_dict()                      for JSON (`partition-proxy size -o json`)

Every coefficient is a figure of a named benchmark run committed in `bench/results/` (below, each
with its file and field); `tests/proxy/test_sizing.py` reads those files and fails when a
coefficient no longer matches the run it names, and checks the model against the measured
points it was not fitted on (docs/sizing.md, "The model"). The model is linear in what it counts:

- memory per replica = workers x (base + a control plane's clients + nodes x per-node + pods x
  per-pod) + kubelets of the replica x per-kubelet, + the supervisor with more than one worker:
  each worker process holds its own copy of every
  cache (nodes, their Leases when a node-leases cache is configured, pods; protobuf twins
  included), the kubelets' own state (their connections, cache watchers, identities) is held
  once, by the worker serving each;
- CPU per replica (cores) = its kubelets x CPU per kubelet-second (Lease renewals, status
  patches, their watches' events) + each worker serving kubelets x a fixed part (the two read
  from a fleet ladder: a kubelet costs less in a larger fleet) + its share of pod starts x CPU
  per pod started + the caches' events of every other node: each worker of each replica keeps
  its own nodes cache (and its protobuf twin), so every node's status update anywhere in the
  federation is a watch event in every worker, and so is every Lease renewal when a
  node-leases cache is configured (it is not by default: config.models.default_caches)
  (`cache_event_cores`; the events of a replica's own kubelets in the worker serving them are
  in `kubelet_cores` already);
- replicas = ceil(nodes / kubelets per replica), at least 2 (one may roll);
- upstream watches per partition = replicas x workers x the default caches over it (twins
  included): independent of the number of kubelets;
- upstream connections per partition <= those watches + replicas x workers x the idle pool
  of the partition transport (`MAX_IDLE_PER_ENDPOINT`).

Limits it reports rather than models: more than `MAX_PARTITIONS_PER_RV_SPACE` partitions of one
role (one resourceVersion space: docs/resource-versions.md, "Bits per field"), and a replica
whose CPU exceeds its workers' cores (raise workers or lower kubelets per replica).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from config.models import SYSTEM_CACHE_ROLE, PartitionRole, default_caches
from routing import protobuf_items

MIB = 1024 * 1024

# -- coefficients (each from a committed benchmark run; tests/proxy/test_sizing.py checks them) --

# bytes; an idle proxy worker with empty caches: bench/results/cache_memory.json
# result.proxy_all.rss_before_mib (91.28 MiB).
BASE_BYTES = 95_714_017
# bytes; what serving a control plane adds (2 kube-schedulers, 4 kube-controller-managers, kwok:
# their ~170 watches and informers' lists): bench/results/density.json steps[0].proxy.
# proxy_rss_mib.before_nodes (102.48 MiB) less BASE_BYTES.
CONTROL_PLANE_BYTES = 11_744_051
# bytes per node: its Node in the nodes cache and its protobuf twin, each at its steady growth:
# bench/results/cache_memory.json result.proxy_all.rss_growth_per_object_bytes
# + proxy_all_protobuf_twin.rss_growth_per_object_bytes.
NODE_BYTES = 6_921  # 3,940 + 2,981
# bytes per node more with a node-leases cache (no twin): its Lease, the same file,
# result.proxy_leases.rss_growth_per_object_bytes.
LEASE_BYTES = 1_271
# bytes per pod: the pod in the JSON cache and its protobuf twin, steady:
# bench/results/cache_memory-pods.json result.pods.rss_growth_per_pod_json_and_twin_bytes.
POD_BYTES = 9_524
# bytes per kubelet served (its connection, its five cache watchers, its identity):
# bench/results/fleet-ladder-8aa2ea9.json (`bench.fleet --kubelets 500,1000,1500,2000,2500
# --sides proxy --no-storm --duration 60`, one worker, the default caches), every step pooled: the
# steps' RSS growth (rss_growth_bytes) over their kubelets. Pooled, not one step's: a step's
# figure moves by up to 15 % from run to run. The same command's other ladder of that day
# (fleet-ladder-8aa2ea9-b.json) is what the figures are validated on (docs/sizing.md).
KUBELET_BYTES = 86_484
# CPU of the kubelets a worker serves (a Lease renewal every 10 s, a status patch every 60 s, the
# events of their watches), net of the idle proxy: k kubelets on one worker cost
# k x KUBELET_CPU_US_PER_S + WORKER_FLEET_CPU_US_PER_S microseconds per second. A least-squares
# line through the same five steps' cpu_us_per_kubelet_s against 1 / kubelets (it reads each
# step within 7 %): a kubelet costs less in a larger fleet (129 us at 500, 87 at 2,500: more work
# per loop turn), so a constant under-predicts a worker of few kubelets (two workers sharing a
# fleet: -20 % with the pooled 99.1 us) and over-predicts a large one. The fixed part is the fit's,
# not a mechanism measured apart; past 2,500 kubelets per worker the line is extrapolated.
KUBELET_CPU_US_PER_S = 83.75
WORKER_FLEET_CPU_US_PER_S = 24_229  # 0.024 cores per worker serving any kubelets
# bytes; the supervisor of `serve --workers N` above 1 (proxy.workers: it starts and replaces the
# workers and imports no proxy): bench/results/fleet-ladder-2workers-0eaeb08.json, the
# 1,000-kubelet step, rss_by_process_mib[0] at the end of its steady window.
SUPERVISOR_BYTES = 42_467_328
# CPU seconds of the proxy per pod started (its create, the scheduler's watch and binding, the
# kubelet's watch and status patches, kwok's and the controllers' traffic): bench/results/
# density.json and density-5000.json steps[0] (1,000 and 5,000 kwok nodes, 2,000 pods each, every
# Lease renewed on its cadence): proxy.cpu_during_pods.proxy.cpu_s = nodes x window x
# KWOK_NODE_CPU_US_PER_S + pods x POD_START_CPU_S, solved for both from the two runs.
POD_START_CPU_S = 0.008505
# CPU microseconds per kwok node-second (its Lease renewed every 10 s by kwok over a few shared
# connections, no watch of its own: cheaper than a kubelet), from the same two runs.
KWOK_NODE_CPU_US_PER_S = 58.95

# CPU microseconds, in one worker with a node-leases cache, per node Lease renewal made anywhere
# in the federation: the renewal is a watch event in that cache (its reflector reads, decodes
# and records it, and writes its event bytes), whichever replica forwarded it or none:
# bench/results/routed_requests-twins-e0038e0.json, case renew-lease,
# proxy_while_direct.cpu_per_direct_request_ms (0.074 ms: the renewals went straight to the
# partition, the proxy only watched them) less the idle proxy's share in case get (0.003 ms).
# node-leases has no protobuf twin (config.models.default_caches); with one it was 161 us
# (routed_requests-twins-059dd43.json, before the event path's fixes of 742475c and e0038e0).
LEASE_EVENT_CPU_US = 71.0
# CPU microseconds, in one worker, per node status update: an event in the nodes cache and its
# twin. routed_requests has no node operation; its pod status PATCH is the stand-in (a pod and a
# node are both a few KiB, both cached with a twin): the same file, case patch-status,
# 0.292 - 0.003 ms.
STATUS_EVENT_CPU_US = 289.0
# seconds between a kubelet's Lease renewals (kubelet: nodeLeaseDurationSeconds 40 x 0.25) and
# between its node status updates as bench/fleet.py makes them (--status-interval 60: a kubelet
# 1.36 writes its status when it changed or every nodeStatusReportFrequency, 5 min; 60 s is the
# busier fleet this model was fitted on).
LEASE_RENEW_PERIOD_S = 10.0
NODE_STATUS_PERIOD_S = 60.0
# cores of one worker spent on other nodes' events above which `estimate` warns: the worker
# then has less than half a core for its own clients (a share chosen, not measured).
CACHE_EVENT_CORES_WARNING = 0.5

# -- limits ---------------------------------------------------------------------------------

# partitions of one role (one RV space) beyond which epochs roll over in seconds at 5,000
# writes/s: docs/resource-versions.md, "Bits per field and how long an epoch lasts".
MAX_PARTITIONS_PER_RV_SPACE = 6
MIN_REPLICAS = 2  # one replica may be rolling or restarting while the others serve
# idle keep-alive connections a worker keeps per partition: the partition transport's pool
# (proxy.clients.transport.MAX_IDLE_PER_ENDPOINT; equal, tests/proxy/test_sizing.py)
MAX_IDLE_PER_ENDPOINT = 64


def _cache_watches(role: str) -> int:
    """Upstream watches a worker keeps on each partition of `role` for the default caches
    (config.models.default_caches): one per cache, one more for its protobuf twin once a
    protobuf-first client (every kubelet) asked for it."""
    return sum(1 + int(spec.protobuf and protobuf_items.readable(spec.group, spec.resource))
               for spec in default_caches() if spec.role == role)


CACHE_WATCHES_RESOURCE_PARTITION = _cache_watches(PartitionRole.RESOURCE)  # nodes and its twin: 2 (+1 for node-leases)
CACHE_WATCHES_TENANT_PARTITION = _cache_watches(PartitionRole.TENANT)  # pods and its twin, services: 3
CACHE_WATCHES_SYSTEM_PARTITION_EXTRA = _cache_watches(SYSTEM_CACHE_ROLE)  # csidrivers, runtimeclasses, twins: 4


@dataclass(frozen=True)
class Federation:
    """What a federation holds and how its proxy tier is run. `pods_started_per_second` is the
    pod churn the tier must carry (pods created and run per second, federation-wide).
    `node_leases_cache`: the proxy's `caches` add a node-leases cache (not a default:
    config.models.default_caches)."""

    nodes: int
    pods: int
    tenant_partitions: int
    resource_partitions: int
    kubelets_per_replica: int = 5000
    pods_started_per_second: float = 20.0
    workers: int = 1
    node_leases_cache: bool = False


@dataclass(frozen=True)
class Estimate:
    """The proxy tier for a `Federation`: per replica, and per partition."""

    replicas: int
    kubelets_per_replica: int
    memory_per_replica_mib: float
    cores_per_replica: float
    cache_event_cores_per_worker: float  # of cores_per_replica: other nodes' status (and Lease) events
    upstream_watches_per_tenant_partition: int
    upstream_watches_per_resource_partition: int
    upstream_watches_system_partition: int
    upstream_connections_per_partition_max: int
    warnings: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "warnings": list(self.warnings)}


def replica_memory_bytes(nodes: int, pods: int, kubelets: int, workers: int = 1, *, control_plane: bool = True,
                         node_leases_cache: bool = False) -> float:
    """Bytes of RSS of one replica holding every node (and, with `node_leases_cache`, its Lease)
    and pod in its caches and serving `kubelets` kubelets and, unless `control_plane` is false,
    a control plane's schedulers and controllers (counted in every replica: any may serve them)."""
    base = BASE_BYTES + (CONTROL_PLANE_BYTES if control_plane else 0)
    per_node = NODE_BYTES + (LEASE_BYTES if node_leases_cache else 0)
    supervisor = SUPERVISOR_BYTES if workers > 1 else 0
    return supervisor + workers * (base + nodes * per_node + pods * POD_BYTES) + kubelets * KUBELET_BYTES


def cache_event_cores(nodes: int, kubelets: int, workers: int = 1, *, node_leases_cache: bool = False) -> float:
    """Cores one replica of `workers` workers serving `kubelets` kubelets spends on the watch
    events of the other node status updates (and, with `node_leases_cache`, Lease renewals) of a
    federation of `nodes` nodes (every worker caches every node; the worker serving a kubelet
    pays its events inside kubelet_cores)."""
    per_node_second = STATUS_EVENT_CPU_US / NODE_STATUS_PERIOD_S
    if node_leases_cache:
        per_node_second += LEASE_EVENT_CPU_US / LEASE_RENEW_PERIOD_S
    return max(0, workers * nodes - kubelets) * per_node_second / 1e6


def kubelet_cores(kubelets: int, workers: int = 1) -> float:
    """Cores `workers` workers use serving `kubelets` kubelets between them (each worker an equal
    share): their Lease renewals, status patches and watch events, net of the idle proxy."""
    serving = min(workers, kubelets)
    return (kubelets * KUBELET_CPU_US_PER_S + serving * WORKER_FLEET_CPU_US_PER_S) / 1e6


def replica_cores(kubelets: int, pods_started_per_second: float, *, nodes: int = 0, workers: int = 1,
                  node_leases_cache: bool = False) -> float:
    """Cores one replica uses for `kubelets` kubelets, its share of pod starts and, in a
    federation of `nodes` nodes (0: only its own kubelets' nodes), the other nodes' events."""
    return (kubelet_cores(kubelets, workers) + pods_started_per_second * POD_START_CPU_S
            + cache_event_cores(max(nodes, kubelets), kubelets, workers, node_leases_cache=node_leases_cache))


def estimate(f: Federation) -> Estimate:
    """The tier `f` needs. Raises ValueError for counts below 1 (partitions, kubelets per
    replica, workers) or negative counts."""
    if min(f.tenant_partitions, f.resource_partitions, f.kubelets_per_replica, f.workers) < 1 or min(f.nodes, f.pods) < 0:
        raise ValueError("partitions, kubelets per replica and workers must be at least 1; nodes and pods not negative")
    replicas = max(MIN_REPLICAS, math.ceil(f.nodes / f.kubelets_per_replica))
    kubelets = math.ceil(f.nodes / replicas)
    leases = f.node_leases_cache
    cores = replica_cores(kubelets, f.pods_started_per_second / replicas, nodes=f.nodes, workers=f.workers,
                          node_leases_cache=leases)
    events_per_worker = cache_event_cores(f.nodes, kubelets, f.workers, node_leases_cache=leases) / f.workers
    per_worker = replicas * f.workers
    warnings = []
    for role, count in (("tenant", f.tenant_partitions), ("resource", f.resource_partitions)):
        if count > MAX_PARTITIONS_PER_RV_SPACE:
            warnings.append(f"{count} {role} partitions in one resourceVersion space: more than "
                            f"{MAX_PARTITIONS_PER_RV_SPACE} roll epochs over in seconds at 5,000 writes/s "
                            f"(docs/resource-versions.md); split them into groups the proxy does not offer yet")
    if events_per_worker > CACHE_EVENT_CORES_WARNING:
        advice = ("drop the node-leases cache from `caches` unless clients watch Leases through the proxy" if leases
                  else "lower how often nodes report their status (nodeStatusReportFrequency)")
        warnings.append(f"{events_per_worker:.2f} cores of each worker go to other nodes' "
                        f"{'Lease renewals and status updates' if leases else 'status updates'} "
                        f"(every worker caches every node; more workers or replicas do not lower it): {advice} "
                        f"(docs/sizing.md, \"Every node's events in every worker\")")
    if cores > 0.8 * f.workers:
        warnings.append(f"{cores:.2f} cores per replica for {f.workers} worker(s) of one core each: "
                        f"raise workers or lower kubelets per replica")
    watches_tp = per_worker * CACHE_WATCHES_TENANT_PARTITION
    return Estimate(
        replicas=replicas,
        kubelets_per_replica=kubelets,
        memory_per_replica_mib=round(replica_memory_bytes(f.nodes, f.pods, kubelets, f.workers, node_leases_cache=leases) / MIB, 1),
        cores_per_replica=round(cores, 3),
        cache_event_cores_per_worker=round(events_per_worker, 3),
        upstream_watches_per_tenant_partition=watches_tp,
        upstream_watches_per_resource_partition=per_worker * (CACHE_WATCHES_RESOURCE_PARTITION + int(leases)),
        upstream_watches_system_partition=watches_tp + per_worker * CACHE_WATCHES_SYSTEM_PARTITION_EXTRA,
        upstream_connections_per_partition_max=per_worker * (CACHE_WATCHES_TENANT_PARTITION + CACHE_WATCHES_SYSTEM_PARTITION_EXTRA
                                                             + MAX_IDLE_PER_ENDPOINT),
        warnings=tuple(warnings),
    )
