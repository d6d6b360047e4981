"""Proxy resourceVersions with four tenant partitions: every RV any answer carries is a valid
uint128 (the old 20-digits-per-partition encoding needed 84 digits here), and union list and
watch RVs name all four partitions. A federation of its own: 4 TPs x 1 RP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import aiohttp
import pytest

from routing import protobuf as pb
from routing import rv as rvcodec
from tests.federation import Kube, pod, running_federation

TPS = ("tp1", "tp2", "tp3", "tp4")
TENANTS = {"tp1": "acme", "tp2": "globex", "tp3": "nova", "tp4": "umbrella"}  # ranges a-f, g-m, n-s, t-z


@pytest.fixture(scope="module")
def kube4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    with running_federation(tmp_path_factory.mktemp("four"), tenant_partitions=4, resource_partitions=1) as kube:
        for tenant in TENANTS.values():
            kube.kubectl("create", "namespace", f"{tenant}-web")
            kube.create(pod(f"{tenant}-web", "p", "rp1-n1"))
        yield kube


def _all_rvs(value: object) -> list[str]:
    if isinstance(value, dict):
        return [v for k, v in value.items() if k == "resourceVersion" and isinstance(v, str)] + [
            rv for k, v in value.items() if k not in ("annotations", "labels") for rv in _all_rvs(v)
        ]
    if isinstance(value, list):
        return [rv for v in value for rv in _all_rvs(v)]
    return []


def test_namespaces_land_in_all_four_tenant_partitions(kube4: Kube) -> None:
    for partition, tenant in TENANTS.items():
        direct = json.loads(kube4.kubectl("get", "pods", "-n", f"{tenant}-web", "-o", "json", kubeconfig=kube4.direct(partition)))
        assert [i["metadata"]["name"] for i in direct["items"]] == ["p"], partition


async def test_every_rv_through_the_proxy_is_a_valid_uint128_with_four_tenant_partitions(kube4: Kube) -> None:
    codec = kube4.rv_codec(TPS)
    ctx = kube4.client_ssl()
    seen: list[str] = []
    async with aiohttp.ClientSession() as s:
        for path in ("/api/v1/pods", "/api/v1/namespaces", "/api/v1/configmaps", "/api/v1/pods?pretty=true",
                     "/api/v1/namespaces/nova-web/pods", "/api/v1/namespaces/umbrella-web/pods/p"):
            async with s.get(kube4.proxy.server + path, ssl=ctx) as r:
                assert r.status == 200
                doc = await r.json()
            seen += _all_rvs(doc)
            if doc.get("kind", "").endswith("List") and "/namespaces/" not in path:  # a union of all four
                assert all(codec.decode(doc["metadata"]["resourceVersion"])), path  # names all four
        async with s.get(kube4.proxy.server + "/api/v1/pods", ssl=ctx, headers={"Accept": "application/vnd.kubernetes.protobuf"}) as r:
            body = await r.read()
        _, meta, items = pb.list_items(body)
        seen += [pb.list_meta_rv(meta), *(pb.item_meta(i).resource_version for i in items)]
        assert all(codec.decode(pb.list_meta_rv(meta)))
        params = {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan", "allowWatchBookmarks": "true"}
        async with s.get(kube4.proxy.server + "/api/v1/pods", params=params, ssl=ctx) as r:
            assert r.status == 200
            while True:
                event = json.loads(await asyncio.wait_for(r.content.readline(), 30))
                seen += _all_rvs(event)
                annotations = event["object"]["metadata"].get("annotations") or {}
                if annotations.get("k8s.io/initial-events-end") == "true":
                    assert all(codec.decode(event["object"]["metadata"]["resourceVersion"]))
                    break
    # kubectl joins several resources into a client-side `List` whose resourceVersion is "".
    seen += [rv for rv in _all_rvs(json.loads(kube4.kubectl("get", "pods,configmaps,namespaces", "-A", "-o", "json"))) if rv]

    assert len(seen) > 20
    bad = [(i, rv) for i, rv in enumerate(seen) if not rvcodec.is_valid_rv(rv)]
    assert bad == [], (bad, len(seen), seen[max(0, bad[0][0] - 3) : bad[0][0] + 3] if bad else None)
    assert max(int(rv).bit_length() for rv in seen) <= 128
    assert all(rvcodec.is_proxy_rv(rv) for rv in seen)
