"""A kubelet-like client-go process (`rvcheck h2watch`) holds 1,000 watches through the proxy over
ONE HTTP/2 connection: 500 Nodes by name (served from the node cache) and 500 pod watches by
spec.nodeName (unions over the tenant partitions), plus one stream it never reads. Every watch
receives every event; the unread stream is reset by the proxy once its window stays shut past
the write timeout, and the others keep flowing meanwhile.

A proxy of its own in front of the session's federation, allowing 2,000 streams per connection
(the default, 100, would make client-go open ten connections) and 3 s of write timeout."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from hack.proxy_process import ProxyProcess
from hack.federation import PROXY_ADMINS_GROUP
from tests.federation import TEST_CACHES, Kube, pod
from tests.goclients import finish_rvcheck, reap_rvcheck, start_rvcheck

NODES = 500  # x 2 watches each
SENT_NS = "h2watch.partition-proxy.io/sent-ns"
WRITE_TIMEOUT = 3  # seconds: limits.watch_write_timeout_seconds of this module's proxy
PADDING = "x" * 8192  # bytes in each modification of the slow stream's node: fills its 64 KiB window fast


@pytest.fixture(scope="module")
def proxy(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    extra = {"listen": {"http2": {"max_concurrent_streams": 2000}},
             "limits": {"max_watches_per_identity": 5000, "watch_write_timeout_seconds": WRITE_TIMEOUT},
             "auth": {"token_review_partition": "tp1"}}
    p = ProxyProcess(kube.fed, tmp_path_factory.mktemp("h2watch") / "proxy", caches=TEST_CACHES, extra=extra).start()
    try:
        yield p
    finally:
        p.stop()


async def _each(kube: Kube, partition: str, calls: list[tuple[str, str, Any]], *, concurrency: int = 32) -> None:
    """Requests straight to a partition as its admin, `concurrency` at a time; each must succeed."""
    sem = asyncio.Semaphore(concurrency)
    base = kube.fed.partition(partition).server
    async with aiohttp.ClientSession() as s:

        async def one(method: str, path: str, body: Any) -> None:
            async with sem:
                headers = {"Content-Type": "application/merge-patch+json" if method == "PATCH" else "application/json"}
                async with s.request(method, base + path, data=orjson.dumps(body), headers=headers, ssl=kube.partition_ssl(partition)) as r:
                    assert r.status in (200, 201), (method, path, r.status, await r.text())

        await asyncio.gather(*(one(*c) for c in calls))


def _stamp(extra: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"annotations": {SENT_NS: str(time.time_ns()), **(extra or {})}}}


async def test_a_thousand_watches_share_one_http2_connection_and_a_slow_reader_delays_no_other(
    kube: Kube, proxy: ProxyProcess, rvcheck: Path, unique: str, tmp_path: Path
) -> None:
    nodes = {p: [f"{p}-h2w{unique}-{i:03d}" for i in range(NODES // 2)] for p in ("rp1", "rp2")}
    names = [n for group in nodes.values() for n in group]
    tenants = {"tp1": f"acme-h2w{unique}", "tp2": f"nova-h2w{unique}"}
    for namespace in tenants.values():
        kube.kubectl("create", "namespace", namespace)
    for p, group in nodes.items():
        await _each(kube, p, [("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}}) for n in group])
    kubeconfig = kube.fed.issue_client_kubeconfig(f"h2w{unique}", user="admin", groups=[PROXY_ADMINS_GROUP], server=proxy.server)
    ready = tmp_path / "ready"
    run = start_rvcheck(rvcheck, ["h2watch", "--kubeconfig", str(kubeconfig), "--nodes", ",".join(names), "--expect-events", "2",
                                  "--duration", "150s", "--slow-stream", "--stream-window", "65536", "--ready-file", str(ready)])
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert run.poll() is None and time.monotonic() < deadline, "h2watch did not open its watches"
            await asyncio.sleep(0.5)
        open_h2 = _metric(proxy, kube, "partition_proxy_connections", protocol="h2")
        # The slow stream's node first: 96 KiB of events against its 64 KiB window, then past the
        # write timeout its stream is reset while every other stream is still waiting for its
        # events. Then every pod watch gets an ADDED and a MODIFIED, every node watch two MODIFIED.
        await _each(kube, "rp1", [("PATCH", f"/api/v1/nodes/{nodes['rp1'][0]}", _stamp({"pad": PADDING + str(i)})) for i in range(12)],
                    concurrency=1)
        await asyncio.sleep(WRITE_TIMEOUT + 1)
        for p, group in nodes.items():
            await _each(kube, p, [("PATCH", f"/api/v1/nodes/{n}", _stamp()) for n in group])
        pods = {tp: [(n, i) for i, n in enumerate(names) if (i % 2 == 0) == (tp == "tp1")] for tp in tenants}
        for tp, group in pods.items():
            await _each(kube, tp, [("POST", f"/api/v1/namespaces/{tenants[tp]}/pods", _pod(tenants[tp], n)) for n, _ in group])
        for p, group in nodes.items():
            await _each(kube, p, [("PATCH", f"/api/v1/nodes/{n}", _stamp()) for n in group])
        for tp, group in pods.items():
            await _each(kube, tp, [("PATCH", f"/api/v1/namespaces/{tenants[tp]}/pods/{n}", _stamp()) for n, _ in group])
        report = finish_rvcheck(run, "h2watch", timeout=200)
    finally:
        reap_rvcheck(run)
        for p, group in nodes.items():
            await _each(kube, p, [("DELETE", f"/api/v1/nodes/{n}", None) for n in group])
        for namespace in tenants.values():
            kube.kubectl("delete", "namespace", namespace, "--wait=false")

    summary = {k: report.get(k) for k in ("watches_opened", "tcp_connections_dialed", "tcp_connections_closed", "protocols",
                                          "min_events_per_watch", "ended_early_total", "lag_ms", "stop_reason", "slow_stream")}
    _save(summary | {"open_h2_connections_at_the_proxy": open_h2})
    assert report["watches_opened"] == 2 * NODES
    assert report["tcp_connections_dialed"] == 1 and report["tcp_connections_closed"] == 0, summary
    assert set(report["protocols"]) == {"HTTP/2.0"}, summary
    assert open_h2 == 1  # the proxy saw one HTTP/2 connection (from its own metrics)
    assert report["ended_early_total"] == 0 and report["min_events_per_watch"] >= 2, summary
    assert report["stop_reason"] == "expected", summary  # every watch got every event while the slow stream was stalled
    slow = report["slow_stream"]
    assert slow["opened"] and slow["outcome"] == "reset" and slow["reset_code"] == "CANCEL", slow


def _pod(namespace: str, node: str) -> dict[str, Any]:
    p = pod(namespace, node, node)
    p["metadata"] = {"name": node, "namespace": namespace, "annotations": {SENT_NS: str(time.time_ns())}}
    return p


def _metric(proxy: ProxyProcess, kube: Kube, name: str, **labels: str) -> float:
    return Kube(fed=kube.fed, proxy=proxy, kubectl_path=kube.kubectl_path, admin=kube.admin).metric(name, **labels)


def _save(summary: dict[str, Any]) -> None:
    out = Path(__file__).resolve().parents[2] / ".local" / "http2_watches.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    if os.environ.get("H2WATCH_DEBUG"):
        print(json.dumps(summary, indent=2))


def test_watches_blocked_by_the_connection_window_resume_when_the_client_opens_it(kube: Kube, unique: str) -> None:
    """Two cached watches on one connection whose client acknowledges nothing: their events stop
    at the connection's 64 KiB flow-control window (each stream still has room of its own); a
    WINDOW_UPDATE of the connection alone lets both flow again (the proxy wakes the streams that
    wait for a window, not every stream of the connection)."""
    import h2.events

    from tests.h2client import H2Client

    names = [f"rp1-window-{unique}-{i}" for i in range(2)]
    for name in names:
        kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    host, port = kube.proxy.server.removeprefix("https://").rsplit(":", 1)
    client = H2Client(host, int(port), kube.client_ssl())
    client.sock.settimeout(1.0)
    streams = {}
    for name in names:
        stream_id = client.conn.get_next_available_stream_id()
        client.conn.send_headers(stream_id, [(":method", "GET"), (":path", f"/api/v1/nodes?watch=true&fieldSelector=metadata.name%3D{name}"),
                                             (":scheme", "https"), (":authority", client.authority)], end_stream=True)
        streams[stream_id] = 0
    client.flush()

    def read_for(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                data = client.sock.recv(65536)
            except TimeoutError:
                continue
            for event in client.conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived) and event.stream_id in streams:
                    streams[event.stream_id] += event.flow_controlled_length  # never acknowledged
            client.flush()

    padding = "x" * 8192
    for i in range(6):  # 2 x 6 x ~8.5 KiB of events: past the connection's window, within each stream's
        for name in names:
            kube.kubectl("annotate", "--overwrite", "node", name, f"pad={padding}{i}")
    read_for(3.0)
    stalled = dict(streams)
    assert 60_000 <= sum(stalled.values()) <= 65_535, stalled  # the connection's window, used up
    client.conn.increment_flow_control_window(1 << 20)  # the connection's window only
    client.flush()
    read_for(3.0)
    assert all(streams[s] > stalled[s] for s in streams), (stalled, streams)
    assert sum(streams.values()) > 100_000, streams
    client.close()
    for name in names:
        kube.kubectl("delete", "node", name)
