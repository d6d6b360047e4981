"""Memory per cached object: the proxy's watch cache of nodes vs the peer kube-apiserver.

Two proxies in front of tp1/rp1/rp2, both started before any node exists:
- "all": a nodes cache without selector;
- "selected": a nodes cache with `label_selector: bench-keep=yes`, carried by 1 node in 10.
Then N nodes (default 20,000 hollow) are created: N/2 on rp1, N/2 on rp2, all N on the peer rp3.

Reported, after the caches hold their objects and ~3 s of settling:
- per proxy: RSS growth (after - before), growth / cached objects, growth / cached compact JSON
  bytes (`bytes` of /debug/caches), and VmHWM (peak RSS);
- the peer's kube-apiserver (rp3): RSS growth for the same N nodes, per object, and its Go heap
  in use (`go_memstats_heap_inuse_bytes` of its /metrics) before/after;
- the "all" proxy's protobuf twin of its nodes cache, filled by one protobuf-first LIST as a
  fleet's first kubelet fills it: RSS growth over the JSON cache alone, per object and per
  cached protobuf byte;
- a "leases" proxy with the node Leases cache (the proxy's default second cache), started with
  the others: RSS growth for one kubelet Lease per node (N/2 on rp1, N/2 on rp2), then for its
  protobuf twin; the peer's growth for the same N Leases;
- a third proxy ("all, started after"), started once the nodes exist, so its cache fills from
  one LIST per partition instead of watch events: its RSS and peak, growth vs the baseline of
  the "all" proxy before nodes existed;
- a "pods" proxy with a cache of all pods over the tenant partitions (the proxy's default pods
  cache), started with the others: N pods (default 20,000) shaped as a Deployment's pods after a
  kubelet ran them (`deployment_pod`), created straight on tp1 in namespaces of 1,000 (tenant
  `acme`: tp1), each bound to one of ~N/30 node names and given a Running status through the
  status subresource (a create resets a pod's status). RSS growth per pod of the JSON cache, then
  of its protobuf twin; a proxy started once the pods exist (one LIST); the peer is tp1's own
  kube-apiserver, which holds the same N pods (RSS and Go heap in use, per pod).

Run: `python -m bench.cache_memory [--nodes 20000] [--kind hollow|real] [--pods 20000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import time
import uuid
from typing import Any

import aiohttp
import orjson

from bench.common import (
    BUILDERS,
    CREATE_CONCURRENCY,
    NODE_LEASES,
    PEER,
    Setup,
    close_sessions,
    compact_size,
    get_json,
    post_objects,
    emit,
    fill_protobuf_twin,
    host_info,
    hwm_bytes,
    install_sigterm,
    log,
    mib,
    node_lease,
    node_leases_cache,
    node_names,
    nodes_cache,
    ratio,
    rss_bytes,
)
from hack.proxy_process import ProxyProcess

NAME = "cache_memory"
LEASES = "node-leases"  # the name of node_leases_cache()
SELECTOR = "bench-keep=yes"
TENANT = "tp1"  # the bench Setup's one tenant partition: the pods and their peer
PODS = "pods"  # the cache name of pods_cache(), as the proxy's default pods cache
PODS_PROXY = "proxy-pods"  # directory (and log name) of the proxy holding the pods cache
# pods per namespace: 20 namespaces at the default 20,000 pods, so no one namespace holds them
# all (a tenant's namespace LIST stays 1,000 pods)
PODS_PER_NAMESPACE = 1000
# pods per node name: spec.nodeName over ~N/30 nodes, a busy node well under the kubelet's
# default 110 max-pods; the proxy's spec.nodeName index has N/30 keys
PODS_PER_NODE = 30
# pods per Deployment (one ReplicaSet: the same labels, owner and pod-template-hash)
PODS_PER_DEPLOYMENT = 10
# namespace prefix: tenant "acme" (text before "-", hack/proxy_process.py's prefix mapping) is in
# the a..m range, which is tp1's (with one tenant partition, a..z is)
POD_NAMESPACE_PREFIX = "acme-pods-"
# the kubelet's pod conditions of a Running pod, in the order it writes them
POD_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
POD_TIME = "2026-11-24T11:00:00Z"  # every timestamp of the pods (a fixed instant: same bytes each run)
SAFE = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's rand.SafeEncodeString alphabet (template hash, name suffix)
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"  # where the ServiceAccount admission mounts the token


def keeps(name: str, every: int) -> bool:
    """Whether node `name` (…-<index>) carries bench-keep=yes: one in `every`."""
    return int(name.rsplit("-", 1)[1]) % every == 0


async def heap_inuse(session: aiohttp.ClientSession, server: str) -> int | None:
    """go_memstats_heap_inuse_bytes of a kube-apiserver (None if not exposed)."""
    async with session.get(f"{server}/metrics") as resp:
        text = await resp.text()
    for line in text.splitlines():
        if line.startswith("go_memstats_heap_inuse_bytes "):
            return int(float(line.split()[1]))
    return None


def cache_figures(entry: dict[str, Any], growth: int, hwm: int) -> dict[str, Any]:
    """A cache's figures from its /debug/caches `entry` and the proxy's RSS `growth` (bytes)
    while it filled: objects, cached bytes, RSS growth in all, per object and per cached byte,
    and the proxy's peak RSS (`hwm` bytes)."""
    objects, cache_bytes = entry["objects"], entry["bytes"]
    return {
        "objects": objects,
        "cache_bytes": cache_bytes,
        "cache_bytes_per_object": round(cache_bytes / max(objects, 1)),
        "rss_growth_mib": mib(growth),
        "rss_growth_per_object_bytes": round(growth / max(objects, 1)),
        "rss_growth_per_cache_byte": round(growth / max(cache_bytes, 1), 3),
        "rss_peak_hwm_mib": mib(hwm),
    }


