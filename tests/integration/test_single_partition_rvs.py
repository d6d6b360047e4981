"""A resourceVersion a client got from one partition's answer (a namespaced list, a single object)
starts a watch of any scope from that answer's moment, as on one kube-apiserver, where every RV
is a position of the whole cluster (the conformance specs of Ingress, CronJob and EndpointSlice
list one namespace and watch all namespaces from that list's RV): in the answer's own partition
the events after it, in every other partition the events after the position the proxy last read
of it (docs/resource-versions.md, "Answers of one partition").

Real partitions, raw HTTP through the proxy; JSON and protobuf list answers."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import orjson

from routing import protobuf as pb
from routing import rv as rvcodec
from tests.federation import Kube

SECONDS = 20.0
PROTOBUF = "application/vnd.kubernetes.protobuf"


async def _get(kube: Kube, path: str, *, accept: str = "application/json") -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s:
        async with s.get(kube.proxy.server + path, ssl=kube.client_ssl(), headers={"Accept": accept}) as r:
            return r.status, await r.read()


async def _until_the_proxy_has_read(kube: Kube, partition: str, native: int) -> None:
    """Until the proxy's last reading of `partition`'s position (the table's refresh) is past
    `native`: what the proxy then hands out as that partition's position is after it."""
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline:
        code, body = await _get(kube, "/debug/resource-versions")
        if code == 200 and json.loads(body).get("current", {}).get(partition, 0) >= native:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"the proxy did not read {partition} past {native}")


async def _watch(kube: Kube, path: str, until: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as s:
        async with s.get(kube.proxy.server + path, ssl=kube.client_ssl()) as resp:
            assert resp.status == 200, await resp.text()

            async def read() -> None:
                while not until(events):
                    line = await resp.content.readline()
                    assert line, f"the watch ended after {events}"
                    event = json.loads(line)
                    assert event["type"] != "ERROR", event
                    events.append(event)

            await asyncio.wait_for(read(), SECONDS)
    return events


def _configmap(namespace: str, name: str, label: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace, "labels": {"test": label}}}


async def test_a_namespaced_lists_rv_starts_a_watch_of_every_namespace_from_that_moment(kube: Kube, unique: str) -> None:
    label = f"l{unique}"
    mine, other = f"alpha-{unique}", f"nova-{unique}"  # a tp1 tenant, a tp2 tenant
    for namespace in (mine, other):
        kube.kubectl("create", "namespace", namespace)
    kube.create(_configmap(mine, "before", label))
    kube.create(_configmap(other, "before", label))
    before_in_tp2 = int(json.loads(kube.kubectl("get", "configmap", "before", "-n", other, "-o", "json",
                                                kubeconfig=kube.direct("tp2")))["metadata"]["resourceVersion"])
    await _until_the_proxy_has_read(kube, "tp2", before_in_tp2)

    code, body = await _get(kube, f"/api/v1/namespaces/{mine}/configmaps?labelSelector=test%3D{label}")
    assert code == 200, body
    list_rv = json.loads(body)["metadata"]["resourceVersion"]
    assert rvcodec.parse_number(list_rv) is not None and int(list_rv) >= 2**104  # a position of every partition
    code, body = await _get(kube, f"/api/v1/namespaces/{mine}/configmaps?labelSelector=test%3D{label}", accept=PROTOBUF)
    assert code == 200 and int(pb.list_meta_rv(pb.list_items(body)[1])) >= 2**104  # in protobuf too

    kube.create(_configmap(mine, "after", label))
    kube.create(_configmap(other, "after", label))
    events = await _watch(kube, f"/api/v1/configmaps?watch=true&labelSelector=test%3D{label}&resourceVersion={list_rv}",
                          lambda evs: len(evs) >= 2)
    await asyncio.sleep(0.5)
    seen = sorted((e["object"]["metadata"]["namespace"], e["object"]["metadata"]["name"]) for e in events)
    assert seen == sorted([(mine, "after"), (other, "after")]), seen  # nothing from before the list, in either partition
    for event in events:
        assert int(event["object"]["metadata"]["resourceVersion"]) > int(list_rv)  # KEP-5504: every event after the list


