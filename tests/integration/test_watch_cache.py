"""Watch caches in front of real partitions: the cached node view equals the partitions' union
at every step, selectors decide cache or upstream, many watchers share one upstream watch."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from typing import Any

import aiohttp

from routing import protobuf as pb
from routing import protobuf_items as pbi
from tests.federation import Kube, node, pod

SECONDS = 20.0


def _union_nodes(kube: Kube) -> dict[str, dict[str, str]]:
    """name -> labels, read from the RPs directly."""
    out: dict[str, dict[str, str]] = {}
    for p in ("rp1", "rp2"):
        for item in json.loads(kube.kubectl("get", "nodes", "-o", "json", kubeconfig=kube.direct(p)))["items"]:
            out[item["metadata"]["name"]] = item["metadata"].get("labels") or {}
    return out


async def _get_json(session: aiohttp.ClientSession, url: str, ctx: ssl.SSLContext, **params: str) -> Any:
    async with session.get(url, params=params, ssl=ctx) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def test_cached_node_list_and_watch_equal_the_union_of_the_partitions_at_every_step(kube: Kube, unique: str) -> None:
    ctx = kube.client_ssl()
    url = f"{kube.proxy.server}/api/v1/nodes"
    before = kube.metric("partition_proxy_requests_total", route="serve-from-cache", partition="nodes", verb="list")
    async with aiohttp.ClientSession() as s:
        listed = await _get_json(s, url, ctx, resourceVersion="0")
        view = {i["metadata"]["name"]: i["metadata"].get("labels") or {} for i in listed["items"]}
        assert view == _union_nodes(kube)
        params = {"watch": "1", "resourceVersion": listed["metadata"]["resourceVersion"], "allowWatchBookmarks": "true"}
        async with s.get(url, params=params, ssl=ctx) as resp:
            assert resp.status == 200

            async def settle() -> None:
                """Apply events until the client's view equals the partitions' union."""
                want = _union_nodes(kube)
                deadline = time.monotonic() + SECONDS
                while view != want:
                    assert time.monotonic() < deadline, (view, want)
                    line = await asyncio.wait_for(resp.content.readline(), SECONDS)
                    event = json.loads(line)
                    meta = event["object"]["metadata"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        view[meta["name"]] = meta.get("labels") or {}
                    elif event["type"] == "DELETED":
                        view.pop(meta["name"], None)

            a, b = f"rp1-step-{unique}", f"rp2-step-{unique}"
            steps = [
                lambda: kube.create(node(a), kubeconfig=kube.direct("rp1")),
                lambda: kube.create(node(b, {"color": "red"})),  # through the proxy, placed on rp2
                lambda: kube.kubectl("label", "node", a, "color=blue"),
                lambda: kube.kubectl("label", "node", b, "color=green", "--overwrite", kubeconfig=kube.direct("rp2")),
                lambda: kube.kubectl("delete", "node", a),
                lambda: kube.kubectl("delete", "node", b, kubeconfig=kube.direct("rp2")),
            ]
            for step in steps:
                step()
                await settle()
                again = await _get_json(s, url, ctx, resourceVersion="0")
                assert {i["metadata"]["name"]: i["metadata"].get("labels") or {} for i in again["items"]} == view
    # Every list above (the first and one per step) was answered by the cache.
    assert kube.metric("partition_proxy_requests_total", route="serve-from-cache", partition="nodes", verb="list") >= before + len(steps) + 1


async def test_narrower_label_selector_is_served_from_cache_and_wider_goes_upstream(kube: Kube, unique: str) -> None:
    ns = f"acme{unique}-c"
    kube.kubectl("create", "namespace", ns)
    critical = pod(ns, "crit", "rp1-x")
    critical["metadata"]["labels"] = {"tier": "critical", "app": unique}  # type: ignore[index]
    plain = pod(ns, "plain", "rp1-x")
    plain["metadata"]["labels"] = {"app": unique}  # type: ignore[index]
    kube.create(critical)
    kube.create(plain)
    ctx = kube.client_ssl()
    url = f"{kube.proxy.server}/api/v1/pods"
    cached = lambda: kube.metric("partition_proxy_requests_total", route="serve-from-cache", partition="critical-pods")  # noqa: E731
    fanned = lambda: kube.metric("partition_proxy_requests_total", route="fan-out", verb="list")  # noqa: E731
    async with aiohttp.ClientSession() as s:
        deadline = time.monotonic() + SECONDS
        while True:  # the cache catches up with the create within milliseconds
            c0, f0 = cached(), fanned()
            narrow = await _get_json(s, url, ctx, resourceVersion="0", labelSelector=f"tier=critical,app={unique}")
            if narrow["items"] or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert [i["metadata"]["name"] for i in narrow["items"]] == ["crit"]
        assert (cached(), fanned()) == (c0 + 1, f0)
        wide = await _get_json(s, url, ctx, resourceVersion="0", labelSelector=f"app={unique}")
        assert sorted(i["metadata"]["name"] for i in wide["items"]) == ["crit", "plain"]
        assert (cached(), fanned()) == (c0 + 1, f0 + 1)


async def _partition_watch_count(kube: Kube, partition: str, resource: str) -> float:
    """Open WATCH requests on the partition's own metrics (apiserver_longrunning_requests)."""
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{kube.fed.partition(partition).server}/metrics", ssl=kube.partition_ssl(partition)) as resp:
            text = await resp.text()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_longrunning_requests{") and 'verb="WATCH"' in line and f'resource="{resource}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_a_thousand_watchers_by_name_cost_one_upstream_watch_per_resource_partition(kube: Kube, unique: str) -> None:
    names = [f"rp{1 + i % 2}-many-{unique}-{i}" for i in range(20)]
    for name in names:
        kube.create(node(name))
    # Each RP already serves two node watches: the reflector's and its own Node authorizer's
    # informer (kube-apiserver watches nodes through its loopback client).
    baseline = {p: await _partition_watch_count(kube, p, "nodes") for p in ("rp1", "rp2")}
    assert baseline == {"rp1": 2, "rp2": 2}
    ctx = kube.client_ssl()
    url = f"{kube.proxy.server}/api/v1/nodes"
    connector = aiohttp.TCPConnector(limit=0, ssl=ctx)
    async with aiohttp.ClientSession(connector=connector) as s:
        listed = await _get_json(s, url, ctx, resourceVersion="0")
        rv = listed["metadata"]["resourceVersion"]
        responses = []
        for i in range(1000):
            name = names[i % len(names)]
            responses.append(
                await s.get(url, params={"watch": "1", "resourceVersion": rv, "fieldSelector": f"metadata.name={name}"})
            )
        try:
            assert all(r.status == 200 for r in responses)
            during = {p: await _partition_watch_count(kube, p, "nodes") for p in ("rp1", "rp2")}
            assert during == baseline, "1,000 client watches added no upstream watch"
            assert kube.metric("partition_proxy_watch_cache_watchers", cache="nodes") >= 1000
            for name in names:
                kube.kubectl("label", "node", name, f"seen={unique}", kubeconfig=kube.direct(name[:3]))

            async def first_event(resp: aiohttp.ClientResponse) -> dict[str, Any]:
                return json.loads(await asyncio.wait_for(resp.content.readline(), SECONDS))

            events = await asyncio.gather(*(first_event(r) for r in responses))
        finally:
            for r in responses:
                r.close()
    for i, event in enumerate(events):
        assert event["type"] == "MODIFIED"
        assert event["object"]["metadata"]["name"] == names[i % len(names)]
        assert event["object"]["metadata"]["labels"]["seen"] == unique


PROTOBUF_FIRST = "application/vnd.kubernetes.protobuf, application/json"  # client-go's Accept for kubelets


async def _read_protobuf(session: aiohttp.ClientSession, url: str, ctx: ssl.SSLContext, **params: str) -> tuple[str, bytes]:
    async with session.get(url, params=params, ssl=ctx, headers={"Accept": PROTOBUF_FIRST}) as resp:
        assert resp.status == 200, await resp.text()
        return resp.headers["Content-Type"], await resp.read()


def _native_rvs(item: bytes, native: str) -> bytes:
    """The item with its own and referenced resourceVersions set back to the partition's."""
    return pb.rewrite_item_rvs(item, lambda _field, _value: native, api_version="v1", kind="Node")


async def test_a_protobuf_first_client_gets_from_the_cache_what_the_partition_answers_in_protobuf(kube: Kube, unique: str) -> None:
    """kube-apiserver answers a client whose Accept starts with protobuf in protobuf; so does the
    node cache, from its protobuf twin (filled once the first such client comes): the same
    objects byte for byte, but for managedFields (stripped) and resourceVersions (translated)."""
    name = f"rp1-pb-{unique}"
    kube.create(node(name, {"zone": "a"}), kubeconfig=kube.direct("rp1"))
    ctx = kube.client_ssl()
    url = f"{kube.proxy.server}/api/v1/nodes"
    twin_lists = lambda: kube.metric("partition_proxy_requests_total", route="serve-from-cache", partition="nodes-protobuf", verb="list")  # noqa: E731
    before = twin_lists()
    async with aiohttp.ClientSession() as s:
        deadline = time.monotonic() + SECONDS
        while True:  # the first protobuf-first request starts filling the twin; JSON until it synced
            content_type, body = await _read_protobuf(s, url, ctx, resourceVersion="0", fieldSelector=f"metadata.name={name}")
            if content_type == "application/vnd.kubernetes.protobuf":
                break
            assert content_type == "application/json" and time.monotonic() < deadline, content_type
            await asyncio.sleep(0.2)
        assert twin_lists() == before + 1
        env, meta, [item] = pb.list_items(body)
        assert (env.api_version, env.kind) == ("v1", "NodeList")
        list_rv = pb.list_meta_rv(meta)
        _type, direct = await _read_protobuf(s, f"{kube.fed.partition('rp1').server}/api/v1/nodes/{name}", kube.partition_ssl("rp1"))
        direct_item = pb.decode_envelope(direct).raw
        native = pb.item_meta(direct_item).resource_version
        assert pb.item_meta(item).resource_version != native  # a proxy RV
        assert _native_rvs(item, native) == pbi.strip_item(direct_item, managed_fields=True, last_applied=True)

        params = {"watch": "1", "resourceVersion": list_rv, "fieldSelector": f"metadata.name={name}"}
        async with s.get(url, params=params, ssl=ctx, headers={"Accept": PROTOBUF_FIRST}) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "application/vnd.kubernetes.protobuf;stream=watch"
            kube.kubectl("label", "node", name, "zone=b", "--overwrite", kubeconfig=kube.direct("rp1"))
            frames = pb.FrameReader()
            while True:
                chunk = await asyncio.wait_for(resp.content.readany(), SECONDS)
                events = [pb.decode_watch_event(f) for f in frames.feed(chunk)]
                if events:
                    break
        [event] = events
        assert event.type == "MODIFIED"
        facts = pbi.item_facts(pb.decode_envelope(event.object).raw, "", "nodes")
        assert (facts.name, facts.labels) == (name, {"zone": "b"})
    kube.kubectl("delete", "node", name, kubeconfig=kube.direct("rp1"))


STREAMING_LIST = {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan", "allowWatchBookmarks": "true"}
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


async def _initial_events(resp: aiohttp.ClientResponse) -> list[dict[str, Any]]:
    """The events of a streaming list (KEP-3157) up to and including its initial-events-end
    bookmark; the stream stays open."""
    assert resp.status == 200, await resp.text()
    events = []
    while True:
        event = json.loads(await asyncio.wait_for(resp.content.readline(), SECONDS))
        events.append(event)
        if event["type"] == "BOOKMARK" and (event["object"]["metadata"].get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
            return events


async def test_a_streaming_list_of_nodes_is_served_from_the_cache_as_the_partitions_stream_it(kube: Kube, unique: str) -> None:
    """sendInitialEvents=true with resourceVersionMatch=NotOlderThan: straight at each RP, the
    RP's nodes as ADDED events, then one bookmark annotated initial-events-end; through the proxy
    the same events over both RPs, from the nodes cache (no upstream watch is opened for it),
    ending with one such bookmark whose RV is the vector of both RPs."""
    for p in ("rp1", "rp2"):
        kube.create(node(f"{p}-streamed-{unique}", {"streamed": unique}), kubeconfig=kube.direct(p))
    ctx = kube.client_ssl()
    url = f"{kube.proxy.server}/api/v1/nodes"
    async with aiohttp.ClientSession() as s:
        direct: dict[str, list[dict[str, Any]]] = {}
        for p in ("rp1", "rp2"):
            async with s.get(f"{kube.fed.partition(p).server}/api/v1/nodes", params=STREAMING_LIST, ssl=kube.partition_ssl(p)) as resp:
                direct[p] = await _initial_events(resp)
        for p, events in direct.items():
            assert [e["type"] for e in events] == ["ADDED"] * (len(events) - 1) + ["BOOKMARK"], p
        want = {e["object"]["metadata"]["name"]: e["object"]["metadata"].get("labels") or {} for p in direct for e in direct[p][:-1]}
        deadline = time.monotonic() + SECONDS
        while {i["metadata"]["name"] for i in (await _get_json(s, url, ctx, resourceVersion="0"))["items"]} != set(want):
            assert time.monotonic() < deadline, "the nodes cache never caught up with the partitions"
            await asyncio.sleep(0.1)

        upstream = {p: await _partition_watch_count(kube, p, "nodes") for p in ("rp1", "rp2")}
        served = kube.metric("partition_proxy_requests_total", route="serve-from-cache", partition="nodes", verb="watch")
        async with s.get(url, params=STREAMING_LIST, ssl=ctx) as resp:
            events = await _initial_events(resp)
            assert {p: await _partition_watch_count(kube, p, "nodes") for p in ("rp1", "rp2")} == upstream, "no upstream watch"
    assert kube.metric("partition_proxy_requests_total", route="serve-from-cache", partition="nodes", verb="watch") == served + 1

    assert [e["type"] for e in events] == ["ADDED"] * (len(events) - 1) + ["BOOKMARK"]
    assert {e["object"]["metadata"]["name"]: e["object"]["metadata"].get("labels") or {} for e in events[:-1]} == want
    bookmark, direct_bookmark = events[-1]["object"], direct["rp1"][-1]["object"]
    assert (bookmark["apiVersion"], bookmark["kind"]) == (direct_bookmark["apiVersion"], direct_bookmark["kind"]) == ("v1", "Node")
    assert bookmark["metadata"]["annotations"] == direct_bookmark["metadata"]["annotations"] == {INITIAL_EVENTS_END: "true"}
    # the bookmark's RV is the vector of both RPs, at or past every object it streamed
    vector = kube.rv_codec(("rp1", "rp2")).decode(bookmark["metadata"]["resourceVersion"])
    for slot, p in enumerate(("rp1", "rp2")):
        assert vector[slot] >= max(int(e["object"]["metadata"]["resourceVersion"]) for e in direct[p][:-1]), (p, vector)
        kube.kubectl("delete", "node", f"{p}-streamed-{unique}", kubeconfig=kube.direct(p))


async def _watch_lines(session: aiohttp.ClientSession, url: str, ctx: ssl.SSLContext, params: dict[str, str]) -> tuple[int, list[dict[str, Any]]]:
    """The status and every line of a watch that ends after its timeoutSeconds."""
    async with session.get(url, params=params, ssl=ctx) as resp:
        if resp.status != 200:
            return resp.status, [await resp.json()]
        return resp.status, [json.loads(line) async for line in resp.content if line.strip()]


async def test_streaming_list_options_kube_apiserver_refuses_or_ignores_are_refused_or_ignored_through_the_cache(kube: Kube, unique: str) -> None:
    """Through the proxy as straight at rp1 (apimachinery validateWatchOptions, cacher
    setInitialEventsEndBookmarkIfRequested): sendInitialEvents without
    resourceVersionMatch=NotOlderThan, or the other way round, is the same 422 Invalid naming
    resourceVersionMatch (the union watch lets the partitions answer it; the nodes cache used
    to serve it); without allowWatchBookmarks=true a streaming list from the cache carries no
    end bookmark."""
    kube.create(node(f"rp1-quiet-{unique}", {"quiet": unique}), kubeconfig=kube.direct("rp1"))
    ctx = kube.client_ssl()
    rp1 = kube.fed.partition("rp1")
    async with aiohttp.ClientSession() as s:
        for params in ({"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true", "timeoutSeconds": "5"},
                       {"watch": "1", "sendInitialEvents": "false", "timeoutSeconds": "5"},
                       {"watch": "1", "resourceVersionMatch": "NotOlderThan", "timeoutSeconds": "5"}):
            through = await _watch_lines(s, f"{kube.proxy.server}/api/v1/nodes", ctx, params)
            direct = await _watch_lines(s, f"{rp1.server}/api/v1/nodes", kube.partition_ssl("rp1"), params)
            assert through[0] == direct[0] == 422, (params, through, direct)
            got, want = through[1][0], direct[1][0]
            assert got == want and want["reason"] == "Invalid", (got, want)
            assert want["details"]["causes"][0]["field"] == "resourceVersionMatch"

        quiet = {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan", "timeoutSeconds": "2"}
        through = await _watch_lines(s, f"{kube.proxy.server}/api/v1/nodes", ctx, quiet)
        direct = await _watch_lines(s, f"{rp1.server}/api/v1/nodes", kube.partition_ssl("rp1"), quiet)
    kube.kubectl("delete", "node", f"rp1-quiet-{unique}", kubeconfig=kube.direct("rp1"))
    assert through[0] == direct[0] == 200
    assert direct[1] and {e["type"] for e in direct[1]} == {"ADDED"}, direct
    assert through[1] and {e["type"] for e in through[1]} == {"ADDED"}, through
