"""A partition cut by a real toxiproxy until its circuit breaker opens, then restored, is served
again within `breaker_open_seconds` + 1 s whichever path makes the half-open trial: a forwarded
request, a union list, a union watch, or a reflector of a watch cache.

Two proxies in front of the same toxiproxy links (2 TPs, 1 RP; tp2 is the one cut): proxy A
has no cache over the tenant partitions, so only the request each test sends can be tp2's
trial; proxy B has one (pods labelled tier=critical), and no request is sent to it while tp2
recovers, so its reflector makes the trial. Both read the resourceVersion table once at start
(`refresh_seconds` is 5 min, the most allowed), so its loop does not probe tp2 during a test.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest

from hack.federation import PROXY_ADMINS_GROUP, Federation, find_kubectl
from hack.proxy_process import ProxyProcess
from hack.toxiproxy import ToxiproxyServer
from tests.federation import Kube, pod, proxy_request, require_binaries, until

OPEN_SECONDS = 2.0  # failure.breaker_open_seconds
FAILURES = 2  # failure.breaker_failures
EXTRA = {
    "failure": {"breaker_open_seconds": OPEN_SECONDS, "breaker_failures": FAILURES},
    "upstream": {"connect_timeout_seconds": 1, "request_timeout_seconds": 5},
    "resource_versions": {"refresh_seconds": 300},
}
CRITICAL = [{"name": "critical-pods", "resource": "pods", "role": "tenant", "label_selector": "tier=critical"}]


@dataclass
class Env:
    kube: Kube  # through proxy A
    proxy_b: ProxyProcess
    links: dict[str, Any]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    require_binaries("toxiproxy-server", "kube-apiserver", "etcd")
    root = tmp_path_factory.mktemp("breaker")
    fed = Federation(root / "federation", tenant_partitions=2, resource_partitions=1)
    toxi = ToxiproxyServer(root / "toxiproxy")
    proxies: list[ProxyProcess] = []
    try:
        fed.start()
        toxi.start()
        links, kubeconfigs = toxi.route(fed)
        caches_a = [{"name": "nodes", "resource": "nodes", "role": "resource"}]
        proxies.append(ProxyProcess(fed, root / "proxy-a", kubeconfigs=kubeconfigs, caches=caches_a, extra=EXTRA).start())
        proxies.append(ProxyProcess(fed, root / "proxy-b", kubeconfigs=kubeconfigs, caches=caches_a + CRITICAL, extra=EXTRA).start())
        admin = fed.issue_client_kubeconfig("admin", user="admin", groups=[PROXY_ADMINS_GROUP], server=proxies[0].server)
        yield Env(Kube(fed=fed, proxy=proxies[0], kubectl_path=find_kubectl(), admin=admin), proxies[1], links)
    finally:
        for p in proxies:
            p.stop()
        toxi.stop()
        fed.stop()


async def _request(env: Env, method: str, path: str, *, server: str | None = None, body: Any = None) -> tuple[int, dict[str, Any]]:
    code, doc, _ = await proxy_request(env.kube, method, path, body=body, server=server)
    return code, doc


async def _readyz(server: str, env: Env) -> str:
    async with aiohttp.ClientSession() as s:
        async with s.get(server + "/readyz?verbose", ssl=env.kube.client_ssl()) as r:
            return await r.text()


async def _cut_until_marked_down(env: Env, namespace: str) -> None:
    """tp2's link disabled; requests through proxy A until its breaker answers `marked down`."""
    env.links["tp2"].disable()
    for _ in range(FAILURES + 4):
        code, doc = await _request(env, "GET", f"/api/v1/namespaces/{namespace}/configmaps")
        assert code == 503, doc
        if "marked down" in doc.get("message", ""):
            return
    raise AssertionError(f"tp2 never marked down: {doc}")


async def _served_within(env: Env, namespace: str, since: float, bound: float) -> float:
    """Seconds from `since` until a tp2 request through proxy A answers 200 (fails past `bound`)."""
    while True:
        code, doc = await _request(env, "GET", f"/api/v1/namespaces/{namespace}/configmaps")
        if code == 200:
            return time.monotonic() - since
        assert time.monotonic() - since <= bound, f"tp2 still refused: {code} {doc}"
        await asyncio.sleep(0.1)


def _tp2_namespace(env: Env, unique: str) -> str:
    namespace = f"zulu-{unique}"  # tenants n..z live in tp2
    env.kube.kubectl("create", "namespace", namespace)
    return namespace


@pytest.mark.parametrize(
    ("trial", "path"),
    [
        ("forward", "/api/v1/namespaces/{ns}/configmaps"),
        ("union list", "/api/v1/configmaps"),
        ("union watch", "/api/v1/pods?watch=1&timeoutSeconds=1"),
    ],
)
async def test_a_client_request_as_the_half_open_trial_serves_the_partition_again(env: Env, unique: str, trial: str, path: str) -> None:
    namespace = _tp2_namespace(env, unique)
    await _cut_until_marked_down(env, namespace)
    env.links["tp2"].enable()
    await asyncio.sleep(OPEN_SECONDS + 0.2)
    trial_at = time.monotonic()
    code, doc = await _request(env, "GET", path.format(ns=namespace))  # the first request tp2 sees: the trial
    assert code == 200, (trial, doc)
    assert await _served_within(env, namespace, trial_at, OPEN_SECONDS + 1) <= OPEN_SECONDS + 1
    assert "partition tp2: up" in await _readyz(env.kube.proxy.server, env)


