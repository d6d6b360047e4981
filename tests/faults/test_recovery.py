"""A partition that recovers is served again within breaker_open_seconds + 1 s, whichever request
makes the half-open trial (its kube-apiserver really stopped and started again).

The defect this guards against: the union watch opened its upstream watches after the breaker
let it through as the half-open trial and never reported the outcome, so the trial stayed taken
and every later request of the partition got 503 for good, while /readyz said it was up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.federation import Kube, proxy_request, running_federation

OPEN_SECONDS = 2.0  # failure.breaker_open_seconds of this module's proxy
FAILURES = 2  # failure.breaker_failures


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    extra = {"failure": {"breaker_open_seconds": OPEN_SECONDS, "breaker_failures": FAILURES},
             "upstream": {"connect_timeout_seconds": 1, "request_timeout_seconds": 5}}
    with running_federation(tmp_path_factory.mktemp("recovery"), resource_partitions=1, extra=extra) as kube:
        yield kube


async def _request(kube: Kube, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    return await proxy_request(kube, method, path, body=body)


async def _cut_tp2_until_marked_down(kube: Kube, namespace: str) -> None:
    kube.fed.stop_apiserver("tp2")
    for _ in range(FAILURES + 3):
        code, doc, headers = await _request(kube, "GET", f"/api/v1/namespaces/{namespace}/configmaps")
        assert code == 503, doc
        assert headers["Retry-After"].isdigit()
    assert "marked down" in doc["message"], doc


async def _served_again_within(kube: Kube, namespace: str, deadline: float) -> float:
    """Seconds after the breaker's window until a tp2 request answers 200 (fails past deadline)."""
    while True:
        code, doc, _ = await _request(kube, "GET", f"/api/v1/namespaces/{namespace}/configmaps")
        if code == 200:
            return time.monotonic()
        assert time.monotonic() < deadline, f"tp2 still refused: {code} {doc}"
        await asyncio.sleep(0.1)


async def test_a_partition_marked_down_shows_in_the_metrics_until_it_is_served_again(kube: Kube, unique: str) -> None:
    namespace = f"xray-{unique}"  # a tp2 tenant
    kube.kubectl("create", "namespace", namespace)
    assert kube.metric("partition_proxy_partition_available", partition="tp2") == 1
    assert kube.metric("partition_proxy_resource_version_table_age_seconds") < 30  # read every refresh_seconds
    await _cut_tp2_until_marked_down(kube, namespace)
    try:
        assert kube.metric("partition_proxy_partition_available", partition="tp2") == 0
        assert kube.metric("partition_proxy_partition_available", partition="tp1") == 1
    finally:
        kube.fed.start_apiserver("tp2")
    await asyncio.sleep(OPEN_SECONDS + 0.2)
    await _served_again_within(kube, namespace, time.monotonic() + OPEN_SECONDS + 5)
    assert kube.metric("partition_proxy_partition_available", partition="tp2") == 1


async def test_a_partition_down_fails_verbose_health_with_a_check_of_its_own_and_leaves_the_probes_alone(kube: Kube) -> None:
    kube.fed.stop_apiserver("tp2")
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(kube.proxy.server + "/livez?verbose", ssl=kube.client_ssl()) as r:
                code, body = r.status, await r.text()
        assert code == 500 and "[-]partition/tp2 failed: reason withheld" in body and body.endswith("livez check failed\n"), body
        assert "[+]etcd ok" in body  # the other partitions' checks still pass
        assert (await _request(kube, "GET", "/livez"))[0] == 200  # a probe: the process serves
        assert "partition tp2: " in await _readyz(kube)
    finally:
        kube.fed.start_apiserver("tp2")


async def test_a_union_watch_as_the_half_open_trial_does_not_cut_the_partition_off(kube: Kube, unique: str) -> None:
    namespace = f"zulu-{unique}"  # a tp2 tenant
    kube.kubectl("create", "namespace", namespace)
    await _cut_tp2_until_marked_down(kube, namespace)

    kube.fed.start_apiserver("tp2")
    await asyncio.sleep(OPEN_SECONDS + 0.2)
    # What every informer does after its watch broke: the first request is a union watch.
    code, _, _ = await _request(kube, "GET", "/api/v1/pods?watch=1&timeoutSeconds=1")
    assert code == 200
    opened = time.monotonic()  # the watch ended: the trial it made must have been settled
    served = await _served_again_within(kube, namespace, opened + OPEN_SECONDS + 1)
    assert served - opened <= OPEN_SECONDS + 1
    assert "partition tp2: up" in await _readyz(kube)


async def test_a_forward_refused_for_its_resource_version_as_the_half_open_trial_does_not_cut_it_off(kube: Kube, unique: str) -> None:
    namespace = f"yankee-{unique}"
    kube.kubectl("create", "namespace", namespace)
    kube.kubectl("create", "configmap", "c", "-n", namespace)
    code, current, _ = await _request(kube, "GET", f"/api/v1/namespaces/{namespace}/configmaps/c")
    assert code == 200
    await _cut_tp2_until_marked_down(kube, namespace)

    kube.fed.start_apiserver("tp2")
    await asyncio.sleep(OPEN_SECONDS + 0.2)
    opened = time.monotonic()
    old_format = "10010000000000000000059200000000000000000589"  # a 143-bit RV of the old encoding
    code, doc, _ = await _request(kube, "GET", f"/api/v1/namespaces/{namespace}/configmaps?watch=1&resourceVersion={old_format}")
    assert (code, doc.get("reason")) == (410, "Expired"), doc
    stale = dict(current, metadata=dict(current["metadata"], resourceVersion="2"))  # a stale native RV
    code, doc, _ = await _request(kube, "PUT", f"/api/v1/namespaces/{namespace}/configmaps/c", stale)
    assert (code, doc.get("reason")) == (409, "Conflict"), doc
    served = await _served_again_within(kube, namespace, opened + OPEN_SECONDS + 1)
    assert served - opened <= OPEN_SECONDS + 1


async def _readyz(kube: Kube) -> str:
    async with aiohttp.ClientSession() as s:
        async with s.get(kube.proxy.server + "/readyz?verbose", ssl=kube.client_ssl()) as r:
            return await r.text()