async def test_an_objects_rv_starts_a_watch_of_every_partition_too(kube: Kube, unique: str) -> None:
    label = f"o{unique}"
    mine, other = f"alpha-o{unique}", f"nova-o{unique}"
    for namespace in (mine, other):
        kube.kubectl("create", "namespace", namespace)
    kube.create(_configmap(mine, "one", label))
    code, body = await _get(kube, f"/api/v1/namespaces/{mine}/configmaps/one")
    assert code == 200, body
    object_rv = json.loads(body)["metadata"]["resourceVersion"]
    kube.create(_configmap(other, "two", label))
    events = await _watch(kube, f"/api/v1/configmaps?watch=true&labelSelector=test%3D{label}&resourceVersion={object_rv}",
                          lambda evs: any(e["object"]["metadata"]["name"] == "two" for e in evs))
    assert [e["object"]["metadata"]["name"] for e in events] == ["two"]


async def test_a_single_nodes_rv_starts_a_watch_of_the_nodes_cache(kube: Kube, unique: str) -> None:
    # nodes are a watch cache's resource: the cache declines a one-partition RV and the union
    # over the resource partitions serves it from that moment
    first, second = f"rp1-single-{unique}", f"rp2-single-{unique}"
    for name in (first, second):
        kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"test": unique}}})
    code, body = await _get(kube, f"/api/v1/nodes/{first}")
    assert code == 200, body
    node_rv = json.loads(body)["metadata"]["resourceVersion"]
    second_in_rp2 = int(json.loads(kube.kubectl("get", "node", second, "-o", "json", kubeconfig=kube.direct("rp2")))["metadata"]["resourceVersion"])
    await _until_the_proxy_has_read(kube, "rp2", second_in_rp2)
    patch = orjson.dumps({"metadata": {"labels": {"patched": "yes"}}}).decode()
    kube.kubectl("patch", "node", second, "--type", "merge", "-p", patch)
    events = await _watch(kube, f"/api/v1/nodes?watch=true&labelSelector=test%3D{unique}&resourceVersion={node_rv}",
                          lambda evs: any(e["object"]["metadata"]["labels"].get("patched") for e in evs))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("MODIFIED", second)]


async def test_every_page_of_a_paged_namespaced_list_answers_the_first_pages_resource_version(kube: Kube, unique: str) -> None:
    # kube-apiserver answers every page of a paged list with the first page's resourceVersion (the
    # e2e "API chunking should return chunks of results for list calls" checks it); the proxy's
    # vector RV of a one-partition list must not take the other partitions' newer positions,
    # read between two pages
    label = f"p{unique}"
    mine, other = f"alpha-p{unique}", f"nova-p{unique}"
    for namespace in (mine, other):
        kube.kubectl("create", "namespace", namespace)
    for i in range(3):
        kube.create(_configmap(mine, f"c{i}", label))
    path = f"/api/v1/namespaces/{mine}/configmaps?labelSelector=test%3D{label}&limit=1"
    code, body = await _get(kube, path)
    assert code == 200, body
    first = json.loads(body)
    list_rv, token = first["metadata"]["resourceVersion"], first["metadata"]["continue"]
    kube.create(_configmap(other, "moved", label))  # tp2 moves on, and the proxy reads where it is now
    moved = int(json.loads(kube.kubectl("get", "configmap", "moved", "-n", other, "-o", "json",
                                        kubeconfig=kube.direct("tp2")))["metadata"]["resourceVersion"])
    await _until_the_proxy_has_read(kube, "tp2", moved)
    names = [first["items"][0]["metadata"]["name"]]
    while token:
        for accept in (PROTOBUF, "application/json"):
            code, body = await _get(kube, f"{path}&continue={token}", accept=accept)
            assert code == 200, body
            if accept == PROTOBUF:
                assert pb.list_meta_rv(pb.list_items(body)[1]) == list_rv
        page = json.loads(body)
        assert page["metadata"]["resourceVersion"] == list_rv
        names += [item["metadata"]["name"] for item in page["items"]]
        token = page["metadata"].get("continue", "")
    assert names == ["c0", "c1", "c2"]
