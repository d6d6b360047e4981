"""Faults between the proxy and a partition, injected by a real toxiproxy: the proxy keeps
working and no client loses or repeats an event.

A federation of its own (2 TPs, 1 RP), every partition link of the proxy through toxiproxy.
For each fault a client holds a union pod watch across both TPs through the proxy, resuming
from its last resourceVersion whenever its stream ends (as a reflector does), while writes land
in both TPs. The checker compares the events the client received, per partition, with that
partition's own watch history from the same starting point: zero lost, zero duplicated, and
the final state equal. Writes sent through the proxy during a fault are either acknowledged
and present, or failed with a Status.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hack.federation import PROXY_ADMINS_GROUP, Federation, find_kubectl
from hack.proxy_process import ProxyProcess
from hack.toxiproxy import ToxiproxyServer
from tests.federation import Kube, pod, require_binaries

REPORT = Path(__file__).resolve().parents[2] / ".local" / "faults.json"
RESULTS: list[dict[str, Any]] = []
WRITES_PER_PARTITION = 8


@dataclass
class Env:
    kube: Kube
    links: dict[str, Any]
    replica_b: ProxyProcess
    toxi: ToxiproxyServer | None = None
    kubeconfigs: dict[str, Path] = field(default_factory=dict)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    require_binaries("toxiproxy-server", "kube-apiserver", "etcd")
    root = tmp_path_factory.mktemp("faults")
    fed = Federation(root / "federation", tenant_partitions=2, resource_partitions=1)
    toxi = ToxiproxyServer(root / "toxiproxy")
    proxies: list[ProxyProcess] = []
    extra = {"failure": {"breaker_open_seconds": 1.0}}
    try:
        fed.start()
        toxi.start()
        links, kubeconfigs = toxi.route(fed)
        proxies.append(ProxyProcess(fed, root / "proxy-a", kubeconfigs=kubeconfigs, extra=extra).start())
        proxies.append(ProxyProcess(fed, root / "proxy-b", kubeconfigs=kubeconfigs, extra=extra).start())
        admin = fed.issue_client_kubeconfig("admin", user="admin", groups=[PROXY_ADMINS_GROUP], server=proxies[0].server)
        kube = Kube(fed=fed, proxy=proxies[0], kubectl_path=find_kubectl(), admin=admin)
        yield Env(kube, links, proxies[1], toxi, kubeconfigs)
    finally:
        for p in proxies:
            p.stop()
        toxi.stop()
        fed.stop()
        REPORT.parent.mkdir(parents=True, exist_ok=True)
        REPORT.write_text(json.dumps(RESULTS, indent=2))


@dataclass
class WatchClient:
    """A union pod watch that resumes from its last RV, like a reflector; `servers` are tried in
    turn when one refuses (the replica failover case)."""

    servers: list[str]
    ssl: Any
    namespaces: set[str]
    rv: str
    events: list[tuple[str, str, str, str]] = field(default_factory=list)  # (type, ns, name, RV)
    reconnects: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    last_event_at: float = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        turn = 0
        async with aiohttp.ClientSession() as s:
            while not stop.is_set():
                server = self.servers[turn % len(self.servers)]
                params = {"watch": "1", "resourceVersion": self.rv, "allowWatchBookmarks": "true", "timeoutSeconds": "30"}
                try:
                    async with s.get(f"{server}/api/v1/pods", params=params, ssl=self.ssl) as resp:
                        if resp.status != 200:
                            self.errors.append({"status": resp.status, "body": (await resp.text())[:200]})
                            await asyncio.sleep(0.3)
                            continue
                        async for line in _lines(resp, stop):
                            event = json.loads(line)
                            obj = event["object"]
                            if event["type"] == "ERROR":
                                self.errors.append(obj)
                                break
                            self.rv = obj["metadata"]["resourceVersion"]
                            if event["type"] != "BOOKMARK" and obj["metadata"].get("namespace") in self.namespaces:
                                meta = obj["metadata"]
                                self.events.append((event["type"], meta["namespace"], meta["name"], self.rv))
                                self.last_event_at = time.monotonic()
                except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
                    turn += 1
                    await asyncio.sleep(0.2)
                self.reconnects += 1


async def _lines(resp: aiohttp.ClientResponse, stop: asyncio.Event) -> AsyncIterator[bytes]:
    while not stop.is_set():
        try:
            line = await asyncio.wait_for(resp.content.readline(), 0.5)
        except asyncio.TimeoutError:
            continue
        if not line:
            return
        yield line


async def _partition_history(kube: Kube, partition: str, namespace: str, native_rv: int) -> list[tuple[str, str, int]]:
    """The partition's own events for `namespace` after `native_rv`: (type, name, native RV)."""
    url = f"{kube.fed.partition(partition).server}/api/v1/namespaces/{namespace}/pods"
    params = {"watch": "1", "resourceVersion": str(native_rv), "timeoutSeconds": "2"}
    async with aiohttp.ClientSession() as s:
        async with s.get(url, params=params, ssl=kube.partition_ssl(partition)) as resp:
            assert resp.status == 200, await resp.text()
            events = [json.loads(line) async for line in resp.content if line.strip()]
    return [(e["type"], e["object"]["metadata"]["name"], int(e["object"]["metadata"]["resourceVersion"])) for e in events]