def apiserver_growth(partition: str, objects: int, rss: tuple[int, int], heap: tuple[int | None, int | None]) -> dict[str, Any]:
    """A kube-apiserver's figures for `objects` new objects: its RSS (bytes) and Go heap in use
    (bytes, None if not exposed) before and after, in all and per object."""
    (before, after), (heap_before, heap_after) = rss, heap
    growth = after - before
    return {
        "partition": partition,
        "objects": objects,
        "rss_before_mib": mib(before),
        "rss_after_mib": mib(after),
        "rss_growth_mib": mib(growth),
        "rss_growth_per_object_bytes": round(growth / objects),
        "go_heap_inuse_before_mib": mib(heap_before) if heap_before is not None else None,
        "go_heap_inuse_after_mib": mib(heap_after) if heap_after is not None else None,
        "go_heap_inuse_growth_per_object_bytes": round((heap_after - heap_before) / objects)
        if heap_before is not None and heap_after is not None
        else None,
    }


async def measure(setup: Setup, args: argparse.Namespace) -> dict[str, Any]:
    every = args.selected_every
    base = BUILDERS[args.kind]

    def builder(name: str) -> dict[str, Any]:
        return base(name, {"bench-keep": "yes"} if keeps(name, every) else None)

    sessions = setup.sessions()
    try:
        proxies = {"all": setup.proxies[0], "selected": setup.proxies[1]}
        pids = {k: setup.pid(p) for k, p in proxies.items()}
        peer_pid = setup.apiserver_pid(PEER)
        for p in proxies.values():
            await setup.wait_cached(sessions["proxy"], 0, proxy=p)
        await asyncio.sleep(args.settle)
        before = {k: rss_bytes(pid) for k, pid in pids.items()}
        peer_before, heap_before = rss_bytes(peer_pid), await heap_inuse(sessions[PEER], setup.server(PEER))
        log(f"before: proxies {({k: mib(v) for k, v in before.items()})} MiB, {PEER} {mib(peer_before)} MiB")

        took = await setup.populate(sessions, args.kind, 0, args.nodes, builder=builder)
        selected = sum(1 for i in range(args.nodes) if i % every == 0)
        caches = {
            "all": await setup.wait_cached(sessions["proxy"], args.nodes, proxy=proxies["all"]),
            "selected": await setup.wait_cached(sessions["proxy"], selected, proxy=proxies["selected"]),
        }
        await asyncio.sleep(args.settle)
        after = {k: rss_bytes(pid) for k, pid in pids.items()}
        peer_after, heap_after = rss_bytes(peer_pid), await heap_inuse(sessions[PEER], setup.server(PEER))
        log(f"after: proxies {({k: mib(v) for k, v in after.items()})} MiB, {PEER} {mib(peer_after)} MiB")

        out: dict[str, Any] = {"nodes": args.nodes, "node_kind": args.kind, "create_seconds": round(took, 1)}
        for k in proxies:
            out[f"proxy_{k}"] = {
                "label_selector": caches[k]["labelSelector"],
                "rss_before_mib": mib(before[k]),
                "rss_after_mib": mib(after[k]),
                **cache_figures(caches[k], after[k] - before[k], hwm_bytes(pids[k])),
            }
        out["direct_apiserver"] = apiserver_growth(PEER, args.nodes, (peer_before, peer_after), (heap_before, heap_after))
        out["ratio_rss_growth_per_object_proxy_all_over_direct"] = ratio(
            out["proxy_all"]["rss_growth_per_object_bytes"], out["direct_apiserver"]["rss_growth_per_object_bytes"]
        )
        out["ratio_rss_growth_selected_over_all"] = ratio(out["proxy_selected"]["rss_growth_mib"], out["proxy_all"]["rss_growth_mib"])

        # The "all" proxy's protobuf twin, filled as a fleet's first kubelet fills it (one
        # protobuf-first LIST): a second copy of every Node, enveloped protobuf.
        filled_s = await fill_protobuf_twin(sessions["proxy"], proxies["all"].server)
        twin = await setup.wait_cached(sessions["proxy"], args.nodes, proxy=proxies["all"], name="nodes-protobuf")
        await asyncio.sleep(args.settle)
        with_twin = rss_bytes(pids["all"])
        out["proxy_all_protobuf_twin"] = {
            "fill_seconds": round(filled_s, 1),
            "rss_after_mib": mib(with_twin),
            **cache_figures(twin, with_twin - after["all"], hwm_bytes(pids["all"])),
        }
        log(f"protobuf twin: {out['proxy_all_protobuf_twin']}")

        # A proxy started once the nodes exist: its cache fills from one LIST per partition.
        late = setup.start_proxy("proxy-late", caches=nodes_cache())
        late_cache = await setup.wait_cached(sessions["proxy"], args.nodes, proxy=late)
        await asyncio.sleep(args.settle)
        late_rss = rss_bytes(setup.pid(late))
        out["proxy_all_started_after"] = {
            "objects": late_cache["objects"],
            "rss_mib": mib(late_rss),
            "rss_peak_hwm_mib": mib(hwm_bytes(setup.pid(late))),
            "rss_growth_vs_empty_baseline_mib": mib(late_rss - before["all"]),
            "rss_growth_per_object_bytes": round((late_rss - before["all"]) / args.nodes),
        }
        log(f"late proxy: {out['proxy_all_started_after']}")
        late.stop()
        out["proxy_leases"] = await measure_leases(setup, sessions, args)
        if args.pods:
            out["pods"] = await measure_pods(setup, sessions, args)
        return out
    finally:
        await close_sessions(sessions)


