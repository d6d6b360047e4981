"""A union list with a tenant partition down, under each `failure.union_policy`
(docs/serving.md, "Failure semantics"): `partial` answers the partitions that answer with a
`Warning`, taking the down partition's share from a watch cache when one holds it (marked
stale); `unavailable` answers 503 ServiceUnavailable with an integer `Retry-After`. A cached
read by a kubelet goes on through the outage: tp2's last answer to its SubjectAccessReview stands
for tp2 (proxy.authz, STALE_IF_ERROR_SECONDS).

A federation of its own (2 TPs, 1 RP) and two proxies in front of it, one per policy, each with a
watch cache of the pods labelled tier=critical; tp2's kube-apiserver is stopped (its etcd keeps
running; the stop takes up to the federation's 10 s grace, as kube-apiserver waits for the
proxies' watches) for the whole module, after both caches hold a critical pod of each TP.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from hack.proxy_process import ProxyProcess
from tests.federation import Kube, pod, proxy_request, running_federation

CRITICAL = [{"name": "critical-pods", "resource": "pods", "role": "tenant", "label_selector": "tier=critical"}]
EXTRA = {"upstream": {"connect_timeout_seconds": 1, "request_timeout_seconds": 5}}
PARTIAL = '299 - "partition tp2 is unavailable: the list is partial"'
STALE = '299 - "partition tp2 is unavailable: its part comes from the watch cache and may be stale"'


@dataclass(frozen=True)
class Env:
    kube: Kube  # through the proxy with union_policy: partial (the default)
    unavailable: ProxyProcess  # union_policy: unavailable
    pods: dict[str, set[tuple[str, str]]]  # partition -> (namespace, name) of its pods
    critical_tp2: dict[str, Any]  # tp2's critical pod as tp2 answered it before it went down
    kubelet_before: tuple[int, set[tuple[str, str]]]  # a kubelet's cached read before tp2 stopped


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("unavailable")
    with running_federation(root, resource_partitions=1, caches=CRITICAL, extra=EXTRA) as kube:
        pods: dict[str, set[tuple[str, str]]] = {}
        for partition, namespace in (("tp1", "acme-policies"), ("tp2", "zulu-policies")):
            kube.kubectl("create", "namespace", namespace)
            critical = pod(namespace, "critical", "rp1-x")
            critical["metadata"]["labels"] = {"tier": "critical"}  # type: ignore[index]
            kube.create(critical)
            kube.create(pod(namespace, "plain", "rp1-x"))
            pods[partition] = {(namespace, "critical"), (namespace, "plain")}
        critical_tp2 = _get_json(kube, "tp2", "-n", "zulu-policies", "get", "pod", "critical")
        unavailable = ProxyProcess(kube.fed, root / "proxy-unavailable", caches=CRITICAL,
                                   extra={**EXTRA, "failure": {"union_policy": "unavailable"}}).start()
        try:
            for server in (kube.proxy.server, unavailable.server):
                _until_cached(kube, server, {(ns, "critical") for held in pods.values() for ns, _ in held})
            kubelet_before = asyncio.run(_kubelet_read(kube, KUBELET))
            kube.fed.stop_apiserver("tp2")
            yield Env(kube, unavailable, pods, critical_tp2, kubelet_before)
        finally:
            unavailable.stop()


KUBELET = "rp1-x"  # the node both critical pods are bound to


async def _kubelet_read(kube: Kube, node: str) -> tuple[int, set[tuple[str, str]]]:
    """Node `node`'s kubelet lists its critical pods at resourceVersion=0 (answered from the
    critical-pods cache, authorized by a SubjectAccessReview to each TP): (status, pods)."""
    query = {"fieldSelector": f"spec.nodeName={node}", "labelSelector": "tier=critical", "resourceVersion": "0"}
    async with aiohttp.ClientSession() as s:
        async with s.get(kube.proxy.server + "/api/v1/pods", params=query, ssl=kube.client_ssl(f"system:node:{node}", ("system:nodes",)),
                         timeout=aiohttp.ClientTimeout(total=30)) as r:
            doc = await r.json(content_type=None)
            return r.status, {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in doc.get("items", [])}


def _get_json(kube: Kube, partition: str, *args: str) -> dict[str, Any]:
    """`kubectl ... -o json` straight at `partition`."""
    return dict(json.loads(kube.kubectl(*args, "-o", "json", kubeconfig=kube.direct(partition))))


def _until_cached(kube: Kube, server: str, want: set[tuple[str, str]]) -> None:
    """Poll the proxy at `server` until its critical-pods cache holds `want`."""
    deadline = time.monotonic() + 30
    while True:
        code, doc, _ = asyncio.run(proxy_request(kube, "GET", "/api/v1/pods?labelSelector=tier%3Dcritical&resourceVersion=0", server=server))
        held = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in doc.get("items", [])}
        if code == 200 and held == want:
            return
        assert time.monotonic() < deadline, f"the cache of {server} never held {want}: {code} {held}"
        time.sleep(0.1)


def _kubectl(kube: Kube, *args: str) -> subprocess.CompletedProcess[str]:
    """kubectl through the partial proxy; stdout and stderr (where kubectl prints Warning headers)."""
    return subprocess.run([kube.kubectl_path, "--kubeconfig", str(kube.admin), *args], capture_output=True, text=True, timeout=60)


def _listed(stdout: str) -> set[tuple[str, str]]:
    return {(ns, name) for ns, name in (line.split() for line in stdout.splitlines() if line.strip())}


COLUMNS = ("-o", "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name", "--no-headers")


async def test_partial_union_list_answers_the_partitions_up_with_a_warning(env: Env) -> None:
    """No cache holds tp2's share of an unselected pod list: it is left out, and said so."""
    kube = env.kube
    partial = kube.metric("partition_proxy_degraded_answers_total", partition="tp2", kind="partial")
    done = _kubectl(kube, "get", "pods", "-A", *COLUMNS)
    assert done.returncode == 0, done.stderr
    assert _listed(done.stdout) == env.pods["tp1"]
    assert "Warning: partition tp2 is unavailable: the list is partial" in done.stderr, done.stderr

    code, doc, headers = await proxy_request(kube, "GET", "/api/v1/pods")
    assert code == 200, doc
    assert {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in doc["items"]} == env.pods["tp1"]
    assert headers.get("Warning") == PARTIAL, headers
    assert kube.metric("partition_proxy_degraded_answers_total", partition="tp2", kind="partial") == partial + 2


