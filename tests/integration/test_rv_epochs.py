"""Epoch rollovers of vector resourceVersions on real partitions (docs/resource-versions.md): two
replicas share one table in the system partition; with 10-bit fields an epoch lasts ~256 writes,
so a few thousand writes roll over several times while a union watch is open. The watch sees
every event exactly once with strictly increasing RVs, the other replica resumes from any RV of
a retained epoch, and an RV of a dropped epoch answers 410 Expired."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from hack.proxy_process import ProxyProcess
from routing import rv as rvcodec
from tests.federation import Kube, running_federation

SLOT_BITS = 10  # capacity 1023: a new epoch every ~256 writes into one partition
RETAIN = 3  # epochs kept per partition list: the first one is dropped by the end
WRITES = 2000
EXTRA = {"resource_versions": {"slot_bits": SLOT_BITS, "refresh_seconds": 0.3, "retain_epochs": RETAIN}}


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kube, ProxyProcess]]:
    root = tmp_path_factory.mktemp("epochs")
    with running_federation(root, resource_partitions=1, extra=EXTRA) as kube:
        replica = ProxyProcess(kube.fed, root / "proxy-b", extra=EXTRA).start()
        try:
            yield kube, replica
        finally:
            replica.stop()


async def _debug(server: str, ctx: ssl.SSLContext) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s:
        async with s.get(server + "/debug/resource-versions", ssl=ctx) as r:
            return dict(await r.json())


async def _write_configmaps(kube: Kube, namespace: str, count: int) -> None:
    """`count` creates straight to tp1 (not through the proxy), 16 at a time."""
    url = f"{kube.fed.partition('tp1').server}/api/v1/namespaces/{namespace}/configmaps"
    ctx = kube.partition_ssl("tp1")
    sem = asyncio.Semaphore(16)
    async with aiohttp.ClientSession() as s:

        async def one(i: int) -> None:
            async with sem:
                body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}"}}
                async with s.post(url, json=body, ssl=ctx) as r:
                    assert r.status == 201, await r.text()

        await asyncio.gather(*(one(i) for i in range(count)))


async def _watch(server: str, ctx: ssl.SSLContext, rv: str, *, until: int, seconds: float = 60) -> tuple[int, list[tuple[str, str]]]:
    """A union watch of configmaps from `rv`: (HTTP status, [(name, RV)] of the ADDED events of
    namespace acme-epochs) until `until` of them arrived."""
    events: list[tuple[str, str]] = []
    params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": str(int(seconds))}
    async with aiohttp.ClientSession() as s:
        async with s.get(server + "/api/v1/configmaps", params=params, ssl=ctx) as r:
            if r.status != 200:
                return r.status, []
            async for line in r.content:
                event = json.loads(line)
                if event["type"] == "ERROR":
                    return event["object"]["code"], events
                meta = event["object"]["metadata"]
                if event["type"] == "ADDED" and meta.get("namespace") == "acme-epochs":
                    events.append((meta["name"], meta["resourceVersion"]))
                    if len(events) >= until:
                        break
    return 200, events


async def test_rvs_strictly_increase_across_epoch_rollovers_and_every_replica_decodes_them(kube: tuple[Kube, ProxyProcess]) -> None:
    k, replica = kube
    ctx = k.client_ssl()
    k.kubectl("create", "namespace", "acme-epochs")
    async with aiohttp.ClientSession() as s:
        async with s.get(k.proxy.server + "/api/v1/configmaps", ssl=ctx) as r:
            start_rv = (await r.json())["metadata"]["resourceVersion"]
    first_epoch = (await _debug(k.proxy.server, ctx))["newestEpoch"]

    watch = asyncio.create_task(_watch(k.proxy.server, ctx, start_rv, until=WRITES))
    await asyncio.sleep(0.5)
    await _write_configmaps(k, "acme-epochs", WRITES)
    code, events = await watch

    assert code == 200 and len(events) == WRITES
    assert sorted(name for name, _ in events) == sorted(f"c{i}" for i in range(WRITES))  # each exactly once
    rvs = [rv for _, rv in events]
    assert all(rvcodec.compare(b, a) == 1 for a, b in zip(rvs, rvs[1:]))
    assert all(rvcodec.is_valid_rv(rv) and int(rv).bit_length() <= 128 for rv in rvs)
    a, b = await _debug(k.proxy.server, ctx), await _debug(replica.server, ctx)
    assert a["newestEpoch"] >= first_epoch + RETAIN, a  # rolled over (more than RETAIN epochs)...
    epochs = {int(rv) >> 104 for rv in rvs}
    assert len(epochs) >= 2, epochs  # ...under the open watch
    await asyncio.sleep(1)
    b = await _debug(replica.server, ctx)
    assert b["newestEpoch"] == (await _debug(k.proxy.server, ctx))["newestEpoch"]  # one shared table

    # The other replica resumes from an RV of a retained epoch: the events after it, once each.
    newest = int(rvs[-1]) >> 104  # only tenant-space epochs are published here: numbers are consecutive
    # retained: the newest RETAIN epochs. Not only the last two: when both replicas publish at
    # once, an epoch may carry no event at all (a CI run's last event was alone in its epoch, and
    # none was in the one before).
    candidates = [rv for rv in rvs[:-1] if (int(rv) >> 104) > newest - RETAIN]
    assert candidates, sorted(epochs)
    middle = candidates[len(candidates) // 2]
    rest = rvs[rvs.index(middle) + 1 :]
    code, resumed = await _watch(replica.server, ctx, middle, until=len(rest), seconds=30)
    assert code == 200 and [name for name, _ in resumed] == [name for name, _ in events[rvs.index(middle) + 1 :]]

    # An RV of an epoch the table dropped is too old: 410 Expired, the client relists.
    code, _ = await _watch(replica.server, ctx, start_rv, until=1, seconds=5)
    assert code == 410
