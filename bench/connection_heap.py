"""Does a long-lived connection to a partition grow the C heap as it is reused?

The soak's replica A holds bytes in glibc's heap that grow for as long as a tenant partition
stays up and are released when it restarts (docs/benchmarks.md, "The hour after the 403 fix").
This benchmark asks whether reusing connections is what grows: one real kube-apiserver
(`Federation(tenant_partitions=1, resource_partitions=0)`), one client process, `--requests`
GETs of a namespace (a ~0.4 KB answer) on keep-alive TLS connections, and glibc's bytes in use
(`proxy.allocator.heap_usage`, mallinfo2) read five times along the way. Sides:
- `bare`: one uvloop TLS connection, the request in one write, httptools parsing the answer
  (`bench.peers.lean_forwarder.Upstream`), one request at a time;
- `transport`: the proxy's own partition transport (`proxy.clients.transport.Endpoint`),
  `--concurrency` requests at a time (as many pooled connections).
Figures per side: bytes in use (MiB) at each reading, the growth from the first reading to the
last, and the connections open at the end. The allocator is tuned as the proxy tunes it.

Run: `python -m bench.connection_heap [--requests 20000] [--concurrency 16]`. One JSON document on
stdout (and `.local/bench/connection_heap.json`).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import uvloop

from bench.common import WORK_DIR, client_ssl, emit, host_info, log
from bench.peers.lean_forwarder import Upstream
from hack.federation import Federation
from proxy.allocator import heap_usage, tune_allocator
from proxy.clients.transport import Endpoint

NAME = "connection_heap"
PATH = "/api/v1/namespaces/default"
READINGS = 5  # heap readings along each side's requests (plus one at the end)


def _head(netloc: str) -> bytes:
    """The GET of PATH, as both sides write it."""
    return f"GET {PATH} HTTP/1.1\r\nHost: {netloc}\r\nAccept: application/json\r\n\r\n".encode()


def _in_use_mib() -> float:
    heap = heap_usage()
    if heap is None:
        raise SystemExit(f"{NAME}: the C library has no mallinfo2 (glibc >= 2.33 needed)")
    return round(heap["in_use_bytes"] / 2**20, 2)


async def _run(n: int, step: int, send: Callable[[], Awaitable[None]], open_connections: Callable[[], int]) -> dict[str, Any]:
    """`n` requests, `step` at a time; bytes in use read READINGS times and at the end."""
    readings: list[tuple[int, float]] = []
    every = max(n // READINGS, step)
    done = 0
    while done < n:
        if done % every < step:
            readings.append((done, _in_use_mib()))
        await asyncio.gather(*(send() for _ in range(step)))
        done += step
    readings.append((done, _in_use_mib()))
    return {"requests": done, "in_use_mib": readings, "growth_mib": round(readings[-1][1] - readings[0][1], 2),
            "connections_at_end": open_connections()}


async def bare(server: str, ctx: Any, n: int) -> dict[str, Any]:
    address = urlsplit(server)
    _, conn = await asyncio.get_running_loop().create_connection(Upstream, address.hostname or "", address.port or 443, ssl=ctx)
    request = _head(address.netloc)

    async def send() -> None:
        status, _, _ = await conn.send(request)
        if status != 200:
            raise RuntimeError(f"GET {PATH}: {status}")

    try:
        return await _run(n, 1, send, lambda: 0 if conn.closed else 1)
    finally:
        if conn.transport is not None:
            conn.transport.close()


async def transport(server: str, ctx: Any, n: int, concurrency: int) -> dict[str, Any]:
    address = urlsplit(server)
    endpoint = Endpoint(address.hostname or "", address.port or 443, ctx, connect_timeout=5.0, tick=0.5)
    head = _head(address.netloc)

    async def send() -> None:
        answer = await endpoint.exchange(head, None, head_timeout=10.0, total_timeout=30.0, inactivity=None, replayable=True)
        try:
            if answer.status != 200:
                raise RuntimeError(f"GET {PATH}: {answer.status}")
            await answer.read()
        finally:
            answer.finish()

    try:
        return await _run(n, concurrency, send, lambda: endpoint.connections)
    finally:
        endpoint.close()


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    fed = Federation(WORK_DIR / NAME, tenant_partitions=1, resource_partitions=0)
    t0 = time.monotonic()
    fed.start()
    try:
        tp = fed.partition("tp1")
        ctx = client_ssl(fed, tp.admin_cert)
        sides = {"bare": await bare(tp.server, ctx, args.requests),
                 "transport": await transport(tp.server, ctx, args.requests, args.concurrency)}
        log(f"done in {time.monotonic() - t0:.0f} s: growth (MiB) " + ", ".join(f"{k} {v['growth_mib']}" for k, v in sides.items()))
        return sides
    finally:
        fed.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20000, help="GETs per side")
    ap.add_argument("--concurrency", type=int, default=16, help="requests at a time through the proxy's transport")
    args = ap.parse_args()
    if args.requests < READINGS or args.concurrency < 1:
        ap.error(f"--requests must be at least {READINGS} and --concurrency at least 1")
    tune_allocator()
    sides = uvloop.run(measure(args))
    emit(NAME, {"benchmark": NAME, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": host_info(),
                "params": vars(args), "path": PATH, "sides": sides})


if __name__ == "__main__":
    main()