async def _write(kube: Kube, partition: str, namespace: str, i: int) -> None:
    """Direct writes on a partition: create, then relabel, then delete some."""
    base = f"{kube.fed.partition(partition).server}/api/v1/namespaces/{namespace}/pods"
    ctx = kube.partition_ssl(partition)
    async with aiohttp.ClientSession() as s:
        async with s.post(base, json=pod(namespace, f"p{i}", "rp1-x"), ssl=ctx) as r:
            assert r.status == 201, await r.text()
        if i % 2 == 0:
            patch = json.dumps({"metadata": {"labels": {"step": str(i)}}})
            headers = {"Content-Type": "application/merge-patch+json"}
            async with s.patch(f"{base}/p{i}", data=patch, headers=headers, ssl=ctx) as r:
                assert r.status == 200, await r.text()
        if i % 3 == 0:
            async with s.delete(f"{base}/p{i}", params={"gracePeriodSeconds": "0"}, ssl=ctx) as r:
                assert r.status == 200, await r.text()


async def _write_through_proxy(kube: Kube, server: str, namespace: str, i: int) -> str:
    """A write through the proxy: 'acked' (and present on its partition) or 'failed' with a Status."""
    async with aiohttp.ClientSession() as s:
        try:
            async with s.post(
                f"{server}/api/v1/namespaces/{namespace}/configmaps",
                json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm{i}"}},
                ssl=kube.client_ssl(),
                timeout=aiohttp.ClientTimeout(total=90),
            ) as r:
                body = await r.json(content_type=None)
                if r.status == 201:
                    return "acked"
                assert body["kind"] == "Status" and body["code"] == r.status, body
                return "failed"
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise AssertionError(f"a write through the proxy got no answer: {exc!r}") from None


async def _run_fault(
    env: Env,
    name: str,
    fault: Callable[[], Awaitable[None]],
    *,
    servers: list[str] | None = None,
) -> dict[str, Any]:
    kube = env.kube
    unique = f"{name.replace(' ', '')[:8]}{int(time.time() * 1000) % 100000}"
    ns = {"tp1": f"acme{unique}", "tp2": f"zoo{unique}"}
    for namespace in ns.values():
        kube.kubectl("create", "namespace", namespace)
    ctx = kube.client_ssl()
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{kube.proxy.server}/api/v1/pods", ssl=ctx) as r:
            assert r.status == 200
            start_rv = (await r.json())["metadata"]["resourceVersion"]
    start = kube.rv_codec(("tp1", "tp2")).decode(start_rv)
    client = WatchClient(servers or [kube.proxy.server], ctx, set(ns.values()), start_rv)
    stop = asyncio.Event()
    watcher = asyncio.create_task(client.run(stop))
    await asyncio.sleep(0.5)

    async def writes() -> list[str]:
        outcomes = []
        for i in range(WRITES_PER_PARTITION):
            await asyncio.gather(_write(kube, "tp1", ns["tp1"], i), _write(kube, "tp2", ns["tp2"], i))
            outcomes.append(await _write_through_proxy(kube, (servers or [kube.proxy.server])[-1], ns["tp2"], i))
            await asyncio.sleep(0.3)
        return outcomes

    fault_task = asyncio.create_task(fault())
    outcomes = await writes()
    await fault_task
    healed = time.monotonic()
    truth = {p: await _partition_history(kube, p, ns[p], start[slot]) for slot, p in enumerate(("tp1", "tp2"))}
    want = sum(len(t) for t in truth.values())
    deadline = time.monotonic() + 60
    while len(client.events) < want and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    recovered = max(0.0, client.last_event_at - healed)
    stop.set()
    await watcher

    seen: dict[str, list[tuple[str, str, int]]] = {}
    codec = kube.rv_codec(("tp1", "tp2"))
    for slot, p in enumerate(("tp1", "tp2")):
        seen[p] = [(t, n, codec.decode(rv)[slot]) for t, namespace, n, rv in client.events if namespace == ns[p]]
    lost = sum(len(set(truth[p]) - set(seen[p])) for p in truth)
    duplicated = sum(len(seen[p]) - len(set(seen[p])) for p in seen)
    acked = [i for i, o in enumerate(outcomes) if o == "acked"]
    present = kube.kubectl("-n", ns["tp2"], "get", "configmaps", "-o", "name", kubeconfig=kube.direct("tp2")).split()
    row = {
        "fault": name,
        "events_expected": want,
        "events_received": len(client.events),
        "lost": lost,
        "duplicated": duplicated,
        "reconnects": client.reconnects,
        "client_errors": len(client.errors),
        "writes_through_proxy_acked": len(acked),
        "writes_through_proxy_failed_with_status": outcomes.count("failed"),
        "recovery_seconds": round(recovered, 2),
    }
    RESULTS.append(row)
    assert not [e for e in client.errors if isinstance(e, dict) and e.get("code") == 410], client.errors
    for p in truth:
        assert seen[p] == truth[p], (p, seen[p], truth[p])
    assert all(f"configmap/cm{i}" in present for i in acked), (acked, present)
    return row