async def measure_leases(setup: Setup, sessions: dict[str, aiohttp.ClientSession], args: argparse.Namespace) -> dict[str, Any]:
    """The node Leases cache of the "leases" proxy (started with the others, before any Lease
    exists): RSS growth for one kubelet Lease per node (N/2 on rp1, N/2 on rp2, all N on the
    peer), then for its protobuf twin."""
    proxy = setup.proxies[2]
    pid, peer_pid = setup.pid(proxy), setup.apiserver_pid(PEER)
    await setup.wait_cached(sessions["proxy"], 0, proxy=proxy, name=LEASES)
    await asyncio.sleep(args.settle)
    before, peer_before = rss_bytes(pid), rss_bytes(peer_pid)
    names = node_names(args.kind, 0, args.nodes)
    deadline = time.monotonic() + 900
    await asyncio.gather(*(
        post_objects(sessions[p], setup.server(p), [n for n in names if p == PEER or n.startswith(f"{p}-")], node_lease,
                     deadline=deadline, path=NODE_LEASES)
        for p in ("rp1", "rp2", PEER)))
    cache = await setup.wait_cached(sessions["proxy"], args.nodes, proxy=proxy, name=LEASES)
    await asyncio.sleep(args.settle)
    after, peer_after, hwm = rss_bytes(pid), rss_bytes(peer_pid), hwm_bytes(pid)
    filled_s = await fill_protobuf_twin(sessions["proxy"], proxy.server, path=NODE_LEASES)
    twin = await setup.wait_cached(sessions["proxy"], args.nodes, proxy=proxy, name=f"{LEASES}-protobuf")
    await asyncio.sleep(args.settle)
    with_twin = rss_bytes(pid)
    out = {
        **cache_figures(cache, after - before, hwm),
        "rss_before_mib": mib(before),
        "peer_rss_growth_per_object_bytes": round((peer_after - peer_before) / args.nodes),
        "protobuf_twin": {"fill_seconds": round(filled_s, 1), **cache_figures(twin, with_twin - after, hwm_bytes(pid))},
    }
    log(f"node leases: {out}")
    return out