async def test_partial_union_list_takes_the_down_partitions_share_from_a_watch_cache_marked_stale(env: Env) -> None:
    """A consistent list of the critical pods goes to the partitions; tp2's share comes from
    the critical-pods cache instead: its pod as tp2 last said, with a Warning that it may be stale."""
    kube = env.kube
    stale = kube.metric("partition_proxy_degraded_answers_total", partition="tp2", kind="stale")
    done = _kubectl(kube, "get", "pods", "-A", "-l", "tier=critical", *COLUMNS)
    assert done.returncode == 0, done.stderr
    assert _listed(done.stdout) == {("acme-policies", "critical"), ("zulu-policies", "critical")}
    assert "Warning: partition tp2 is unavailable: its part comes from the watch cache and may be stale" in done.stderr, done.stderr

    code, doc, headers = await proxy_request(kube, "GET", "/api/v1/pods?labelSelector=tier%3Dcritical")
    assert code == 200, doc
    assert headers.get("Warning") == STALE, headers
    [cached] = [i for i in doc["items"] if i["metadata"]["namespace"] == "zulu-policies"]
    native = env.critical_tp2["metadata"]
    assert (cached["metadata"]["uid"], cached["metadata"]["labels"], cached["spec"]["nodeName"]) == (
        native["uid"], native["labels"], env.critical_tp2["spec"]["nodeName"])
    assert kube.rv_codec(("tp1", "tp2")).native_for(cached["metadata"]["resourceVersion"], 1) == native["resourceVersion"]
    assert kube.metric("partition_proxy_degraded_answers_total", partition="tp2", kind="stale") == stale + 2


@pytest.mark.parametrize("path", ["/api/v1/pods", "/api/v1/pods?labelSelector=tier%3Dcritical"])
async def test_unavailable_policy_answers_a_union_list_with_503_and_retry_after(env: Env, path: str) -> None:
    """With `union_policy: unavailable` the union list fails as a whole, even where a cache holds
    the down partition's share; what tp1 alone owns is still served."""
    server = env.unavailable.server
    code, status, headers = await proxy_request(env.kube, "GET", path, server=server)
    assert code == 503, status
    assert (status["kind"], status["reason"]) == ("Status", "ServiceUnavailable"), status
    assert status["message"].startswith("partition tp2 is unavailable"), status
    assert headers["Retry-After"].isdigit() and int(headers["Retry-After"]) >= 1, headers
    assert "Warning" not in headers
    code, doc, _ = await proxy_request(env.kube, "GET", "/api/v1/namespaces/acme-policies/pods", server=server)
    assert code == 200 and {i["metadata"]["name"] for i in doc["items"]} == {"critical", "plain"}, doc


async def test_a_kubelets_cached_read_goes_on_with_a_tenant_partition_down(env: Env) -> None:
    """The kubelet's read spans both TPs; tp2 cannot answer its SubjectAccessReview now, and its
    answer from before the outage stands: 200 with both critical pods (tp2's from the cache), as
    before tp2 stopped. An identity tp2 never answered for gets the error (500 InternalError, as
    kube-apiserver answers a failing authorizer)."""
    both = {("acme-policies", "critical"), ("zulu-policies", "critical")}
    assert env.kubelet_before == (200, both)
    assert await _kubelet_read(env.kube, KUBELET) == (200, both)
    code, _ = await _kubelet_read(env.kube, "rp1-never-seen")
    assert code == 500
