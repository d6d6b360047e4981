"""The kubernetes-asyncio client, unchanged, lists and watches nodes through the proxy."""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client, config, watch

from tests.federation import Kube, node


async def test_kubernetes_asyncio_list_and_watch_nodes_through_the_proxy(kube: Kube, unique: str) -> None:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kube.admin), client_configuration=cfg, persist_config=False)
    async with client.ApiClient(cfg) as api_client:
        core = client.CoreV1Api(api_client)
        listed = await core.list_node()
        names = {n.metadata.name for n in listed.items}
        direct = {
            line.split("/", 1)[1]
            for p in ("rp1", "rp2")
            for line in kube.kubectl("get", "nodes", "-o", "name", kubeconfig=kube.direct(p)).split()
        }
        assert names == direct
        rv = listed.metadata.resource_version
        assert rv.isdigit() and not rv.startswith("0")

        new = {f"rp1-kac-{unique}", f"rp2-kac-{unique}"}
        w = watch.Watch()
        seen: set[str] = set()

        async def consume() -> None:
            async for event in w.stream(core.list_node, resource_version=rv, timeout_seconds=30):
                if event["type"] == "ADDED":
                    seen.add(event["object"].metadata.name)
                if new <= seen:
                    w.stop()

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.5)
        for name in sorted(new):
            kube.create(node(name), kubeconfig=kube.direct(name.split("-", 1)[0]))
        await asyncio.wait_for(task, 20)
        assert new <= seen
