"""A living federation (the acceptance of `make run`): real kube-scheduler and kube-controller-
manager per partition, kwok and kubemark hollow kubelets, every one a client of the proxy
(hack/controlplane.py). A federation of its own: 2 TPs x 2 RPs behind the proxy, plus rp3, which
the proxy does not front: the same components pointed straight at it make a plain single
cluster, the baseline each figure is compared with in the same run.

Figures (seconds, watch counts) go to `.local/living_federation.json` and the terminal.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from hack import controlplane as cp
from hack.controlplane import ControlPlane, DirectControlPlane, HollowNode, kwok_node
from hack.federation import REPO
from hack.procs import rss_mib
from tests.federation import Kube, require_binaries, running_federation

BASELINE = "rp3"  # a partition the proxy does not front
PROXIED = ("tp1", "tp2", "rp1", "rp2")
KWOK_NODES = ("rp1-kwok-1", "rp1-kwok-2", "rp2-kwok-1", "rp2-kwok-2")
BASELINE_KWOK_NODES = ("rp3-kwok-1", "rp3-kwok-2")
RESULTS = REPO / ".local" / "living_federation.json"
FIGURES: dict[str, Any] = {}
T = TypeVar("T")


@dataclass
class Living:
    kube: Kube
    plane: ControlPlane
    direct: DirectControlPlane
    hollow: list[HollowNode] = field(default_factory=list)
    ready_since: dict[str, str] = field(default_factory=dict)  # kwok node -> its Ready lastTransitionTime

    @property
    def baseline(self) -> Path:
        """Admin kubeconfig straight to the baseline cluster."""
        return self.kube.direct(BASELINE)

    def kubectl_json(self, *args: str, kubeconfig: Path | None = None) -> Any:
        return json.loads(self.kube.kubectl(*args, "-o", "json", kubeconfig=kubeconfig))


def wait_for(what: str, probe: Callable[[], T | None], *, timeout: float, interval: float = 1.0) -> tuple[T, float]:
    """Call `probe` until it returns something truthy; returns it and the seconds waited.
    Fails the test after `timeout` seconds, naming `what` and the last value seen."""
    start = time.monotonic()
    last: T | None = None
    while time.monotonic() - start < timeout:
        last = probe()
        if last:
            return last, time.monotonic() - start
        time.sleep(interval)
    pytest.fail(f"{what}: not within {timeout:.0f} s (last: {last!r})")


def node_ready(node: dict[str, Any]) -> str:
    """The status of a Node's Ready condition ("True", "False", "Unknown", or "" if none)."""
    return next((c["status"] for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"), "")


def ready_transition(node: dict[str, Any]) -> str:
    """lastTransitionTime of a Node's Ready condition."""
    return next(str(c["lastTransitionTime"]) for c in node["status"]["conditions"] if c["type"] == "Ready")


def running_pods(living: Living, namespace: str, *, kubeconfig: Path | None = None) -> list[dict[str, Any]]:
    items = living.kubectl_json("get", "pods", "-n", namespace, kubeconfig=kubeconfig)["items"]
    return [p for p in items if p.get("status", {}).get("phase") == "Running"]


def wait_running_pods(living: Living, namespace: str, count: int, *, kubeconfig: Path | None, timeout: float) -> list[dict[str, Any]]:
    """Wait until `namespace` has exactly `count` Running pods; returns them."""

    def probe() -> list[dict[str, Any]] | None:
        pods = running_pods(living, namespace, kubeconfig=kubeconfig)
        return pods if len(pods) == count else None

    return wait_for(f"{count} Running pods in {namespace} ({'direct' if kubeconfig else 'proxy'})", probe, timeout=timeout,
                    interval=0.2)[0]


def wait_node_ready(living: Living, name: str, status: str, *, kubeconfig: Path | None, timeout: float) -> dict[str, Any]:
    """Wait until Node `name`'s Ready condition has `status`; returns the Node."""

    def probe() -> dict[str, Any] | None:
        node: dict[str, Any] = living.kubectl_json("get", "node", name, kubeconfig=kubeconfig)
        return node if node_ready(node) == status else None

    return wait_for(f"node {name} Ready={status}", probe, timeout=timeout)[0]


def upstream_watches(kube: Kube, partition: str) -> dict[str, int]:
    """Watches open on a partition now, per resource: kube-apiserver's
    apiserver_longrunning_requests{verb="WATCH"} read straight from its /metrics."""
    ctx = kube.partition_ssl(partition)
    with urllib.request.urlopen(kube.fed.partition(partition).server + "/metrics", context=ctx, timeout=10) as r:
        text = r.read().decode()
    out: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("apiserver_longrunning_requests{") and 'verb="WATCH"' in line:
            resource = re.search(r'resource="([^"]*)"', line)
            key = resource.group(1) if resource else ""
            out[key] = out.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out


def watches_now(kube: Kube, partitions: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Per partition and resource, the median of three samples a second apart (an informer
    re-watching at the moment of a sample would count one less)."""
    samples = []
    for _ in range(3):
        samples.append({p: upstream_watches(kube, p) for p in partitions})
        time.sleep(1.0)
    return {p: {r: sorted(s[p].get(r, 0) for s in samples)[1] for r in set().union(*(s[p] for s in samples))}
            for p in partitions}


def watch_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]], partitions: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Per partition, the watches per resource that were added between the two samples."""
    out = {}
    for p in partitions:
        d = {r: after[p].get(r, 0) - before[p].get(r, 0) for r in set(after[p]) | set(before[p])}
        out[p] = {r: n for r, n in sorted(d.items()) if n}
    return out


def record(key: str, value: Any) -> None:
    FIGURES[key] = value
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(FIGURES, indent=2, sort_keys=True) + "\n")
    print(f"\nliving federation: {key} = {value}")


@pytest.fixture(scope="module")
def living(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Living]:
    require_binaries("kube-apiserver", "etcd", *cp.BINARIES)
    root = tmp_path_factory.mktemp("living")
    with running_federation(root, tenant_partitions=2, resource_partitions=3, proxied=PROXIED) as kube:
        started = time.monotonic()
        with ControlPlane(kube.fed, kube.proxy) as plane, DirectControlPlane(kube.fed, BASELINE) as direct:
            record("control_plane_start_seconds", round(time.monotonic() - started, 1))
            living = Living(kube, plane, direct)
            for name in KWOK_NODES:
                kube.create(kwok_node(name))
            for name in BASELINE_KWOK_NODES:
                kube.create(kwok_node(name), kubeconfig=living.baseline)
            for names, kubeconfig in ((KWOK_NODES, None), (BASELINE_KWOK_NODES, living.baseline)):
                for name in names:
                    living.ready_since[name] = ready_transition(
                        wait_node_ready(living, name, "True", kubeconfig=kubeconfig, timeout=60))
            yield living


def test_a_deployment_through_the_proxy_runs_on_kwok_nodes_of_both_resource_partitions(living: Living) -> None:
    kube = living.kube
    times = {}
    for where, kubeconfig in (("proxy", None), ("direct", living.baseline)):
        kube.kubectl("create", "namespace", "acme-web", kubeconfig=kubeconfig)
        start = time.monotonic()
        kube.kubectl("create", "deployment", "web", "--image=x", "--replicas=4", "-n", "acme-web", kubeconfig=kubeconfig)
        pods = wait_running_pods(living, "acme-web", 4, kubeconfig=kubeconfig, timeout=120)
        times[where] = round(time.monotonic() - start, 1)
        if where == "proxy":
            nodes = sorted(p["spec"]["nodeName"] for p in pods)
            assert {n.split("-")[0] for n in nodes} == {"rp1", "rp2"}, nodes
            assert set(nodes) <= set(KWOK_NODES), nodes
            # The pods live in the tenant's partition (acme: tp1) and were bound by tp1's scheduler.
            direct = running_pods(living, "acme-web", kubeconfig=kube.direct("tp1"))
            assert sorted(p["metadata"]["name"] for p in direct) == sorted(p["metadata"]["name"] for p in pods)
            assert running_pods(living, "acme-web", kubeconfig=kube.direct("tp2")) == []
    record("deployment_4_pods_running_seconds", times)


def test_deleting_a_namespace_through_the_proxy_finishes(living: Living) -> None:
    kube = living.kube
    times = {}
    for where, kubeconfig in (("proxy", None), ("direct", living.baseline)):
        kube.kubectl("create", "namespace", "zeta-gone", kubeconfig=kubeconfig)
        kube.kubectl("create", "deployment", "db", "--image=x", "--replicas=2", "-n", "zeta-gone", kubeconfig=kubeconfig)
        kube.kubectl("create", "configmap", "settings", "--from-literal=a=b", "-n", "zeta-gone", kubeconfig=kubeconfig)
        wait_running_pods(living, "zeta-gone", 2, kubeconfig=kubeconfig, timeout=120)
        start = time.monotonic()
        kube.kubectl("delete", "namespace", "zeta-gone", "--wait=false", kubeconfig=kubeconfig)

        def gone(k: Path | None = kubeconfig) -> bool:
            out = kube.kubectl("get", "namespace", "zeta-gone", "--ignore-not-found", "-o", "name", kubeconfig=k)
            return out.strip() == ""

        wait_for(f"namespace zeta-gone deleted ({where})", gone, timeout=120)
        times[where] = round(time.monotonic() - start, 1)
    # zeta: tp2 owns the namespace, so tp2's namespace controller emptied it.
    assert kube.kubectl("get", "namespace", "zeta-gone", "--ignore-not-found", kubeconfig=kube.direct("tp2")).strip() == ""
    record("namespace_deletion_seconds", times)


def test_a_kwok_node_whose_lease_stops_renewing_goes_not_ready(living: Living) -> None:
    kube = living.kube
    times = {}
    for where, name, kubeconfig, home in (("proxy", "rp2-stale-1", None, "rp2"),
                                          ("direct", "rp3-stale-1", living.baseline, BASELINE)):
        kube.create(kwok_node(name), kubeconfig=kubeconfig)
        wait_node_ready(living, name, "True", kubeconfig=kubeconfig, timeout=60)
        # kwok lets go of a node that no longer carries its label: its Lease stops being renewed.
        kube.kubectl("label", "node", name, f"{cp.KWOK_LABEL[0]}-", kubeconfig=kubeconfig)
        start = time.monotonic()
        wait_node_ready(living, name, "Unknown", kubeconfig=kubeconfig, timeout=120)
        times[where] = round(time.monotonic() - start, 1)

        # The node lifecycle controller taints in a later pass than the one that set Unknown
        # (its tainting passes run every --node-monitor-period): wait for it, as both sides do.
        def tainted() -> dict[str, Any] | None:
            node: dict[str, Any] = living.kubectl_json("get", "node", name, kubeconfig=kubeconfig)
            return node if "node.kubernetes.io/unreachable" in {t["key"] for t in node["spec"].get("taints") or []} else None

        wait_for(f"node {name} tainted unreachable", tainted, timeout=30)
        # Read straight from the RP that holds it: the RP's own node lifecycle controller wrote it.
        assert node_ready(living.kubectl_json("get", "node", name, kubeconfig=kube.direct(home))) == "Unknown"
    # Meanwhile the nodes kwok keeps managing never left Ready: the node lifecycle controller of
    # each RP, pinned to it, sees their Leases renewed (it once saw none: a lease list of every
    # namespace under an RP prefix was the TPs' union, and every node flapped NotReady).
    for name, kubeconfig in [(n, None) for n in KWOK_NODES] + [(n, living.baseline) for n in BASELINE_KWOK_NODES]:
        node = living.kubectl_json("get", "node", name, kubeconfig=kubeconfig)
        assert (node_ready(node), ready_transition(node)) == ("True", living.ready_since[name]), name
    record("kwok_node_not_ready_after_label_removed_seconds", times)
    record("node_monitor_grace_period", living.plane.node_monitor_grace_period)


# -- kubemark hollow kubelets ------------------------------------------------------------------

HOLLOW = [HollowNode("rp1-hollow-1", "rp1"), HollowNode("rp2-hollow-1", "rp2")]
BASELINE_HOLLOW = [HollowNode("rp3-hollow-1", BASELINE, through_proxy=False)]
TOLERATION = {"key": cp.HOLLOW_TAINT.split("=")[0], "operator": "Exists"}


@pytest.fixture(scope="module")
def hollow(living: Living) -> Iterator[Living]:
    """The hollow kubelets, started after the rest; upstream watches are counted before and after."""
    kube = living.kube
    partitions = (*PROXIED, BASELINE)
    before = watches_now(kube, partitions)
    proxy_before = kube.metric("partition_proxy_inflight_requests", kind="long-running")
    start = time.monotonic()
    living.plane.start_hollow_nodes(HOLLOW, timeout=120)
    living.direct.start_hollow_nodes(BASELINE_HOLLOW, timeout=120)
    record("hollow_kubelets_registered_seconds", round(time.monotonic() - start, 1))
    living.hollow = HOLLOW + BASELINE_HOLLOW
    time.sleep(15)  # every informer of the kubelets has listed and is watching
    after = watches_now(kube, partitions)
    proxy_after = kube.metric("partition_proxy_inflight_requests", kind="long-running")
    delta = watch_delta(before, after, partitions)
    record("hollow_kubelet_upstream_watches", {
        "through_proxy": {"kubelets": len(HOLLOW), "per_partition": {p: delta[p] for p in PROXIED},
                          "total": sum(sum(delta[p].values()) for p in PROXIED),
                          "downstream_watches_at_proxy": int(proxy_after - proxy_before)},
        "direct": {"kubelets": len(BASELINE_HOLLOW), "per_resource": delta[BASELINE],
                   "total": sum(delta[BASELINE].values())},
    })
    yield living


def test_a_hollow_kubelet_registers_its_node_and_renews_its_lease_through_the_proxy(hollow: Living) -> None:
    kube = hollow.kube
    for node in HOLLOW:
        through = hollow.kubectl_json("get", "node", node.name)
        direct = hollow.kubectl_json("get", "node", node.name, kubeconfig=kube.direct(node.partition))
        assert through["metadata"]["uid"] == direct["metadata"]["uid"]
        assert direct["spec"]["providerID"] == f"kubemark://{node.name}"
        other = "rp2" if node.partition == "rp1" else "rp1"
        assert kube.kubectl("get", "node", node.name, "--ignore-not-found", kubeconfig=kube.direct(other)).strip() == ""
    renewals = {}
    for node in HOLLOW + BASELINE_HOLLOW:
        k = kube.direct(node.partition)

        def renew_time(n: HollowNode = node, kc: Path = k) -> str:
            return str(hollow.kubectl_json("get", "lease", "-n", "kube-node-lease", n.name, kubeconfig=kc)["spec"]["renewTime"])

        first = renew_time()

        def renewed(r: Callable[[], str] = renew_time, f: str = first) -> str | None:
            t = r()
            return t if t != f else None

        later, waited = wait_for(f"{node.name} renews its Lease", renewed, timeout=40)
        assert later > first
        wait_node_ready(hollow, node.name, "True", kubeconfig=k, timeout=60)
        renewals[node.name] = round(waited, 1)
    record("hollow_lease_renewed_within_seconds", renewals)


def test_a_hollow_kubelet_runs_pods_of_both_tenant_partitions_through_the_proxy(hollow: Living) -> None:
    kube = hollow.kube
    cases = [("acme-hollow", HOLLOW[0], None, "tp1"), ("zeta-hollow", HOLLOW[1], None, "tp2"),
             ("acme-hollow", BASELINE_HOLLOW[0], hollow.baseline, BASELINE)]
    times = {}
    for namespace, node, kubeconfig, owner in cases:
        kube.kubectl("create", "namespace", namespace, kubeconfig=kubeconfig, check=False)
        pod: dict[str, object] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"on-{node.name}", "namespace": namespace},
               "spec": {"nodeName": node.name, "tolerations": [TOLERATION],
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}
        start = time.monotonic()
        kube.create(pod, kubeconfig=kubeconfig)

        def running(ns: str = namespace, n: HollowNode = node, o: str = owner) -> dict[str, Any] | None:
            got: dict[str, Any] = hollow.kubectl_json("get", "pod", "-n", ns, f"on-{n.name}", kubeconfig=kube.direct(o))
            return got if got["status"].get("phase") == "Running" else None

        got, _ = wait_for(f"pod on {node.name} Running in {owner}", running, timeout=90)
        times[node.name] = round(time.monotonic() - start, 1)
        statuses = got["status"]["containerStatuses"]
        assert statuses[0]["ready"] is True and "running" in statuses[0]["state"], statuses
        assert got["status"]["conditions"] and got["status"].get("hostIP"), got["status"]
    record("hollow_pod_running_seconds", times)


def test_hollow_kubelets_through_the_proxy_watch_nothing_upstream_in_their_resource_partitions(hollow: Living) -> None:
    """Every watch of a kubelet (its Node by name, its pods by `spec.nodeName`, every Service,
    CSIDriver and RuntimeClass) is served from the proxy's default caches: no upstream watch in
    any partition, while the same kubelet straight at a partition opens five (docs/sizing.md)."""
    figures = FIGURES["hollow_kubelet_upstream_watches"]
    cost = figures["through_proxy"]["per_partition"]
    assert cost == {p: {} for p in PROXIED}, cost
    assert set(figures["direct"]["per_resource"]) == {"nodes", "pods", "services", "csidrivers", "runtimeclasses"}, figures


def test_the_control_plane_is_healthy_and_its_memory_is_known(hollow: Living) -> None:
    """Every component is still running; the memory of all of them is reported."""
    for group in (hollow.plane.group, hollow.direct.group):
        assert group.exited() == [], [(p.name, p.popen.returncode, str(p.log)) for p in group.exited()]
    kube = hollow.kube
    record("rss_mib", {
        "partitions_all_5": round(rss_mib([proc.popen.pid for proc in kube.fed._procs])),
        "proxy": round(rss_mib([kube.proxy.popen.pid] if kube.proxy.popen else [])),
        "control_plane_through_proxy": {p.name: round(rss_mib([p.pid])) for p in hollow.plane.group.processes},
        "control_plane_direct": {p.name: round(rss_mib([p.pid])) for p in hollow.direct.group.processes},
    })
    # No component logged that the proxy answered something it could not decode.
    bad = re.compile(r"(?i)(unable to decode|resourceVersion.*invalid|Failed to watch .*: .*40[0-9])")
    for proc in hollow.plane.group.processes:
        hits = [line for line in proc.log.read_text(errors="replace").splitlines() if bad.search(line)]
        assert hits == [], (proc.name, hits[:5])