async def test_a_reflector_as_the_half_open_trial_serves_the_partition_again(env: Env, unique: str) -> None:
    namespace = _tp2_namespace(env, unique)
    server_b = env.proxy_b.server
    env.links["tp2"].disable()  # proxy B's tp2 reflector breaks, fails to reopen, and opens the breaker
    deadline = time.monotonic() + 30
    while "partition tp2: marked down" not in await _readyz(server_b, env):
        assert time.monotonic() < deadline, "proxy B never marked tp2 down"
        await asyncio.sleep(0.2)
    env.links["tp2"].enable()
    restored = time.monotonic()
    # No request goes to proxy B: only its reflector can make tp2's trial.
    while "partition tp2: up" not in await _readyz(server_b, env):
        # the reflector retries as the window ends (+ up to 0.2 s of jitter): its trial settles it
        assert time.monotonic() - restored <= OPEN_SECONDS + 1, "proxy B still has tp2 marked down"
        await asyncio.sleep(0.1)
    # ... and the reflector is watching again: a new critical pod reaches proxy B's cache.
    critical = pod(namespace, "c", "rp1-node")
    critical["metadata"] = {"name": "c", "namespace": namespace, "labels": {"tier": "critical"}}
    code, doc = await _request(env, "POST", f"/api/v1/namespaces/{namespace}/pods", body=critical)  # through proxy A
    assert code == 201, doc
    deadline = time.monotonic() + 15
    while True:
        code, doc = await _request(env, "GET", "/api/v1/pods?labelSelector=tier%3Dcritical&resourceVersion=0", server=server_b)
        if code == 200 and any(i["metadata"]["namespace"] == namespace for i in doc.get("items", ())):
            break
        assert time.monotonic() < deadline, f"proxy B's cache never saw the pod: {code}"
        await asyncio.sleep(0.2)


async def test_a_union_watch_opened_while_a_partition_is_cut_serves_the_others_and_resumes_it(env: Env, unique: str) -> None:
    """tp2's link is cut when a union watch of configmaps opens: the watch answers 200 with a
    Warning naming tp2 and streams tp1's events; once the link is back, tp2's events follow on
    the same stream, from the client's position in tp2 (nothing lost, nothing twice)."""
    tp1_ns, tp2_ns = f"alpha-{unique}", _tp2_namespace(env, unique)
    env.kube.kubectl("create", "namespace", tp1_ns)
    code, listed = await _request(env, "GET", "/api/v1/configmaps?limit=1")
    assert code == 200
    await _cut_until_marked_down(env, tp2_ns)
    seen: list[tuple[str, str, str]] = []
    try:
        async with aiohttp.ClientSession() as s:
            params = {"watch": "1", "resourceVersion": listed["metadata"]["resourceVersion"], "allowWatchBookmarks": "true"}
            async with s.get(env.kube.proxy.server + "/api/v1/configmaps", params=params, ssl=env.kube.client_ssl()) as r:
                assert r.status == 200, await r.text()
                assert any("partition tp2 is unavailable" in w for w in r.headers.getall("Warning", [])), r.headers

                async def read() -> None:
                    async for line in r.content:
                        event = orjson.loads(line)
                        meta = event["object"].get("metadata") or {}
                        if event["type"] != "BOOKMARK":
                            seen.append((event["type"], meta.get("namespace", ""), meta.get("name", "")))

                reader = asyncio.create_task(read())
                try:
                    env.kube.kubectl("create", "configmap", "during", "-n", tp1_ns)
                    await until(lambda: ("ADDED", tp1_ns, "during") in seen, 15, f"tp1's event while tp2 is cut: {seen}")
                    # written while the link is cut: straight into tp2, past the client's position
                    env.kube.kubectl("create", "configmap", "meanwhile", "-n", tp2_ns, kubeconfig=env.kube.direct("tp2"))
                    env.links["tp2"].enable()
                    await until(lambda: ("ADDED", tp2_ns, "meanwhile") in seen, OPEN_SECONDS + 15, f"tp2's event once back: {seen}")
                    env.kube.kubectl("create", "configmap", "after", "-n", tp2_ns)
                    await until(lambda: ("ADDED", tp2_ns, "after") in seen, 15, f"tp2's next event: {seen}")
                    assert not reader.done()  # the same stream, never closed
                finally:
                    reader.cancel()
    finally:
        env.links["tp2"].enable()
    mine = [e for e in seen if e[1] in (tp1_ns, tp2_ns)]
    assert mine == [("ADDED", tp1_ns, "during"), ("ADDED", tp2_ns, "meanwhile"), ("ADDED", tp2_ns, "after")], seen