def _toxic(env: Env, kind: str, attributes: dict[str, Any], seconds: float) -> Callable[[], Awaitable[None]]:
    async def fault() -> None:
        await asyncio.sleep(0.5)
        for stream in ("downstream", "upstream"):
            env.links["tp2"].add_toxic(type=kind, stream=stream, attributes=attributes, name=f"{kind}-{stream}")
        await asyncio.sleep(seconds)
        for stream in ("downstream", "upstream"):
            env.links["tp2"].destroy_toxic(f"{kind}-{stream}")

    return fault


async def test_latency_between_proxy_and_a_partition(env: Env) -> None:
    row = await _run_fault(env, "latency 300 ms", _toxic(env, "latency", {"latency": 300, "jitter": 50}, 4))
    assert row["lost"] == row["duplicated"] == 0


async def test_bandwidth_limit_between_proxy_and_a_partition(env: Env) -> None:
    row = await _run_fault(env, "bandwidth 16 KB/s", _toxic(env, "bandwidth", {"rate": 16}, 4))
    assert row["lost"] == row["duplicated"] == 0


async def test_connection_reset_mid_watch(env: Env) -> None:
    row = await _run_fault(env, "reset mid-watch", _toxic(env, "reset_peer", {"timeout": 500}, 2))
    assert row["lost"] == row["duplicated"] == 0


async def test_partition_down_for_five_seconds(env: Env) -> None:
    async def down() -> None:
        await asyncio.sleep(0.5)
        env.links["tp2"].disable()
        await asyncio.sleep(5)
        env.links["tp2"].enable()

    row = await _run_fault(env, "partition down 5 s", down)
    assert row["lost"] == row["duplicated"] == 0
    assert row["writes_through_proxy_failed_with_status"] >= 1, "writes to the down partition failed with a Status"


async def test_slow_close(env: Env) -> None:
    row = await _run_fault(env, "slow close 2 s", _toxic(env, "slow_close", {"delay": 2000}, 3))
    assert row["lost"] == row["duplicated"] == 0


async def test_replica_killed_mid_stream_and_the_client_resumes_on_the_other(env: Env) -> None:
    a, b = env.kube.proxy, env.replica_b

    async def kill_a() -> None:
        await asyncio.sleep(1.0)
        assert a.popen is not None
        os.kill(a.popen.pid, signal.SIGKILL)

    try:
        row = await _run_fault(env, "replica killed (kill -9)", kill_a, servers=[a.server, b.server])
    finally:
        env.kube.proxy.popen = None
        a.start()  # same port and config: the module's other tests keep their proxy
    assert row["lost"] == row["duplicated"] == 0


