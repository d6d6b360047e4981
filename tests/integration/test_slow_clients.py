"""Clients that hold connections without using them: the proxy stays responsive for others and
its memory stays bounded."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from pathlib import Path

import aiohttp

from tests.federation import Kube, node

SLOW_CONNECTIONS = 200
RSS_BOUND_MIB = 64


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _timed_list(kube: Kube, ctx: ssl.SSLContext) -> float:
    started = time.monotonic()
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{kube.proxy.server}/api/v1/nodes", params={"resourceVersion": "0"}, ssl=ctx) as resp:
            assert resp.status == 200
            await resp.read()
    return time.monotonic() - started


async def test_slow_loris_connections_do_not_starve_other_clients(kube: Kube) -> None:
    ctx = kube.client_ssl()
    assert kube.proxy.popen is not None
    rss_before = _rss_mib(kube.proxy.popen.pid)
    baseline = min([await _timed_list(kube, ctx) for _ in range(5)])
    loris_ctx = kube.client_ssl()
    writers = []
    for _ in range(SLOW_CONNECTIONS):
        reader, writer = await asyncio.open_connection("127.0.0.1", kube.proxy.port, ssl=loris_ctx)
        writer.write(b"GET /api/v1/nodes HTTP/1.1\r\nHost: proxy\r\n")  # headers never finished
        writers.append((reader, writer))
    try:
        for _ in range(3):  # a header line now and then keeps each connection open
            for _, writer in writers:
                writer.write(b"X-Slow: 1\r\n")
            latencies = [await _timed_list(kube, ctx) for _ in range(5)]
            assert min(latencies) < max(0.5, baseline * 20), (latencies, baseline)
            await asyncio.sleep(0.5)
        growth = _rss_mib(kube.proxy.popen.pid) - rss_before
        assert growth < RSS_BOUND_MIB, growth
    finally:
        for _, writer in writers:
            writer.close()


async def test_a_watcher_that_never_reads_is_dropped_without_holding_memory(kube: Kube, unique: str) -> None:
    name = f"rp1-unread-{unique}"
    kube.create(node(name))
    ctx = kube.client_ssl()
    assert kube.proxy.popen is not None
    pid = kube.proxy.popen.pid
    before_watchers = kube.metric("partition_proxy_watch_cache_watchers", cache="nodes")
    rss_before = _rss_mib(pid)
    sockets = []
    for _ in range(20):
        raw = socket.create_connection(("127.0.0.1", kube.proxy.port))
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a client that reads nothing
        tls = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        tls.sendall(
            f"GET /api/v1/nodes?watch=1&resourceVersion=0&fieldSelector=metadata.name%3D{name} HTTP/1.1\r\n"
            "Host: proxy\r\n\r\n".encode()
        )
        sockets.append(tls)
    try:
        deadline = time.monotonic() + 20
        while kube.metric("partition_proxy_watch_cache_watchers", cache="nodes") < before_watchers + 20:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
        # ~6 MiB of events per watcher: far more than the socket buffers hold.
        big = "x" * 200_000
        async with aiohttp.ClientSession() as s:
            for i in range(30):
                async with s.patch(
                    f"{kube.fed.partition('rp1').server}/api/v1/nodes/{name}",
                    data=json.dumps({"metadata": {"annotations": {"filler": f"{i}{big}"}}}),
                    headers={"Content-Type": "application/merge-patch+json"},
                    ssl=kube.partition_ssl("rp1"),
                ) as resp:
                    assert resp.status == 200, await resp.text()
        # The proxy gives up on them within its write timeout (5 s in the test config).
        deadline = time.monotonic() + 30
        while kube.metric("partition_proxy_watch_cache_watchers", cache="nodes") > before_watchers:
            assert time.monotonic() < deadline, "never-reading watchers are still held"
            await asyncio.sleep(0.5)
        assert _rss_mib(pid) - rss_before < RSS_BOUND_MIB
        assert await _timed_list(kube, kube.client_ssl()) < 5
    finally:
        for tls in sockets:
            tls.close()
