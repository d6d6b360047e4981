"""A partition that recovers is served again within breaker_open_seconds + 1 s, whichever request
makes the half-open trial (its kube-apiserver really stopped and started again).

The defect this guards against: the union watch opened its upstream watches after the breaker
let it through as the half-open trial and never reported the outcome, so the trial stayed taken
and every later request of the partition got 503 for good, while /readyz said it was up.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hack.federation import PROXY_ADMINS_GROUP
from hack.proxy_process import ProxyProcess
from tests.federation import Kube, proxy_request, running_federation

OPEN_SECONDS = 2.0  # failure.breaker_open_seconds of this module's proxy
QUICK_OPEN_SECONDS = 0.05  # the same, of the proxy a restart test reads through
# its failures in a row: its breaker opens during the restart, or (a large count) never does,
# as when a kill is shorter than the gap between two requests (kubelets renewing in phase)
QUICK_FAILURES = (1, 1000)
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


@pytest.mark.parametrize("failures", QUICK_FAILURES)
async def test_a_restarted_partition_gets_no_request_before_its_readyz_passes(kube: Kube, unique: str, tmp_path: Path, failures: int) -> None:
    """A kube-apiserver listens before it is ready, and until its RBAC informers synced it
    refuses with 403 whatever the proxy impersonates (the proxy's permission to impersonate is
    an RBAC binding). Reads made all through tp2's restart: through the proxy they are answered
    503 (marked down, with Retry-After) or served, never 403; the same reads straight at tp2 with
    the proxy's own credential and impersonation headers are the reference (they show what the
    proxy would have passed on, and that the reads spanned the start-up). The not-ready window
    lasts ~0.1 s on a quiet machine, so the proxy read through is one whose breaker lets a trial
    through every QUICK_OPEN_SECONDS (without its /readyz probe, such trials land in the window);
    with `failures` 1000 it never opens, and the refused connections alone make the next request
    ask /readyz first."""
    namespace = f"whiskey-{unique}"  # a tp2 tenant
    kube.kubectl("create", "namespace", namespace)
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    tp2 = kube.fed.partition("tp2")
    quick = ProxyProcess(kube.fed, tmp_path / "quick-breaker", extra={
        "failure": {"breaker_open_seconds": QUICK_OPEN_SECONDS, "breaker_failures": failures},
        "upstream": {"connect_timeout_seconds": 1, "request_timeout_seconds": 5}}).start()
    direct_ssl = ssl.create_default_context(cafile=str(kube.fed.ca_file))
    direct_ssl.load_cert_chain(*map(str, tp2.proxy_cert))
    impersonation = {"Impersonate-User": "admin", "Impersonate-Group": PROXY_ADMINS_GROUP}
    through: collections.Counter[int] = collections.Counter()
    direct: collections.Counter[int | str] = collections.Counter()
    forbidden_through: list[str] = []
    await _cut_tp2_until_marked_down(kube, namespace)
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as proxy_session, aiohttp.ClientSession(timeout=timeout) as direct_session:
        proxy_ssl = kube.client_ssl()

        via_proxy = _proxy_reader(proxy_session, quick.server + path, proxy_ssl, forbidden_through)

        async def straight() -> int | str:
            try:
                async with direct_session.get(tp2.server + path, ssl=direct_ssl, headers=impersonation) as r:
                    await r.read()
                    return r.status
            except aiohttp.ClientConnectionError:
                return "refused"

        for _ in range(3):  # answered 503 by the quick proxy too (tp2 refuses its connections)
            assert await via_proxy() == 503
        kube.fed.start_apiserver("tp2", wait=False)
        async def both() -> int:
            code, straight_code = await asyncio.gather(via_proxy(), straight())
            direct[straight_code] += 1
            return code

        try:
            await _read_until_served(both, through, linger=2 * OPEN_SECONDS, period=0.02)
        finally:
            kube.fed.wait_apiserver_ready("tp2")
            quick.stop()
    print(f"through the proxy: {dict(through)}; straight at tp2 with the proxy's credential: {dict(direct)}")
    assert not forbidden_through, forbidden_through[:3]
    assert set(through) <= {200, 503}, dict(through)
    assert direct["refused"] > 0 and direct[200] > 0, dict(direct)  # the reads spanned the start-up


async def test_a_partition_killed_between_two_requests_gets_none_before_its_readyz_passes(kube: Kube, unique: str, tmp_path: Path) -> None:
    """tp2's kube-apiserver killed and started again while nothing was sent to it: no request
    of the proxy failed (kubelets renewing in phase, a watch whose reflector comes back only
    after the restart), and its breaker (1,000 failures to open) never opened. The proxy learns
    of the restart only from its connections, which the kill closed: the first read through it
    once the new kube-apiserver accepts connections, in the instants in which that one still
    refuses what the proxy impersonates, is answered 503 or 200, never 403. The soak's fleets
    got 403s there from a replica's worker that had seen no failure (docs/benchmarks.md, "403s
    after a partition's restart")."""
    namespace = f"whiskey-{unique}"  # a tp2 tenant
    kube.kubectl("create", "namespace", namespace)
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    tp2 = kube.fed.partition("tp2")
    quick = ProxyProcess(kube.fed, tmp_path / "quiet-breaker", extra={
        "failure": {"breaker_open_seconds": QUICK_OPEN_SECONDS, "breaker_failures": 1000},
        "upstream": {"connect_timeout_seconds": 1, "request_timeout_seconds": 5}}).start()
    through: collections.Counter[int] = collections.Counter()
    forbidden: list[str] = []
    timeout = aiohttp.ClientTimeout(total=10)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            via_proxy = _proxy_reader(session, quick.server + path, kube.client_ssl(), forbidden)
            for _ in range(3):  # the proxy holds pooled connections to tp2
                assert await via_proxy() == 200
            kube.fed.kill_apiserver("tp2")
            await asyncio.sleep(0.5)  # nothing sent meanwhile: the kill only closed connections
            kube.fed.start_apiserver("tp2", wait=False)
            host, port = tp2.server.removeprefix("https://").rsplit(":", 1)
            deadline = time.monotonic() + 60
            while True:  # until the new kube-apiserver accepts connections: nothing sent before
                assert time.monotonic() < deadline, "tp2 never listened again"
                try:
                    _, writer = await asyncio.open_connection(host, int(port))
                    writer.close()
                    break
                except OSError:
                    await asyncio.sleep(0.005)
            await _read_until_served(via_proxy, through, linger=1.0, period=0.01)
    finally:
        kube.fed.wait_apiserver_ready("tp2")
        quick.stop()
    print(f"through the proxy after tp2 listened again: {dict(through)}")
    assert not forbidden, forbidden[:3]
    assert set(through) <= {200, 503}, dict(through)