async def test_overload_gets_429_with_retry_after_and_admitted_requests_stay_fast(env: Env, tmp_path: Path) -> None:
    limited = ProxyProcess(
        env.kube.fed,
        tmp_path / "limited",
        extra={"failure": {"max_inflight_readonly": 4, "max_inflight_per_identity": 100}},
    ).start()
    try:
        ctx = env.kube.client_ssl()
        codes: list[int] = []
        admitted: list[float] = []
        retry_after: list[str] = []

        async def one(s: aiohttp.ClientSession) -> None:
            started = time.monotonic()
            async with s.get(f"{limited.server}/api/v1/pods", ssl=ctx) as r:
                await r.read()
                codes.append(r.status)
                if r.status == 200:
                    admitted.append(time.monotonic() - started)
                else:
                    retry_after.append(r.headers.get("Retry-After", ""))

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            await asyncio.gather(*(one(s) for _ in range(60)))
        assert set(codes) == {200, 429}, codes
        assert all(v.isdigit() and int(v) >= 1 for v in retry_after)
        admitted.sort()
        assert admitted[int(len(admitted) * 0.99) - 1] < 5.0, admitted
        RESULTS.append(
            {"fault": "overload: 60 concurrent lists, limit 4", "admitted": len(admitted), "rejected_429": len(retry_after),
             "admitted_p99_seconds": round(admitted[int(len(admitted) * 0.99) - 1], 3)}
        )
    finally:
        limited.stop()


async def test_sigterm_ends_open_watches_cleanly_and_lets_in_flight_writes_finish(env: Env, tmp_path: Path) -> None:
    replica = ProxyProcess(env.kube.fed, tmp_path / "terminated").start()
    try:
        ctx = env.kube.client_ssl()
        ended_cleanly = False
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{replica.server}/api/v1/nodes", params={"watch": "1", "resourceVersion": "0"}, ssl=ctx) as watch:
                assert watch.status == 200  # the stream is open (headers are flushed at once)
                write = asyncio.create_task(
                    s.post(
                        f"{replica.server}/api/v1/namespaces/default/configmaps",
                        json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"during-sigterm-{int(time.time())}"}},
                        ssl=ctx,
                    )
                )
                await asyncio.sleep(0.05)
                assert replica.popen is not None
                started = time.monotonic()
                replica.popen.send_signal(signal.SIGTERM)
                rest = await asyncio.wait_for(watch.content.read(), 10)  # EOF of a finished chunked body
                ended_cleanly = watch.content.at_eof()
                ended_after = time.monotonic() - started
                written = await write
                assert written.status in (201, 503), await written.text()
        assert ended_cleanly and ended_after < 3.0, (ended_after, rest[-200:])
        assert replica.popen.wait(15) == 0
    finally:
        replica.stop()  # idempotent; frees the port if the test failed before SIGTERM
    RESULTS.append({"fault": "SIGTERM with an open watch", "watch_ended_cleanly_after_seconds": round(ended_after, 2)})


async def test_requests_fail_over_between_endpoints_of_a_partition(env: Env, tmp_path: Path) -> None:
    """Two endpoints for tp1 (two toxiproxy paths to its kube-apiserver, standing in for HA
    apiservers behind one CA): with the first cut, tp1's requests and the union watch go on
    through the second."""
    fed = env.kube.fed
    assert env.toxi is not None
    spare = env.toxi.client.create(upstream=f"127.0.0.1:{fed.partition('tp1').port}", name="tp1-spare", listen="127.0.0.1:0")
    spare_url = f"https://{spare.listen}"
    partitions = [
        {"name": p.name, "role": p.role, "kubeconfig": str(env.kubeconfigs[p.name])}
        | ({"extra_servers": [spare_url]} if p.name == "tp1" else {})
        for p in fed.partitions
    ]
    replica = ProxyProcess(fed, tmp_path / "ha", extra={"partitions": partitions}).start()
    try:
        ctx = env.kube.client_ssl()
        env.links["tp1"].disable()
        async with aiohttp.ClientSession() as s:
            for _ in range(3):
                async with s.get(f"{replica.server}/api/v1/namespaces/default/configmaps", ssl=ctx) as r:
                    assert r.status == 200, await r.text()
            async with s.post(
                f"{replica.server}/api/v1/namespaces/default/configmaps",
                json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"ha-{int(time.time())}"}},
                ssl=ctx,
            ) as r:
                assert r.status == 201, await r.text()
            async with s.get(f"{replica.server}/api/v1/pods", ssl=ctx) as r:
                assert r.status == 200 and "Warning" not in r.headers, r.headers
    finally:
        env.links["tp1"].enable()
        replica.stop()
        spare.destroy()
