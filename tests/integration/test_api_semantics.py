"""What real clients see through the proxy: discovery, Status errors identical to
kube-apiserver's, protobuf pass-through, identity forwarding, health and metrics."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict
from yarl import URL

from routing import protobuf as pb
from routing import rv as rvcodec
from tests.federation import Kube, node, pod

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
PROTOBUF = "application/vnd.kubernetes.protobuf"


async def _get(url: str, ctx: ssl.SSLContext, headers: dict[str, str] | None = None) -> tuple[int, CIMultiDict[str], bytes]:
    """GET the URL exactly as written (no path normalisation)."""
    async with aiohttp.ClientSession() as s:
        async with s.get(URL(url, encoded=True), ssl=ctx, headers=headers or {}) as r:
            return r.status, CIMultiDict(r.headers), await r.read()


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/pods?resourceVersion=abc",  # garbage RV on a union list
        "/api/v1/namespaces/acme-x/pods?resourceVersion=abc",  # garbage RV on a forwarded list
        "/api/v1/pods?labelSelector=a%20in%20(",  # bad label selector
        "/api/v1/pods?fieldSelector=spec.bogus%3Dx",  # unsupported field selector
        "/api/v1/nodes?fieldSelector=metadata.name%3D%3D%3Dx",  # malformed field selector
        "/api/v1/namespaces//pods",  # malformed path
        "/api/v1/nosuchresource",  # unknown resource
        "/apis/nosuch.group/v1/things",  # unknown group
        "/api/v1/namespaces/acme-x/pods/missing",  # missing object
    ],
)
async def test_bad_requests_get_the_same_status_as_from_kube_apiserver(kube: Kube, path: str) -> None:
    code, _, body = await _get(kube.proxy.server + path, kube.client_ssl())
    direct_code, _, direct_body = await _get(kube.fed.partition("tp1").server + path, kube.partition_ssl("tp1"))
    assert code == direct_code, (body, direct_body)
    if not direct_body.startswith(b"{"):
        assert body == direct_body  # e.g. "404 page not found" as text/plain
        return
    got, want = json.loads(body), json.loads(direct_body)
    assert got["kind"] == want["kind"]
    if want["kind"] == "Status":
        assert (got.get("reason"), got["code"]) == (want.get("reason"), want["code"])


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/nodes?resourceVersion=abc&watch=1",  # a union watch
        "/api/v1/namespaces/acme-x/pods?resourceVersion=abc&watch=1",  # a forwarded watch
        "/api/v1/namespaces/acme-x/pods/missing?resourceVersion=abc",  # a forwarded get
    ],
)
async def test_a_garbage_resource_version_is_a_bad_request_where_kube_apiserver_answers_500(kube: Kube, path: str) -> None:
    # kube-apiserver answers a list with RV=abc 400 BadRequest but a watch or a get 500 (its
    # strconv error leaks). The proxy answers all of them 400 with the list's wording: a client
    # error is never a 5xx through the proxy.
    code, _, body = await _get(kube.proxy.server + path, kube.client_ssl())
    direct_code, _, _ = await _get(kube.fed.partition("tp1").server + path, kube.partition_ssl("tp1"))
    got = json.loads(body)
    assert (code, got["code"], got["reason"], got["kind"]) == (400, 400, "BadRequest", "Status")
    assert got["message"].startswith('invalid resource version: resourceVersion: Invalid value: "abc"')
    assert direct_code == 500


async def test_unknown_partition_prefix_is_not_found_like_an_unknown_path(kube: Kube) -> None:
    code, headers, body = await _get(kube.proxy.server + "/partitions/nope/api/v1/pods", kube.client_ssl())
    direct = await _get(kube.fed.partition("tp1").server + "/nope/api/v1/pods", kube.partition_ssl("tp1"))
    assert (code, body) == (direct[0], direct[2]) == (404, b"404 page not found\n")
    assert headers["Content-Type"] == direct[1]["Content-Type"]


@pytest.mark.parametrize("path", ["/api/v1/pods?resourceVersion=123", "/api/v1/nodes?watch=1&resourceVersion=10000000000000000000001"])
async def test_a_resource_version_the_proxy_cannot_decode_is_expired(kube: Kube, path: str) -> None:
    code, _, body = await _get(kube.proxy.server + path, kube.client_ssl())
    status = json.loads(body)
    assert (code, status["reason"], status["code"]) == (410, "Expired", 410)


async def test_aggregated_discovery_keeps_content_type_etag_and_304(kube: Kube) -> None:
    ctx = kube.client_ssl()
    code, headers, body = await _get(kube.proxy.server + "/apis", ctx, {"Accept": AGGREGATED + ",application/json"})
    assert code == 200
    assert headers["Content-Type"].startswith(AGGREGATED)
    assert json.loads(body)["kind"] == "APIGroupDiscoveryList"
    etag = headers["ETag"]
    code, _, _ = await _get(kube.proxy.server + "/apis", ctx, {"Accept": AGGREGATED, "If-None-Match": etag})
    assert code == 304


@pytest.mark.parametrize("path", ["/version", "/api", "/apis", "/api/v1", "/apis/apps/v1", "/openapi/v2", "/openapi/v3"])
async def test_discovery_documents_are_served(kube: Kube, path: str) -> None:
    code, _, body = await _get(kube.proxy.server + path, kube.client_ssl())
    direct_code, _, direct_body = await _get(kube.fed.partition("tp1").server + path, kube.partition_ssl("tp1"))
    assert code == direct_code == 200
    assert body == direct_body


async def test_protobuf_passes_through_on_a_single_partition_route(kube: Kube, unique: str) -> None:
    name = f"rp1-proto-{unique}"
    kube.create(node(name), kubeconfig=kube.direct("rp1"))
    code, headers, body = await _get(f"{kube.proxy.server}/api/v1/nodes/{name}", kube.client_ssl(), {"Accept": PROTOBUF})
    assert code == 200
    assert headers["Content-Type"] == PROTOBUF
    assert body.startswith(b"k8s\x00") and name.encode() in body


async def test_union_list_answers_protobuf_with_proxy_rvs_to_a_protobuf_preferring_client(kube: Kube) -> None:
    code, headers, body = await _get(
        kube.proxy.server + "/api/v1/nodes", kube.client_ssl(), {"Accept": f"{PROTOBUF},application/json"}
    )
    assert code == 200 and headers["Content-Type"] == PROTOBUF
    envelope, list_meta, items = pb.list_items(body)
    assert envelope.kind == "NodeList"
    list_rv = pb.list_meta_rv(list_meta)
    assert kube.rv_codec(("rp1", "rp2")).decode(list_rv)  # a vector of both resource partitions
    assert int(list_rv) >= 2**104
    rvs = [pb.item_meta(item).resource_version for item in items]
    assert rvs and all(rvcodec.is_valid_rv(rv) and 2**64 <= int(rv) < 2**104 for rv in rvs)  # object form


def test_client_identity_reaches_partitions(kube: Kube) -> None:
    who = json.loads(kube.kubectl("auth", "whoami", "-o", "json"))
    assert who["status"]["userInfo"]["username"] == "admin"
    assert "partition-proxy:admins" in who["status"]["userInfo"]["groups"]


def test_node_identity_is_judged_by_the_partitions_node_authorizer(kube: Kube, unique: str) -> None:
    mine, other = f"rp1-own-{unique}", f"rp1-other-{unique}"
    for name in (mine, other):
        kube.create(node(name), kubeconfig=kube.direct("rp1"))
    kubeconfig = kube.fed.issue_client_kubeconfig(
        f"node-{unique}", user=f"system:node:{mine}", groups=["system:nodes"], server=kube.proxy.server
    )
    assert kube.kubectl("get", "node", mine, "-o", "name", kubeconfig=kubeconfig).strip() == f"node/{mine}"
    assert kube.kubectl("get", "node", other, "-o", "name", kubeconfig=kubeconfig, check=False) == ""


async def test_request_without_client_certificate_is_unauthorized(kube: Kube) -> None:
    ctx = ssl.create_default_context(cafile=str(kube.fed.ca_file))
    code, _, body = await _get(kube.proxy.server + "/api/v1/nodes", ctx)
    assert code == 401 and json.loads(body)["reason"] == "Unauthorized"


async def test_health_and_metrics(kube: Kube) -> None:
    ctx = ssl.create_default_context(cafile=str(kube.fed.ca_file))
    assert (await _get(kube.proxy.server + "/livez", ctx))[0] == 200
    code, _, body = await _get(kube.proxy.server + "/readyz", ctx)
    assert code == 200 and b"[+]watch-cache-nodes ok" in body and b"partition rp2: up" in body
    await _get(kube.proxy.server + "/api/v1/nodes", kube.client_ssl())
    code, _, body = await _get(kube.proxy.server + "/metrics", ctx)
    text = body.decode()
    assert code == 200
    assert 'partition_proxy_requests_total{code="200",partition="union",route="fan-out",verb="list"}' in text
    assert "partition_proxy_request_duration_seconds_bucket" in text


# What the conformance spec `health handlers should contain necessary checks` requires of one
# kube-apiserver (test/e2e/apimachinery/health_handlers.go, v1.36), a sample of it.
KUBE_APISERVER_CHECKS = ["[+]ping ok", "[+]log ok", "[+]etcd ok", "[+]poststarthook/start-apiserver-admission-initializer ok",
                         "[+]poststarthook/crd-informer-synced ok", "[+]poststarthook/bootstrap-controller ok",
                         "[+]poststarthook/apiservice-openapi-controller ok"]


@pytest.mark.parametrize("endpoint", ["healthz", "livez", "readyz"])
async def test_verbose_health_lists_the_partitions_checks_as_one_kube_apiserver_and_the_proxys_own(kube: Kube, endpoint: str) -> None:
    code, _, body = await _get(f"{kube.proxy.server}/{endpoint}?verbose", kube.client_ssl())
    lines = body.decode().splitlines()
    assert code == 200 and lines[-1] == f"{endpoint} check passed", body[-500:]
    assert set(KUBE_APISERVER_CHECKS) <= set(lines), lines
    assert ("[+]informer-sync ok" in lines) == (endpoint == "readyz")  # kube-apiserver's readyz check only
    own = [line for line in lines if line.startswith("[+]partition-proxy/")]
    assert own and (endpoint != "readyz" or "[+]partition-proxy/resource-version-table ok" in own), lines
    assert len(lines) == len(set(lines))  # each check once, whatever the number of partitions
    code, _, body = await _get(f"{kube.proxy.server}/{endpoint}", kube.client_ssl())
    assert code == 200 and b"kube-apiserver" not in body and b"[+]etcd ok" not in body  # probes: the proxy's own answer


async def test_request_sli_histogram_is_kube_apiservers_and_abandoned_watches_keep_their_route(kube: Kube, unique: str) -> None:
    """clusterloader2's API responsiveness reads apiserver_request_sli_duration_seconds by
    verb, resource, subresource and scope; a watch its client closes is a 499 of its route."""
    namespace = f"acme-sli{unique}"
    kube.kubectl("create", "namespace", namespace)
    kube.kubectl("create", "configmap", "c", "-n", namespace)
    kube.kubectl("get", "configmap", "c", "-n", namespace)
    before = kube.metric("partition_proxy_requests_total", route="fan-out", partition="union", verb="watch", code="499")
    async with aiohttp.ClientSession() as s:
        async with s.get(kube.proxy.server + "/api/v1/pods?watch=1", ssl=kube.client_ssl()) as r:
            assert r.status == 200  # then closed by the client before the watch ends

    def sli(**labels: str) -> float:
        return kube.metric("apiserver_request_sli_duration_seconds_count", component="apiserver", **labels)

    assert sli(verb="POST", resource="configmaps", scope="resource") >= 1
    assert sli(verb="GET", resource="configmaps", scope="resource") >= 1
    assert sli(verb="LIST", resource="namespaces", scope="cluster") + sli(verb="POST", resource="namespaces", scope="resource") >= 1
    assert sli(verb="WATCH") == 0  # long-running requests are not in the SLI (clusterloader2 leaves them out)
    for _ in range(150):
        if kube.metric("partition_proxy_requests_total", route="fan-out", partition="union", verb="watch", code="499") > before:
            break
        await asyncio.sleep(0.1)
    assert kube.metric("partition_proxy_requests_total", route="fan-out", partition="union", verb="watch", code="499") >= before + 1
    assert kube.metric("partition_proxy_requests_total", route="reject", partition="", code="499") == 0


def _eviction(namespace: str, name: str, rv: str) -> dict[str, object]:
    """A policy/v1 Eviction of pod `name` on the condition that its resourceVersion is `rv`."""
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": {"gracePeriodSeconds": 0, "preconditions": {"resourceVersion": rv}},
    }


async def _evict(server: str, ctx: ssl.SSLContext, namespace: str, name: str, rv: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{server}/api/v1/namespaces/{namespace}/pods/{name}/eviction", json=_eviction(namespace, name, rv), ssl=ctx) as r:
            return r.status, await r.json()


async def test_an_eviction_preconditioned_on_the_proxy_resource_version_evicts_and_a_stale_one_conflicts_as_at_the_partition(
    kube: Kube, unique: str
) -> None:
    namespace = f"zulu{unique}-evict"  # a tenant of tp2: the pod's RV is its slot of the tenant partitions' space
    kube.kubectl("create", "namespace", namespace)
    for name in ("current", "stale", "stale-direct"):
        kube.create(pod(namespace, name, "rp1-x"))
    codec = kube.rv_codec(("tp1", "tp2"))

    async def proxy_rv(name: str) -> str:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{kube.proxy.server}/api/v1/namespaces/{namespace}/pods/{name}", ssl=kube.client_ssl()) as r:
                assert r.status == 200, await r.text()
                rv: str = (await r.json())["metadata"]["resourceVersion"]
        assert rvcodec.is_proxy_rv(rv), rv
        return rv

    def native_rv(name: str) -> str:
        return kube.kubectl("-n", namespace, "get", "pod", name, "-o", "jsonpath={.metadata.resourceVersion}", kubeconfig=kube.direct("tp2"))

    # The proxy RV of the pod names its native RV in tp2: the eviction goes through.
    current = await proxy_rv("current")
    assert codec.native_for(current, 1) == native_rv("current")
    code, status = await _evict(kube.proxy.server, kube.client_ssl(), namespace, "current", current)
    assert (code, status["kind"], status["status"]) == (201, "Status", "Success"), status
    assert kube.kubectl("-n", namespace, "get", "pod", "current", "--ignore-not-found", "-o", "name", kubeconfig=kube.direct("tp2")) == ""

    # A precondition on an RV the pod has left behind: 409 Conflict, as tp2 answers the same
    # eviction with the native RV; neither pod is evicted.
    stale, stale_native = await proxy_rv("stale"), native_rv("stale-direct")
    for name in ("stale", "stale-direct"):
        kube.kubectl("-n", namespace, "label", "pod", name, "moved=on", kubeconfig=kube.direct("tp2"))
    code, status = await _evict(kube.proxy.server, kube.client_ssl(), namespace, "stale", stale)
    direct_code, direct = await _evict(kube.fed.partition("tp2").server, kube.partition_ssl("tp2"), namespace, "stale-direct", stale_native)
    assert (direct_code, direct["reason"]) == (409, "Conflict"), direct
    assert (code, status["kind"], status["reason"]) == (409, "Status", "Conflict"), status
    assert status["details"] == dict(direct["details"], name="stale"), (status, direct)
    # tp2's own answer: the precondition it judged is the native RV the stale proxy RV names
    assert f"the ResourceVersion in the precondition ({codec.native_for(stale, 1)}) does not match" in status["message"], status
    assert kube.kubectl("-n", namespace, "get", "pods", "-o", "name", kubeconfig=kube.direct("tp2")).split() == ["pod/stale", "pod/stale-direct"]
