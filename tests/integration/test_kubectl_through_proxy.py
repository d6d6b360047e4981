"""The real kubectl through the proxy, checked against the partitions' own state."""

from __future__ import annotations

import json
import subprocess
import time

from tests.federation import Kube, node, pod


def _names(out: str) -> set[str]:
    return {line.split("/", 1)[-1] for line in out.split()}


def test_get_nodes_lists_the_nodes_of_every_resource_partition(kube: Kube, unique: str) -> None:
    kube.create(node(f"rp1-list-{unique}"), kubeconfig=kube.direct("rp1"))
    kube.create(node(f"rp2-list-{unique}"), kubeconfig=kube.direct("rp2"))
    names = _names(kube.kubectl("get", "nodes", "-o", "name"))
    assert {f"rp1-list-{unique}", f"rp2-list-{unique}"} <= names
    direct = _names(kube.kubectl("get", "nodes", "-o", "name", kubeconfig=kube.direct("rp1")))
    direct |= _names(kube.kubectl("get", "nodes", "-o", "name", kubeconfig=kube.direct("rp2")))
    assert names == direct


def test_get_and_label_node_reach_the_nodes_own_resource_partition(kube: Kube, unique: str) -> None:
    name = f"rp2-label-{unique}"
    kube.create(node(name), kubeconfig=kube.direct("rp2"))
    got = json.loads(kube.kubectl("get", "node", name, "-o", "json"))
    assert got["metadata"]["name"] == name
    kube.kubectl("label", "node", name, f"checked={unique}")
    on_rp2 = json.loads(kube.kubectl("get", "node", name, "-o", "json", kubeconfig=kube.direct("rp2")))
    assert on_rp2["metadata"]["labels"]["checked"] == unique
    assert kube.kubectl("get", "node", name, "-o", "name", kubeconfig=kube.direct("rp1"), check=False) == ""


def test_node_created_through_the_proxy_lands_in_its_placed_partition(kube: Kube, unique: str) -> None:
    name = f"rp1-created-{unique}"
    kube.create(node(name))
    assert kube.kubectl("get", "node", name, "-o", "name", kubeconfig=kube.direct("rp1")).strip() == f"node/{name}"
    assert kube.kubectl("get", "node", name, "-o", "name", kubeconfig=kube.direct("rp2"), check=False) == ""


def test_namespace_and_pods_of_a_tp2_tenant_land_in_tp2_only(kube: Kube, unique: str) -> None:
    namespace = f"zoo{unique}-app"  # tenant zoo<...>: n-z -> tp2
    kube.kubectl("create", "namespace", namespace)
    assert kube.kubectl("get", "ns", namespace, "-o", "name", kubeconfig=kube.direct("tp2")).strip()
    assert kube.kubectl("get", "ns", namespace, "-o", "name", kubeconfig=kube.direct("tp1"), check=False) == ""
    kube.create(pod(namespace, "p1", "rp1-any"))
    assert kube.kubectl("-n", namespace, "get", "pod", "p1", "-o", "name", kubeconfig=kube.direct("tp2")).strip() == "pod/p1"
    assert kube.kubectl("-n", namespace, "get", "pods", "-o", "name", kubeconfig=kube.direct("tp1")) == ""


def test_get_pods_all_namespaces_shows_pods_of_both_tenant_partitions(kube: Kube, unique: str) -> None:
    ns1, ns2 = f"acme{unique}-a", f"zoo{unique}-b"
    for ns in (ns1, ns2):
        kube.kubectl("create", "namespace", ns)
        kube.create(pod(ns, f"pod-{ns}", "rp1-any"))
    out = kube.kubectl("get", "pods", "-A", "--no-headers")
    rows = {tuple(line.split()[:2]) for line in out.splitlines()}
    assert (ns1, f"pod-{ns1}") in rows
    assert (ns2, f"pod-{ns2}") in rows
    assert kube.kubectl("-n", ns1, "get", "pods", "-o", "name", kubeconfig=kube.direct("tp1")).strip()
    assert kube.kubectl("-n", ns2, "get", "pods", "-o", "name", kubeconfig=kube.direct("tp2")).strip()


def test_get_namespaces_shows_each_system_namespace_once(kube: Kube) -> None:
    names = kube.kubectl("get", "namespaces", "-o", "name").split()
    assert names.count("namespace/kube-system") == 1
    assert names.count("namespace/default") == 1


