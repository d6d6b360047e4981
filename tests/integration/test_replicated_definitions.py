"""Cluster-scoped definitions tenants' objects depend on, written through the proxy, apply in
every tenant partition (routing.decide.REPLICATED, proxy.handlers.replicate): a CRD serves custom
resources in a tp2 tenant's namespace, a ValidatingAdmissionPolicy and its binding are enforced
there, and deleting them through the proxy deletes every copy. Real kubectl, real partitions."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from tests.federation import Kube, KubectlError, eventually


def crd(group: str) -> dict[str, object]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }


def succeeds(kube: Kube, *args: str, stdin: str | None = None) -> bool:
    cmd = [kube.kubectl_path, "--kubeconfig", str(kube.admin), *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60).returncode == 0


def test_a_crd_made_through_the_proxy_serves_custom_resources_in_every_tenant_partition(kube: Kube, unique: str) -> None:
    group = f"g{unique}.example.com"
    kube.create(crd(group))
    for partition in ("tp1", "tp2"):
        kube.kubectl("get", "crd", f"widgets.{group}", kubeconfig=kube.direct(partition))
    for namespace in (f"alpha-{unique}", f"nova-{unique}"):  # a tp1 tenant, a tp2 tenant
        kube.kubectl("create", "namespace", namespace)
        widget = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": namespace}, "spec": {"size": 3}}
        eventually(lambda: succeeds(kube, "create", "-f", "-", stdin=json.dumps(widget)), 30, f"a Widget in {namespace}")
    def listed() -> list[str]:  # a union over the TPs once routing has learned the new resource is namespaced
        got = json.loads(kube.kubectl("get", f"widgets.{group}", "-A", "-o", "json"))
        return sorted(i["metadata"]["namespace"] for i in got["items"])

    eventually(lambda: listed() == [f"alpha-{unique}", f"nova-{unique}"], 10, "kubectl get widgets -A: both TPs")
    direct = json.loads(kube.kubectl("get", f"widgets.{group}", "-n", f"nova-{unique}", "-o", "json", kubeconfig=kube.direct("tp2")))
    assert [i["metadata"]["name"] for i in direct["items"]] == ["w"]

    kube.kubectl("delete", "crd", f"widgets.{group}")
    for partition in ("tp1", "tp2"):
        eventually(lambda: not succeeds_direct(kube, partition, "get", "crd", f"widgets.{group}"), 60, f"the CRD gone from {partition}")


def succeeds_direct(kube: Kube, partition: str, *args: str) -> bool:
    try:
        kube.kubectl(*args, kubeconfig=kube.direct(partition))
    except KubectlError:
        return False
    return True


def test_an_admission_policy_made_through_the_proxy_is_enforced_in_every_tenant_partition(kube: Kube, unique: str) -> None:
    policy = f"no-forbidden-{unique}"
    label = f"policy-{unique}"
    vap = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": policy},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "validations": [{"expression": "!has(object.data) || !('forbidden' in object.data)", "message": f"forbidden by {policy}"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": policy},
        "spec": {"policyName": policy, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {label: "on"}}}},
    }
    kube.create(vap)
    kube.create(binding)
    for namespace in (f"alpha-{unique}", f"nova-{unique}"):
        kube.kubectl("create", "namespace", namespace)
        kube.kubectl("label", "namespace", namespace, f"{label}=on")

    def denied(namespace: str) -> bool:
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "c-", "namespace": namespace}, "data": {"forbidden": "x"}}
        cmd = [kube.kubectl_path, "--kubeconfig", str(kube.admin), "create", "-f", "-"]
        done = subprocess.run(cmd, input=json.dumps(cm), capture_output=True, text=True, timeout=60)
        return done.returncode != 0 and f"forbidden by {policy}" in done.stderr

    for namespace in (f"alpha-{unique}", f"nova-{unique}"):  # tp1 and tp2
        eventually(lambda: denied(namespace), 30, f"the policy enforced in {namespace}")
    kube.kubectl("create", "configmap", "allowed", "-n", f"nova-{unique}", "--from-literal=ok=1")  # the rest still admitted

    kube.kubectl("delete", "validatingadmissionpolicybinding", policy)
    kube.kubectl("delete", "validatingadmissionpolicy", policy)
    for partition in ("tp1", "tp2"):
        assert not succeeds_direct(kube, partition, "get", "validatingadmissionpolicy", policy)


def test_a_copy_a_tenant_partition_refuses_is_reported_in_a_warning(kube: Kube, unique: str) -> None:
    name = f"pc-{unique}"
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": 1000}
    kube.create(pc, kubeconfig=kube.direct("tp2"))  # already there, made straight in tp2
    cmd = [kube.kubectl_path, "--kubeconfig", str(kube.admin), "create", "-f", "-"]
    done = subprocess.run(cmd, input=json.dumps(pc), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr  # the system partition took it: the write stands
    assert "not replicated to tp2: 409 AlreadyExists" in done.stderr, done.stderr  # kubectl prints Warning headers
    assert kube.metric("partition_proxy_replication_failures_total", partition="tp2", resource="priorityclasses") >= 1
    kube.kubectl("delete", "priorityclass", name)  # both copies
    assert not succeeds_direct(kube, "tp2", "get", "priorityclass", name)


async def test_a_crd_made_straight_in_tp2_is_discovered_and_served_through_the_proxy(kube: Kube, unique: str) -> None:
    """Discovery and OpenAPI documents are merged over the TPs: `kubectl api-resources` lists a
    CRD only tp2 has, its objects in a tp2 tenant's namespace are served, the OpenAPI v3 index
    names its group-version and that document is served; the merged aggregated discovery has an
    ETag and answers If-None-Match with 304, as kube-apiserver does."""
    import aiohttp

    group = f"d{unique}.example.com"
    namespace = f"nova-{unique}"
    kube.create(crd(group), kubeconfig=kube.direct("tp2"))
    kube.kubectl("create", "namespace", namespace)
    widget = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": namespace}}
    eventually(lambda: succeeds_direct(kube, "tp2", "get", f"widgets.{group}", "-A"), 30, "the CRD established in tp2")
    eventually(lambda: f"widgets.{group}" in kube.kubectl("api-resources", "-o", "name"), 30, "api-resources through the proxy")
    assert f"widgets.{group}" not in kube.kubectl("api-resources", "-o", "name", kubeconfig=kube.direct("tp1"))
    kube.create(widget)
    assert json.loads(kube.kubectl("get", f"widgets.{group}", "-n", namespace, "-o", "json"))["items"][0]["metadata"]["name"] == "w"

    ctx = kube.client_ssl()
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    async with aiohttp.ClientSession() as s:
        async with s.get(kube.proxy.server + "/apis", headers={"Accept": accept}, ssl=ctx) as r:
            assert r.status == 200
            etag = r.headers["ETag"]
            doc = await r.json(content_type=None)
        assert group in [g["metadata"]["name"] for g in doc["items"]]
        async with s.get(kube.proxy.server + "/apis", headers={"Accept": accept, "If-None-Match": etag}, ssl=ctx) as r:
            assert r.status == 304 and r.headers["ETag"] == etag
        async with s.get(kube.proxy.server + "/openapi/v3", ssl=ctx) as r:
            index = await r.json(content_type=None)  # text/plain, as kube-apiserver answers it
        url = index["paths"][f"apis/{group}/v1"]["serverRelativeURL"]
        async with s.get(kube.proxy.server + url, ssl=ctx) as r:
            assert r.status == 200, await r.text()
            assert "Widget" in await r.text()
        async with s.get(kube.proxy.server + f"/apis/{group}/v1", ssl=ctx) as r:  # legacy discovery: tp2's answer
            assert r.status == 200 and [x["name"] for x in (await r.json())["resources"]] == ["widgets"]
    kube.kubectl("delete", "crd", f"widgets.{group}", kubeconfig=kube.direct("tp2"))


def test_reading_a_definition_reports_the_tenant_partitions_whose_copy_differs(kube: Kube, unique: str) -> None:
    """A GET of a replicated definition answers the system partition's copy and names, in a
    Warning kubectl prints, each TP whose copy is missing, was changed there, or did not accept
    it the same way (its conditions: here a CRD whose kind another CRD already has in tp2)."""
    group = f"r{unique}.example.com"
    name = f"widgets.{group}"

    def get(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([kube.kubectl_path, "--kubeconfig", str(kube.admin), "get", "crd", name, *args],
                              capture_output=True, text=True, timeout=60)

    kube.create(crd(group))
    eventually(lambda: "Established" in kube.kubectl("get", "crd", name, "-o", "jsonpath={.status.conditions[*].type}",
                                                     kubeconfig=kube.direct("tp2")), 30, "the copy established in tp2")
    clean = get("-o", "name")
    assert clean.returncode == 0 and clean.stderr == "", clean.stderr
    kube.kubectl("label", "crd", name, "edited=in-tp2", kubeconfig=kube.direct("tp2"))
    edited = get()  # a Table answer: the copies are compared as JSON all the same
    assert edited.returncode == 0
    assert f"Warning: customresourcedefinitions {name} in tp2: its definition differs" in edited.stderr, edited.stderr
    kube.kubectl("delete", "crd", name, kubeconfig=kube.direct("tp2"))
    eventually(lambda: f"Warning: customresourcedefinitions {name} in tp2: missing" in get("-o", "name").stderr, 30, "the missing copy reported")
    kube.kubectl("delete", "crd", name)

    # A CRD that tp2 does not accept: its kind is taken there by another CRD of the group.
    other = crd(group)
    other["metadata"] = {"name": f"gizmos.{group}"}
    other["spec"]["names"] = {"plural": "gizmos", "singular": "gizmo", "kind": "Widget"}  # type: ignore[index]
    kube.create(other, kubeconfig=kube.direct("tp2"))
    kube.create(crd(group))
    conflict = (f"Warning: customresourcedefinitions {name} in tp2: condition NamesAccepted is False (ListKindConflict: "
                f"'WidgetList' is already in use); condition Established is False (NotAccepted: not all names are accepted)")
    eventually(lambda: conflict in get("-o", "name").stderr, 30, "tp2's refusal of the kind reported")
    assert get("-o", "name").returncode == 0
    kube.kubectl("delete", "crd", name)
    kube.kubectl("delete", "crd", f"gizmos.{group}", kubeconfig=kube.direct("tp2"))


async def test_a_flowschema_made_through_the_proxy_classifies_its_users_requests_in_every_partition(kube: Kube, unique: str) -> None:
    """API Priority and Fairness runs in every kube-apiserver: a FlowSchema (and its priority
    level) made through the proxy is in every partition, TPs and RPs, so the user it names is
    classified by it wherever a request lands; the X-Kubernetes-PF-* answer headers reach the
    client, and /metrics carries each partition's APF samples (the conformance spec reads the
    priority level's nominal seats there)."""
    level, schema, user = f"e2e-pl-{unique}", f"e2e-fs-{unique}", f"e2e-user-{unique}"
    kube.create({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration", "metadata": {"name": level},
                 "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 10, "limitResponse": {"type": "Reject"}}}})
    kube.create({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": schema},
                 "spec": {"matchingPrecedence": 1000, "priorityLevelConfiguration": {"name": level},
                          "distinguisherMethod": {"type": "ByUser"},
                          "rules": [{"subjects": [{"kind": "User", "user": {"name": user}}],
                                     "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}})
    uids = {}
    for partition in ("tp1", "tp2", "rp1", "rp2"):
        got = json.loads(kube.kubectl("get", "flowschema", schema, "-o", "json", kubeconfig=kube.direct(partition)))
        uids[partition] = got["metadata"]["uid"]
    ctx = kube.client_ssl()
    for partition in ("tp1", "rp1"):  # the system partition answers /version; a path prefix pins rp1
        path = "/version" if partition == "tp1" else "/partitions/rp1/version"
        async def classified() -> bool:
            async with aiohttp.ClientSession() as s:
                async with s.get(kube.proxy.server + path, ssl=ctx, headers={"Impersonate-User": user}) as r:
                    return r.status == 200 and r.headers.get("X-Kubernetes-PF-FlowSchema-UID") == uids[partition]
        await until_async(classified, 30, f"{user}'s requests classified by {schema} in {partition}")

    async def seats() -> set[str]:
        async with aiohttp.ClientSession() as s:
            async with s.get(kube.proxy.server + "/metrics", ssl=ctx) as r:
                text = await r.text()
        return {line.split('partition="', 1)[1].split('"', 1)[0] for line in text.splitlines()
                if line.startswith("apiserver_flowcontrol_nominal_limit_seats{") and f'priority_level="{level}"' in line}
    await until_async(lambda: seats(), 30, f"{level}'s nominal seats in /metrics", expect={"tp1", "tp2", "rp1", "rp2"})

    kube.kubectl("delete", "flowschema", schema)
    kube.kubectl("delete", "prioritylevelconfiguration", level)
    for partition in ("tp2", "rp2"):
        eventually(lambda: not succeeds_direct(kube, partition, "get", "flowschema", schema), 60, f"the FlowSchema gone from {partition}")


async def until_async(check: Callable[[], Awaitable[Any]], timeout: float, what: str, *, expect: Any = True) -> None:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last == expect:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")


async def test_a_protobuf_update_of_a_definition_reaches_every_tenant_partition(kube: Kube, unique: str) -> None:
    # client-go's clientsets write protobuf: the copy sent to the other partitions goes without the
    # system partition's uid and resourceVersion, which they would refuse as a Conflict
    name = f"e2e-pc-{unique}"
    kube.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": 1000})
    url = f"{kube.proxy.server}/apis/scheduling.k8s.io/v1/priorityclasses/{name}"
    protobuf = "application/vnd.kubernetes.protobuf"
    async with aiohttp.ClientSession() as s:
        async with s.get(url, ssl=kube.client_ssl(), headers={"Accept": protobuf}) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith(protobuf)
            body = await r.read()
        async with s.put(url, data=body, ssl=kube.client_ssl(), headers={"Content-Type": protobuf, "Accept": protobuf}) as r:
            assert r.status == 200, await r.text()
            assert not [w for w in r.headers.getall("Warning", []) if "not replicated" in w], r.headers.getall("Warning", [])


def test_an_update_of_a_crd_reaches_every_tenant_partition_and_leaves_the_merged_openapi(kube: Kube, unique: str) -> None:
    # kube-apiserver refuses an unconditional update of a CRD: the copy sent to tp2 carries tp2's
    # own resourceVersion. The conformance spec behind it: a version set to not served leaves
    # /openapi/v2 (CustomResourcePublishOpenAPI, crd_publish_openapi.go).
    group = f"u{unique}.example.com"
    two = crd(group)
    versions = two["spec"]["versions"]  # type: ignore[index]
    versions.append({**versions[0], "name": "v2", "storage": False})  # type: ignore[union-attr]
    kube.create(two)
    definition = f"com.example.u{unique}.v2.Widget"

    def served_in_openapi() -> bool:
        return definition in json.loads(kube.kubectl("get", "--raw", "/openapi/v2"))["definitions"]

    eventually(served_in_openapi, 60, f"{definition} in the merged /openapi/v2")
    current = json.loads(kube.kubectl("get", "crd", f"widgets.{group}", "-o", "json"))
    current["spec"]["versions"][1]["served"] = False
    out = subprocess.run([kube.kubectl_path, "--kubeconfig", str(kube.admin), "replace", "-f", "-"], input=json.dumps(current),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "not replicated" not in out.stderr, out.stderr
    for partition in ("tp1", "tp2"):
        copy = json.loads(kube.kubectl("get", "crd", f"widgets.{group}", "-o", "json", kubeconfig=kube.direct(partition)))
        assert [v["served"] for v in copy["spec"]["versions"]] == [True, False], partition
    eventually(lambda: not served_in_openapi(), 60, f"{definition} gone from the merged /openapi/v2")
    kube.kubectl("delete", "crd", f"widgets.{group}")


@pytest.mark.parametrize("accept", ["application/json", "application/vnd.kubernetes.protobuf"])
async def test_a_definition_created_with_generate_name_has_the_same_name_in_every_tenant_partition(
        kube: Kube, unique: str, accept: str) -> None:
    # The system partition generates the name; a copy created from the client's body would get a
    # name of its own in tp2 (the e2e 'ValidatingAdmissionPolicyBinding API operations' then
    # warned "missing in tp2" and its deletes left tp2's copy behind).
    url = f"{kube.proxy.server}/apis/scheduling.k8s.io/v1/priorityclasses"
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
          "metadata": {"generateName": f"gen-{unique}-", "labels": {"gen": unique}}, "value": 1000}
    async with aiohttp.ClientSession() as s:
        async with s.post(url, json=pc, ssl=kube.client_ssl(), headers={"Accept": accept}) as r:
            assert r.status == 201, await r.text()
            assert r.headers["Content-Type"].startswith(accept)
            assert not [w for w in r.headers.getall("Warning", []) if "not replicated" in w], r.headers.getall("Warning", [])
    names = {p: kube.kubectl("get", "priorityclass", "-l", f"gen={unique}", "-o", "name", kubeconfig=kube.direct(p)).split()
             for p in ("tp1", "tp2")}
    assert len(names["tp1"]) == 1 and names["tp1"][0].startswith(f"priorityclass.scheduling.k8s.io/gen-{unique}-"), names
    assert names["tp2"] == names["tp1"], names
    kube.kubectl("delete", "priorityclass", "-l", f"gen={unique}")
    for partition in ("tp1", "tp2"):
        assert not kube.kubectl("get", "priorityclass", "-l", f"gen={unique}", "-o", "name", kubeconfig=kube.direct(partition)).split()