def _proxy_reader(session: aiohttp.ClientSession, url: str, ssl_context: ssl.SSLContext,
                  forbidden: list[str]) -> Callable[[], Awaitable[int]]:
    """A GET of `url`: its status; the body of each 403 goes to `forbidden`."""

    async def read() -> int:
        async with session.get(url, ssl=ssl_context) as r:
            body = await r.text()
            if r.status == 403:
                forbidden.append(body)
            return r.status

    return read


async def _read_until_served(read: Callable[[], Awaitable[int]], through: collections.Counter[int], *, linger: float,
                             period: float) -> None:
    """`read` (a read through the proxy: its status, counted in `through`) every `period`
    seconds until it answers 200, then `linger` seconds more. Fails after 60 s."""
    served_since: float | None = None
    deadline = time.monotonic() + 60
    while served_since is None or time.monotonic() < served_since + linger:
        assert time.monotonic() < deadline, f"tp2 not served through the proxy within 60 s: {dict(through)}"
        code = await read()
        through[code] += 1
        if code == 200 and served_since is None:
            served_since = time.monotonic()
        await asyncio.sleep(period)


async def _readyz(kube: Kube) -> str:
    async with aiohttp.ClientSession() as s:
        async with s.get(kube.proxy.server + "/readyz?verbose", ssl=kube.client_ssl()) as r:
            return await r.text()