def test_get_pods_all_namespaces_watch_prints_events_from_both_partitions(kube: Kube, unique: str) -> None:
    ns1, ns2 = f"acme{unique}-w", f"zoo{unique}-w"
    for ns in (ns1, ns2):
        kube.kubectl("create", "namespace", ns)
    watcher = subprocess.Popen(
        [kube.kubectl_path, "--kubeconfig", str(kube.admin), "get", "pods", "-A", "-w", "--no-headers"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(2)  # kubectl lists, then opens the watch from the list's resourceVersion
        for ns in (ns1, ns2):
            kube.create(pod(ns, f"late-{ns}", "rp2-any"))
        time.sleep(3)
    finally:
        watcher.terminate()
        out, err = watcher.communicate(timeout=10)
    seen = {tuple(line.split()[:2]) for line in out.splitlines()}
    assert (ns1, f"late-{ns1}") in seen, (out, err)
    assert (ns2, f"late-{ns2}") in seen, (out, err)


def test_update_carrying_a_proxy_rv_is_translated_to_the_owners_native_rv(kube: Kube, unique: str) -> None:
    namespace = f"zoo{unique}-u"
    kube.kubectl("create", "namespace", namespace)
    kube.create(pod(namespace, "p", "rp1-x"))
    got = json.loads(kube.kubectl("-n", namespace, "get", "pod", "p", "-o", "json"))
    native = json.loads(kube.kubectl("-n", namespace, "get", "pod", "p", "-o", "json", kubeconfig=kube.direct("tp2")))
    proxy_rv = got["metadata"]["resourceVersion"]
    assert proxy_rv != native["metadata"]["resourceVersion"] and len(proxy_rv) > 20
    got["metadata"].setdefault("labels", {})["replaced"] = "yes"
    done = subprocess.run(
        [kube.kubectl_path, "--kubeconfig", str(kube.admin), "replace", "-f", "-"],
        input=json.dumps(got), text=True, capture_output=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    after = json.loads(kube.kubectl("-n", namespace, "get", "pod", "p", "-o", "json", kubeconfig=kube.direct("tp2")))
    assert after["metadata"]["labels"]["replaced"] == "yes"
    # The same stale proxy RV now conflicts, as the native one would.
    done = subprocess.run(
        [kube.kubectl_path, "--kubeconfig", str(kube.admin), "replace", "-f", "-"],
        input=json.dumps(got), text=True, capture_output=True, timeout=60,
    )
    assert done.returncode != 0
    assert "the object has been modified" in done.stderr


def _lease(namespace: str, name: str) -> dict[str, object]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": namespace},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}}


def test_get_leases_all_namespaces_shows_node_leases_of_every_resource_partition(kube: Kube, unique: str) -> None:
    """Node Leases live in the RPs' kube-node-lease, every other Lease in its TP: `kubectl get
    leases -A` through the proxy is the union of both, each partition keeping what it owns (an
    RP's own kube-system leases are not the cluster's), as one kube-apiserver would list them."""
    tenant_ns = f"nova-{unique}"  # a tp2 tenant
    kube.kubectl("create", "namespace", tenant_ns)
    kube.create(_lease("kube-node-lease", f"rp1-{unique}"))  # routed by the node name: rp1
    kube.create(_lease("kube-node-lease", f"rp2-{unique}"))
    kube.create(_lease(tenant_ns, "election"))
    listed = json.loads(kube.kubectl("get", "leases", "-A", "-o", "json"))
    got = {(i["metadata"]["namespace"], i["metadata"]["name"], i["metadata"]["uid"]) for i in listed["items"]}

    def direct(partition: str, namespace: str = "") -> set[tuple[str, str, str]]:
        args = ["get", "leases", "-o", "json", *(["-n", namespace] if namespace else ["-A"])]
        items = json.loads(kube.kubectl(*args, kubeconfig=kube.direct(partition)))["items"]
        return {(i["metadata"]["namespace"], i["metadata"]["name"], i["metadata"]["uid"]) for i in items}

    names = {(ns, name) for ns, name, _ in got}
    assert {("kube-node-lease", f"rp1-{unique}"), ("kube-node-lease", f"rp2-{unique}"), (tenant_ns, "election")} <= names
    assert direct("rp1", "kube-node-lease") | direct("rp2", "kube-node-lease") <= got
    assert direct("tp1", "kube-system") <= got  # the system partition's own
    # The RPs' own kube-apiserver identity leases (same names as tp1's here: one host) are not the cluster's.
    assert not (direct("rp1", "kube-system") | direct("rp2", "kube-system")) & got
    assert (tenant_ns, "election") in {(ns, name) for ns, name, _ in direct("tp2")}
    table = kube.kubectl("get", "leases", "-A")  # the Table kubectl prints: rows of every partition
    assert f"rp1-{unique}" in table and f"rp2-{unique}" in table and "election" in table