# -- pods -----------------------------------------------------------------------------------


def pods_cache() -> list[dict[str, Any]]:
    """The proxy's caches config of the pods measurement: all pods over the tenant partitions
    (as the proxy's default pods cache, config/models.py `default_caches`)."""
    return [{"name": PODS, "resource": "pods", "role": "tenant"}]


def _digest(i: int, salt: str) -> str:
    return hashlib.sha256(f"{salt}:{i}".encode()).hexdigest()


def _safe(i: int, salt: str, n: int) -> str:
    """`n` characters of SAFE, fixed by (i, salt): a pod-template-hash or a name suffix."""
    return "".join(SAFE[b % len(SAFE)] for b in bytes.fromhex(_digest(i, salt))[:n])


def _ip(prefix: int, i: int) -> str:
    return f"{prefix}.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"


def _field_ref(path: str) -> dict[str, Any]:
    return {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}


def pod_namespaces(pods: int) -> list[str]:
    """The namespaces of `pods` pods, PODS_PER_NAMESPACE each."""
    return [f"{POD_NAMESPACE_PREFIX}{k:02d}" for k in range(math.ceil(pods / PODS_PER_NAMESPACE))]


def pod_place(i: int, pods: int) -> dict[str, Any]:
    """Where pod i of `pods` lives: namespace, Deployment (app), ReplicaSet's pod-template-hash,
    name, node (one of ~pods/30 names of the nodes benchmark) and its node's index."""
    namespace = f"{POD_NAMESPACE_PREFIX}{i // PODS_PER_NAMESPACE:02d}"
    deployment = i // PODS_PER_DEPLOYMENT
    app = f"{('web', 'api', 'worker', 'checkout', 'cache-proxy')[deployment % 5]}-{deployment:04d}"
    template_hash = _safe(deployment, "rs", 10)
    node_index = i % max(1, pods // PODS_PER_NODE)
    return {
        "namespace": namespace, "app": app, "hash": template_hash, "node_index": node_index,
        "name": f"{app}-{template_hash}-{_safe(i, 'pod', 5)}", "node": node_names("hollow", node_index, node_index + 1)[0],
        "volume": f"kube-api-access-{_safe(i, 'vol', 5)}", "index": i,
    }


def deployment_pod(place: dict[str, Any]) -> dict[str, Any]:
    """The pod a Deployment's ReplicaSet creates and the scheduler bound (as kube-apiserver then
    holds it, before defaulting): labels with pod-template-hash, the ReplicaSet as controller
    owner, one container (image, port, env of 3, requests/limits, readiness probe, the
    service-account token mount), the projected kube-api-access volume, the two NoExecute
    tolerations DefaultTolerationSeconds adds, spec.nodeName."""
    app, rs = place["app"], f"{place['app']}-{place['hash']}"
    container = {
        "name": app.rsplit("-", 1)[0], "image": f"registry.example.com/acme/{app.rsplit('-', 1)[0]}:1.{place['index'] % 9}.3",
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "POD_NAME", "valueFrom": _field_ref("metadata.name")},
                {"name": "POD_IP", "valueFrom": _field_ref("status.podIP")}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
        "volumeMounts": [{"name": place["volume"], "readOnly": True, "mountPath": SA_MOUNT}],
    }
    token_sources = [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", **_field_ref("metadata.namespace")}]}},
    ]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": place["name"], "generateName": f"{rs}-", "namespace": place["namespace"],
            "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": "acme", "pod-template-hash": place["hash"]},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "controller": True,
                                 "blockOwnerDeletion": True, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{place['namespace']}.{rs}"))}],
        },
        "spec": {
            "containers": [container], "nodeName": place["node"], "serviceAccountName": "default",
            "volumes": [{"name": place["volume"], "projected": {"defaultMode": 420, "sources": token_sources}}],
            "tolerations": [{"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                            for k in ("not-ready", "unreachable")],
        },
    }


def running_status(place: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """The status the kubelet writes once the pod's container runs: the five conditions, host
    and pod IPs, start time, one container status (image ID, container ID, resources, its mounts
    and user, as a 1.36 kubelet reports them)."""
    host_ip, pod_ip = _ip(10, place["node_index"]), _ip(100, place["index"])
    image = container["image"]
    return {
        "phase": "Running", "observedGeneration": 1,
        "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": POD_TIME, "observedGeneration": 1}
                       for t in POD_CONDITIONS],
        "hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "startTime": POD_TIME,
        "containerStatuses": [{
            "name": container["name"], "state": {"running": {"startedAt": POD_TIME}}, "lastState": {}, "ready": True,
            "restartCount": 0, "image": image, "started": True,
            "imageID": f"{image.rsplit(':', 1)[0]}@sha256:{_digest(place['index'] % 9, 'image')}",
            "containerID": f"containerd://{_digest(place['index'], 'container')}",
            "allocatedResources": container["resources"]["requests"], "resources": container["resources"],
            "volumeMounts": [{**m, "recursiveReadOnly": "Disabled"} for m in container["volumeMounts"]],
            "user": {"linux": {"uid": 0, "gid": 0, "supplementalGroups": [0]}},
        }],
    }


