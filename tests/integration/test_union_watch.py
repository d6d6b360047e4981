"""Union watches over real partitions: a kubelet's pod watch and resuming from a proxy RV."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any

import aiohttp

from hack.federation import Federation
from tests.federation import Kube, pod

SECONDS = 20.0  # upper bound for one test's waits; events arrive in milliseconds


async def _read_events(
    resp: aiohttp.ClientResponse, until: Any, *, timeout: float = SECONDS
) -> list[dict[str, Any]]:
    """Read watch events (one JSON document per line) until `until(events)` is true."""
    events: list[dict[str, Any]] = []

    async def loop() -> None:
        while not until(events):
            line = await resp.content.readline()
            if not line:
                return
            assert line.endswith(b"\n") and line.count(b"\n") == 1
            events.append(json.loads(line))

    await asyncio.wait_for(loop(), timeout)
    return events


async def _create_direct(fed: Federation, ctx: ssl.SSLContext, partition: str, path: str, obj: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.post(fed.partition(partition).server + path, json=obj, ssl=ctx) as r:
            assert r.status == 201, await r.text()


async def test_kubelet_pod_watch_by_node_name_receives_pods_of_both_tenant_partitions(kube: Kube, unique: str) -> None:
    node_name = f"rp1-kubelet-{unique}"
    node_ssl = kube.client_ssl(f"system:node:{node_name}", ("system:nodes",))
    for ns in (f"acme{unique}-k", f"zoo{unique}-k"):
        kube.kubectl("create", "namespace", ns)
    url = f"{kube.proxy.server}/api/v1/pods"
    params = {"fieldSelector": f"spec.nodeName={node_name}", "watch": "true", "allowWatchBookmarks": "true"}
    async with aiohttp.ClientSession() as s:
        async with s.get(url, params=params, ssl=node_ssl) as resp:
            assert resp.status == 200, await resp.text()
            kube.create(pod(f"acme{unique}-k", "on-node", node_name))
            kube.create(pod(f"zoo{unique}-k", "on-node", node_name))
            kube.create(pod(f"zoo{unique}-k", "elsewhere", "rp2-other"))

            def both(evs: list[dict[str, Any]]) -> bool:
                return {e["object"]["metadata"].get("namespace") for e in evs if e["type"] == "ADDED"} >= {
                    f"acme{unique}-k",
                    f"zoo{unique}-k",
                }

            events = await _read_events(resp, both)
    added = [e for e in events if e["type"] == "ADDED"]
    assert {(e["object"]["metadata"]["namespace"], e["object"]["metadata"]["name"]) for e in added} == {
        (f"acme{unique}-k", "on-node"),
        (f"zoo{unique}-k", "on-node"),
    }
    assert all(e["object"]["spec"]["nodeName"] == node_name for e in added)
    assert all(e["object"]["kind"] == "Pod" for e in added)


async def _direct_events(kube: Kube, partition: str, namespace: str, native_rv: str) -> list[tuple[str, str, int]]:
    """What the partition itself reports for `namespace` after `native_rv`: (type, name, RV)."""
    params = {"watch": "1", "resourceVersion": native_rv, "timeoutSeconds": "2"}
    url = f"{kube.fed.partition(partition).server}/api/v1/namespaces/{namespace}/pods"
    async with aiohttp.ClientSession() as s:
        async with s.get(url, params=params, ssl=kube.partition_ssl(partition)) as resp:
            assert resp.status == 200
            events = [json.loads(line) async for line in resp.content if line.strip()]
    return [(e["type"], e["object"]["metadata"]["name"], int(e["object"]["metadata"]["resourceVersion"])) for e in events]


async def test_union_watch_resumed_from_last_rv_delivers_every_change_exactly_once(kube: Kube, unique: str) -> None:
    """Changes in both TPs while the client is away arrive exactly once after it resumes: the
    union watch's events per partition equal that partition's own watch from the same point."""
    ns1, ns2 = f"acme{unique}-r", f"zoo{unique}-r"
    for ns in (ns1, ns2):
        kube.kubectl("create", "namespace", ns)
    ssl_ctx = kube.client_ssl()
    base = f"{kube.proxy.server}/api/v1/pods"
    seen: list[tuple[str, str, str, str]] = []  # (type, namespace, name, proxy RV)

    def record(events: list[dict[str, Any]]) -> str:
        last = ""
        for e in events:
            meta = e["object"]["metadata"]
            last = meta["resourceVersion"]
            if e["type"] != "BOOKMARK" and meta.get("namespace") in (ns1, ns2):
                seen.append((e["type"], meta["namespace"], meta["name"], last))
        return last

    def saw(kind: str, ns: str, name: str) -> Any:
        return lambda evs: any(
            e["type"] == kind and e["object"]["metadata"].get("namespace") == ns and e["object"]["metadata"]["name"] == name
            for e in evs
        )

    async with aiohttp.ClientSession() as s:
        async with s.get(base, ssl=ssl_ctx) as r:
            listed = await r.json()
        list_rv = listed["metadata"]["resourceVersion"]
        start = kube.rv_codec(("tp1", "tp2")).decode(list_rv)
        # First connection: a create in each partition.
        async with s.get(base, params={"watch": "1", "resourceVersion": list_rv}, ssl=ssl_ctx) as resp:
            assert resp.status == 200
            kube.create(pod(ns1, "a", "rp1-x"))
            kube.create(pod(ns2, "b", "rp2-x"))
            events = await _read_events(resp, lambda evs: saw("ADDED", ns1, "a")(evs) and saw("ADDED", ns2, "b")(evs))
        rv = record(events)
        # Away: changes in both partitions.
        kube.create(pod(ns1, "c", "rp1-x"))
        kube.kubectl("-n", ns2, "label", "pod", "b", "touched=yes")
        kube.kubectl("-n", ns1, "delete", "pod", "a", "--grace-period=0", "--force")
        kube.create(pod(ns2, "d", "rp2-x"))
        # Resume from the last RV seen.
        async with s.get(base, params={"watch": "1", "resourceVersion": rv}, ssl=ssl_ctx) as resp:
            assert resp.status == 200
            events = await _read_events(resp, lambda evs: saw("DELETED", ns1, "a")(evs) and saw("ADDED", ns2, "d")(evs))
        record(events)

    assert len(seen) == len(set(seen)), "no event twice"
    rvs = [int(r) for *_, r in seen]
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs), "proxy RVs strictly increase along the union watch"
    for slot, (ns, partition) in enumerate(((ns1, "tp1"), (ns2, "tp2"))):
        through_proxy = [
            (t, name, kube.rv_codec(("tp1", "tp2")).decode(r)[slot]) for t, n, name, r in seen if n == ns
        ]
        assert through_proxy == await _direct_events(kube, partition, ns, str(start[slot]))
        assert len(through_proxy) >= 3


async def test_streaming_list_gets_one_merged_initial_events_end_bookmark(kube: Kube, unique: str) -> None:
    ns1, ns2 = f"acme{unique}-s", f"zoo{unique}-s"
    for ns in (ns1, ns2):
        kube.kubectl("create", "namespace", ns)
        kube.create(pod(ns, "p", "rp1-x"))
    params = {
        "watch": "true",
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
    }
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{kube.proxy.server}/api/v1/pods", params=params, ssl=kube.client_ssl()) as resp:
            assert resp.status == 200
            events = await _read_events(
                resp,
                lambda evs: any(
                    e["type"] == "BOOKMARK"
                    and (e["object"]["metadata"].get("annotations") or {}).get("k8s.io/initial-events-end") == "true"
                    for e in evs
                ),
            )
    ends = [e for e in events if (e["object"]["metadata"].get("annotations") or {}).get("k8s.io/initial-events-end")]
    assert len(ends) == 1 and events[-1] is ends[0]
    added = {(e["object"]["metadata"]["namespace"], e["object"]["metadata"]["name"]) for e in events if e["type"] == "ADDED"}
    assert {(ns1, "p"), (ns2, "p")} <= added
