"""An upstream watch broken by a compaction-induced 410 is healed by a relist, and no client
watch served by the cache sees a gap or a duplicate.

A federation of its own (1 TP, 2 RPs) with `--etcd-compaction-interval=5s` and the
kube-apiservers' watch cache off for nodes (`--watch-cache-sizes=nodes#0`), so a node watch
from a compacted resourceVersion reaches etcd and gets 410 Expired. A real toxiproxy sits
between the proxy and each partition: cutting rp2's link stops the reflector while the test
keeps writing to rp2 directly; when the link returns, the reflector resumes from a compacted RV.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from hack.federation import PROXY_ADMINS_GROUP, Federation, find_kubectl
from hack.proxy_process import ProxyProcess
from hack.toxiproxy import ToxiproxyServer
from tests.federation import Kube, node, require_binaries

COMPACTION_SECONDS = 5


@pytest.fixture(scope="module")
def compacting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kube, dict[str, Any]]]:
    require_binaries("toxiproxy-server", "kube-apiserver", "etcd")
    root = tmp_path_factory.mktemp("compacting")
    fed = Federation(
        root / "federation",
        tenant_partitions=1,
        resource_partitions=2,
        etcd_compaction_interval=f"{COMPACTION_SECONDS}s",
        extra_apiserver_flags=["--watch-cache-sizes=nodes#0"],
    )
    toxi = ToxiproxyServer(root / "toxiproxy")
    proxy = None
    try:
        fed.start()
        toxi.start()
        links, kubeconfigs = toxi.route(fed)
        proxy = ProxyProcess(fed, root / "proxy", kubeconfigs=kubeconfigs).start()
        admin = fed.issue_client_kubeconfig("admin", user="admin", groups=[PROXY_ADMINS_GROUP], server=proxy.server)
        yield Kube(fed=fed, proxy=proxy, kubectl_path=find_kubectl(), admin=admin), links
    finally:
        if proxy is not None:
            proxy.stop()
        toxi.stop()
        fed.stop()


async def test_compaction_induced_410_is_healed_by_relist_without_gap_or_duplicate(
    compacting: tuple[Kube, dict[str, Any]],
) -> None:
    kube, links = compacting
    for name in ("rp2-keep", "rp2-relabel", "rp2-gone"):
        kube.create(node(name), kubeconfig=kube.direct("rp2"))
    ctx: ssl.SSLContext = kube.client_ssl()
    url = f"{kube.proxy.server}/api/v1/nodes"
    view: dict[str, dict[str, str]] = {}
    events: list[tuple[str, str, str]] = []

    async with aiohttp.ClientSession() as s:
        deadline = time.monotonic() + 30
        while True:
            async with s.get(url, params={"resourceVersion": "0"}, ssl=ctx) as resp:
                listed = await resp.json()
            view = {i["metadata"]["name"]: i["metadata"].get("labels") or {} for i in listed["items"]}
            if {"rp2-keep", "rp2-relabel", "rp2-gone"} <= view.keys() or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        params = {"watch": "1", "resourceVersion": listed["metadata"]["resourceVersion"]}
        async with s.get(url, params=params, ssl=ctx) as watch:
            assert watch.status == 200

            # Cut the proxy's link to rp2, change rp2 directly, let compaction pass the
            # reflector's resourceVersion, then restore the link.
            links["rp2"].disable()
            kube.create(node("rp2-new"), kubeconfig=kube.direct("rp2"))
            kube.kubectl("label", "node", "rp2-relabel", "after=cut", kubeconfig=kube.direct("rp2"))
            kube.kubectl("delete", "node", "rp2-gone", kubeconfig=kube.direct("rp2"))
            for i in range(3):  # more revisions, spread over compaction intervals
                await asyncio.sleep(COMPACTION_SECONDS)
                kube.kubectl("annotate", "node", "rp2-keep", f"tick={i}", "--overwrite", kubeconfig=kube.direct("rp2"))
            links["rp2"].enable()

            want = {
                i["metadata"]["name"]: i["metadata"].get("labels") or {}
                for p in ("rp1", "rp2")
                for i in json.loads(kube.kubectl("get", "nodes", "-o", "json", kubeconfig=kube.direct(p)))["items"]
            }
            deadline = time.monotonic() + 90
            while view != want:
                assert time.monotonic() < deadline, (view, want)
                line = await asyncio.wait_for(watch.content.readline(), 90)
                event = json.loads(line)
                assert event["type"] != "ERROR", event
                meta = event["object"]["metadata"]
                events.append((event["type"], meta["name"], meta["resourceVersion"]))
                if event["type"] == "DELETED":
                    view.pop(meta["name"], None)
                else:
                    view[meta["name"]] = meta.get("labels") or {}

    assert kube.metric("partition_proxy_watch_cache_relists", cache="nodes", partition="rp2") >= 1
    changed = [(t, n) for t, n, _ in events if n != "rp2-keep"]
    assert sorted(changed) == sorted([("ADDED", "rp2-new"), ("MODIFIED", "rp2-relabel"), ("DELETED", "rp2-gone")])
    assert len(events) == len(set(events)), "no event twice"
    stamps = [int(rv) for _, _, rv in events]
    assert stamps == sorted(stamps), "resourceVersions keep increasing across the relist"