async def send(session: aiohttp.ClientSession, method: str, url: str, body: bytes, content_type: str, deadline: float) -> bytes:
    """One write with post_objects' rule: 200/201 is done (and a 409 to a POST: the object
    exists), 429/5xx retried up to 4 times, anything else or past `deadline` raises."""
    for attempt in range(5):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{method} {url}: past the deadline")
        async with session.request(method, url, data=body, headers={"Content-Type": content_type}) as resp:
            answer = await resp.read()
            if resp.status in (200, 201) or (resp.status == 409 and method == "POST"):
                return answer
            if resp.status in (429, 500, 503, 504) and attempt < 4:
                await asyncio.sleep(0.2 * (attempt + 1))
                continue
            raise RuntimeError(f"{method} {url}: {resp.status} {answer[:300]!r}")
    raise AssertionError("unreachable")


async def create_pods(session: aiohttp.ClientSession, server: str, pods: int, *, timeout: float = 1800) -> tuple[float, int]:
    """Create `pods` pods on `server` (their namespaces first), each POSTed and then given its
    Running status by a merge patch of /status, with CREATE_CONCURRENCY pods in flight. Returns
    the seconds it took and the highest resourceVersion the status patches answered."""
    deadline, t0 = time.monotonic() + timeout, time.monotonic()
    await post_objects(session, server, pod_namespaces(pods), lambda ns: {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                       deadline=deadline, path="/api/v1/namespaces")
    it, last_rv = iter(range(pods)), 0

    async def worker() -> None:
        nonlocal last_rv
        for i in it:
            place = pod_place(i, pods)
            pod = deployment_pod(place)
            url = f"{server}/api/v1/namespaces/{place['namespace']}/pods"
            await send(session, "POST", url, orjson.dumps(pod), "application/json", deadline)
            patch = orjson.dumps({"status": running_status(place, pod["spec"]["containers"][0])})
            answer = await send(session, "PATCH", f"{url}/{place['name']}/status", patch, "application/merge-patch+json", deadline)
            last_rv = max(last_rv, int(orjson.loads(answer)["metadata"]["resourceVersion"]))

    await asyncio.gather(*(worker() for _ in range(CREATE_CONCURRENCY)))
    took = time.monotonic() - t0
    log(f"created {pods} pods on {server} in {took:.1f} s ({2 * pods / max(took, 1e-9):.0f} writes/s), last RV {last_rv}")
    return took, last_rv


async def wait_caught_up(session: aiohttp.ClientSession, proxy: ProxyProcess, name: str, partition: str, rv: int,
                         timeout: float = 300) -> None:
    """Poll /debug/caches until cache `name` has reached native RV `rv` of `partition`: every
    write up to it (the last status patch) is in."""
    deadline = time.monotonic() + timeout
    while True:
        doc = await get_json(session, f"{proxy.server}/debug/caches")
        entry = next(c for c in doc["caches"] if c["name"] == name)
        if int(entry["partitions"][partition]["resourceVersion"]) >= rv:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"cache {name} of {proxy.server} did not reach {partition} RV {rv}: {entry['partitions']}")
        await asyncio.sleep(0.5)


async def measure_pods(setup: Setup, sessions: dict[str, aiohttp.ClientSession], args: argparse.Namespace) -> dict[str, Any]:
    """The pods cache of the "pods" proxy (started with the others, before any pod exists): RSS
    growth for N pods created on tp1, then for its protobuf twin and in a proxy started after;
    the peer is tp1's kube-apiserver, which holds the same N pods."""
    proxy = next(p for p in setup.proxies if p.directory.name == PODS_PROXY)
    pid, peer_pid, n = setup.pid(proxy), setup.apiserver_pid(TENANT), args.pods
    await setup.wait_cached(sessions["proxy"], 0, proxy=proxy, name=PODS)
    await asyncio.sleep(args.settle)
    before, peer_before = rss_bytes(pid), rss_bytes(peer_pid)
    heap_before = await heap_inuse(sessions[TENANT], setup.server(TENANT))
    log(f"pods: before: proxy {mib(before)} MiB, {TENANT} {mib(peer_before)} MiB")
    took, last_rv = await create_pods(sessions[TENANT], setup.server(TENANT), n)
    cache = await setup.wait_cached(sessions["proxy"], n, proxy=proxy, name=PODS)
    await wait_caught_up(sessions["proxy"], proxy, PODS, TENANT, last_rv)
    await asyncio.sleep(args.settle)
    cache = await setup.caches_debug(sessions["proxy"], proxy, PODS)
    after, peer_after, hwm = rss_bytes(pid), rss_bytes(peer_pid), hwm_bytes(pid)
    heap_after = await heap_inuse(sessions[TENANT], setup.server(TENANT))
    log(f"pods: after: proxy {mib(after)} MiB, {TENANT} {mib(peer_after)} MiB")
    out: dict[str, Any] = {
        "description": (
            f"{n} pods of Deployments (as a kubelet left them: Running status, one container, the service-account "
            f"volume) in {len(pod_namespaces(n))} namespaces on {TENANT}, spec.nodeName over {max(1, n // PODS_PER_NODE)} "
            f"node names. proxy: the RSS growth of a proxy with one cache of all pods over the tenant partitions, "
            f"filled by watch events (per object = per pod); protobuf_twin: its growth when the cache's protobuf twin "
            f"filled (one protobuf-first LIST); proxy_started_after: a proxy started once the pods existed (one LIST); "
            f"direct_apiserver: {TENANT}'s own kube-apiserver, which holds the same pods"),
        "pods": n, "create_seconds": round(took, 1),
        "pod_sizes": await pod_sizes(setup, sessions, n),
        "proxy": {"rss_before_mib": mib(before), "rss_after_mib": mib(after), **cache_figures(cache, after - before, hwm)},
        "direct_apiserver": apiserver_growth(TENANT, n, (peer_before, peer_after), (heap_before, heap_after)),
    }
    out["ratio_rss_growth_per_object_proxy_over_direct"] = ratio(
        out["proxy"]["rss_growth_per_object_bytes"], out["direct_apiserver"]["rss_growth_per_object_bytes"])
    out.update(await pods_twin_and_late(setup, sessions, args, proxy, after, before))
    out["rss_growth_per_pod_json_and_twin_bytes"] = (
        out["proxy"]["rss_growth_per_object_bytes"] + out["protobuf_twin"]["rss_growth_per_object_bytes"])
    log(f"pods: {out}")
    return out


async def pods_twin_and_late(setup: Setup, sessions: dict[str, aiohttp.ClientSession], args: argparse.Namespace,
                             proxy: ProxyProcess, after: int, empty: int) -> dict[str, Any]:
    """The pods proxy's protobuf twin, filled by one protobuf-first LIST (`after`: its RSS with
    the JSON cache alone), and a proxy started once the pods exist: its RSS and peak over
    `empty` (the pods proxy's RSS before any pod existed)."""
    pid, n = setup.pid(proxy), args.pods
    filled_s = await fill_protobuf_twin(sessions["proxy"], proxy.server, path="/api/v1/pods")
    twin = await setup.wait_cached(sessions["proxy"], n, proxy=proxy, name=f"{PODS}-protobuf")
    await asyncio.sleep(args.settle)
    with_twin = rss_bytes(pid)
    out: dict[str, Any] = {"protobuf_twin": {
        "fill_seconds": round(filled_s, 1), "rss_after_mib": mib(with_twin),
        **cache_figures(twin, with_twin - after, hwm_bytes(pid))}}
    late = setup.start_proxy(f"{PODS_PROXY}-late", caches=pods_cache())
    try:
        late_cache = await setup.wait_cached(sessions["proxy"], n, proxy=late, name=PODS)
        await asyncio.sleep(args.settle)
        late_rss, late_hwm = rss_bytes(setup.pid(late)), hwm_bytes(setup.pid(late))
    finally:
        late.stop()
    out["proxy_started_after"] = {
        "objects": late_cache["objects"], "rss_mib": mib(late_rss), "rss_peak_hwm_mib": mib(late_hwm),
        "rss_growth_vs_empty_baseline_mib": mib(late_rss - empty),
        "rss_growth_per_object_bytes": round((late_rss - empty) / n),
        "rss_peak_growth_per_object_bytes": round((late_hwm - empty) / n),
    }
    return out


async def pod_sizes(setup: Setup, sessions: dict[str, aiohttp.ClientSession], pods: int) -> dict[str, Any]:
    """Compact JSON sizes of pod 0: as built (create body + status patch), as tp1 holds it (with
    managedFields) and without managedFields (what the proxy caches, before its RV rewrite); and
    the status fields written that tp1 did not keep (a feature gate off drops them)."""
    place = pod_place(0, pods)
    pod = deployment_pod(place)
    status = running_status(place, pod["spec"]["containers"][0])
    built = compact_size({**pod, "status": status})
    stored = await get_json(sessions[TENANT], f"{setup.server(TENANT)}/api/v1/namespaces/{place['namespace']}/pods/{place['name']}")
    with_fields = compact_size(stored)
    stored["metadata"].pop("managedFields", None)
    kept, kept_container = stored["status"], (stored["status"].get("containerStatuses") or [{}])[0]
    dropped = [k for k in status if k not in kept] + [
        f"containerStatuses.{k}" for k in status["containerStatuses"][0] if k not in kept_container]
    sizes = {"built_bytes": built, "apiserver_bytes": with_fields, "apiserver_without_managed_fields_bytes": compact_size(stored),
             "status_fields_dropped_by_apiserver": dropped}
    log(f"pod compact JSON size: {sizes}")
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=20000)
    ap.add_argument("--kind", choices=sorted(BUILDERS), default="hollow")
    ap.add_argument("--selected-every", type=int, default=10, help="one node in this many carries bench-keep=yes")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds before each RSS reading")
    ap.add_argument("--pods", type=int, default=20000, help="pods created on tp1 for the pods cache (0: no pods measurement)")
    args = ap.parse_args()
    install_sigterm()
    t0 = time.monotonic()
    out: dict[str, Any] = {
        "benchmark": NAME,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": host_info(),
        "params": vars(args),
        "peer": f"{PEER}: a kube-apiserver holding the same N nodes (its RSS growth for them)",
    }
    setup = Setup.start(NAME, caches=nodes_cache())
    try:
        setup.start_proxy("proxy-selected", caches=nodes_cache(SELECTOR))
        setup.start_proxy("proxy-leases", caches=node_leases_cache())
        if args.pods:
            setup.start_proxy(PODS_PROXY, caches=pods_cache())
        out["result"] = asyncio.run(measure(setup, args))
    finally:
        setup.stop()
    out["total_seconds"] = round(time.monotonic() - t0, 1)
    emit(NAME, out)


if __name__ == "__main__":
    main()
