"""CPU per request of the candidate partition transports, against the same real kube-apiserver in
the same run: what the proxy's upstream client layer (`proxy.clients`) was chosen by.

Candidates, each sending the same GET (one pod of `--objects`, with the proxy's credential and
impersonation headers) `--concurrency` at a time from one process on uvloop, over TLS:
- `partition-client`: the proxy's own `PartitionClient` (`proxy.clients.transport`: persistent
  connections, the request in one write, llhttp parsing the answer), breaker and all;
- `floor`: the lean forwarder's upstream half (`bench.peers.lean_forwarder.Pool`), the
  simplest code doing the same;
- `aiohttp`: aiohttp's ClientSession with the settings the proxy used until 2026-11;
- `pyreqwest`: pyreqwest's async client (Rust: reqwest and hyper), when installed.

Each runs `--rounds` rounds of `--seconds` in turn (rotating the order); the figure is the median
over rounds of this process's CPU (user + system) per request, in microseconds. The partition's
own CPU is not counted. Set-up: `Federation(tenant_partitions=1, resource_partitions=1)`, pods in
namespace acme-bench on tp1.

Run: `python -m bench.transport_cpu [--seconds 3] [--rounds 3] [--concurrency 16]`.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import ssl
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

from bench.common import WORK_DIR, emit, host_info, install_sigterm, log
from bench.peers.lean_forwarder import Pool
from bench.routed_requests import NAMESPACE, create_objects
from config.models import PartitionConfig, PartitionRole, UpstreamConfig, FailureConfig
from hack.federation import PROXY_ADMINS_GROUP, Federation
from proxy.clients.partition import open_partition
from proxy.identity import Identity

NAME = "transport_cpu"
ACCEPT = "application/vnd.kubernetes.protobuf, */*"
IDENTITY = Identity("admin", (PROXY_ADMINS_GROUP,))

Get = Callable[[int], Awaitable[int]]  # a GET of pod i: its status


async def _partition_client(fed: Federation) -> tuple[Get, Callable[[], Awaitable[None]]]:
    tp1 = fed.partition("tp1")
    client = await open_partition(PartitionConfig(name="tp1", role=PartitionRole.TENANT, kubeconfig=tp1.proxy_kubeconfig),
                                  UpstreamConfig(), FailureConfig())

    async def get(i: int) -> int:
        async with client.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/bench-{i}", headers={"Accept": ACCEPT},
                                  identity=IDENTITY) as answer:
            await answer.read()
            return answer.status

    return get, client.close


async def _floor(fed: Federation) -> tuple[Get, Callable[[], Awaitable[None]]]:
    tp1 = fed.partition("tp1")
    ctx = ssl.create_default_context(cafile=str(fed.ca_file))
    ctx.load_cert_chain(*(str(p) for p in tp1.proxy_cert))
    pool = Pool({"tp": tp1.server}, ctx)
    host = tp1.server.removeprefix("https://")
    identity = f"Impersonate-User: {IDENTITY.user}\r\n" + "".join(f"Impersonate-Group: {g}\r\n" for g in IDENTITY.groups)

    async def get(i: int) -> int:
        conn = await pool.get("tp")
        request = (f"GET /api/v1/namespaces/{NAMESPACE}/pods/bench-{i} HTTP/1.1\r\nHost: {host}\r\nAccept: {ACCEPT}\r\n"
                   f"{identity}Content-Length: 0\r\n\r\n")
        status, _, _ = await conn.send(request.encode())
        pool.put("tp", conn)
        return status

    async def close() -> None:
        for conns in pool.idle.values():
            for conn in conns:
                if conn.transport is not None:
                    conn.transport.close()

    return get, close


async def _aiohttp(fed: Federation) -> tuple[Get, Callable[[], Awaitable[None]]]:
    tp1 = fed.partition("tp1")
    ctx = ssl.create_default_context(cafile=str(fed.ca_file))
    ctx.load_cert_chain(*(str(p) for p in tp1.proxy_cert))
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=0), auto_decompress=False,
                                    skip_auto_headers=("User-Agent", "Accept-Encoding"), cookie_jar=aiohttp.DummyCookieJar())
    headers = {"Accept": ACCEPT, "Impersonate-User": IDENTITY.user, "Impersonate-Group": IDENTITY.groups[0]}

    async def get(i: int) -> int:
        async with session.get(f"{tp1.server}/api/v1/namespaces/{NAMESPACE}/pods/bench-{i}", headers=headers) as answer:
            await answer.read()
            return answer.status

    return get, session.close


async def _pyreqwest(fed: Federation) -> tuple[Get, Callable[[], Awaitable[None]]]:
    from pyreqwest.client import ClientBuilder  # type: ignore[import-not-found]

    tp1 = fed.partition("tp1")
    crt, key = tp1.proxy_cert
    builder = (ClientBuilder().add_root_certificate_pem(Path(fed.ca_file).read_bytes())
               .identity_pem(crt.read_bytes() + key.read_bytes()).http1_only())
    client = builder.build()
    headers = {"Accept": ACCEPT, "Impersonate-User": IDENTITY.user, "Impersonate-Group": IDENTITY.groups[0]}

    async def get(i: int) -> int:
        response = await client.get(f"{tp1.server}/api/v1/namespaces/{NAMESPACE}/pods/bench-{i}").headers(headers).build().send()
        await response.bytes()
        return int(response.status)

    async def close() -> None:
        await client.close()

    return get, close


CANDIDATES: dict[str, Callable[[Federation], Awaitable[tuple[Get, Callable[[], Awaitable[None]]]]]] = {
    "partition-client": _partition_client,
    "floor": _floor,
    "aiohttp": _aiohttp,
    "pyreqwest": _pyreqwest,
}


async def _round(get: Get, seconds: float, concurrency: int, objects: int) -> tuple[int, float]:
    """(requests, CPU seconds of this process) over `seconds`."""
    count = 0
    stop = time.monotonic() + seconds

    async def worker(w: int) -> None:
        nonlocal count
        while time.monotonic() < stop:
            if await get(w % objects) != 200:
                raise RuntimeError("a GET failed")
            count += 1

    cpu = time.process_time()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return count, time.process_time() - cpu


async def measure(fed: Federation, args: argparse.Namespace) -> dict[str, Any]:
    await create_objects(fed, args.objects)
    names = [n for n in args.candidates if n != "pyreqwest" or importlib.util.find_spec("pyreqwest") is not None]
    made = {name: await CANDIDATES[name](fed) for name in names}
    for get, _ in made.values():  # connections open, first requests out of the way
        await _round(get, 0.5, args.concurrency, args.objects)
    per_request: dict[str, list[float]] = {name: [] for name in names}
    rates: dict[str, list[float]] = {name: [] for name in names}
    for rnd in range(args.rounds):
        for name in names[rnd % len(names):] + names[:rnd % len(names)]:
            count, cpu = await _round(made[name][0], args.seconds, args.concurrency, args.objects)
            per_request[name].append(cpu / count * 1e6)
            rates[name].append(count / args.seconds)
    for _, close in made.values():
        await close()
    out = {name: {"cpu_us_per_request": round(statistics.median(v), 1), "rounds": [round(x, 1) for x in v],
                  "requests_per_second": round(statistics.median(rates[name]))} for name, v in per_request.items()}
    for name, figures in out.items():
        log(f"{name}: {figures['cpu_us_per_request']} us of CPU per request, {figures['requests_per_second']}/s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--objects", type=int, default=16)
    ap.add_argument("--candidates", default=",".join(CANDIDATES), help="comma-separated: " + ", ".join(CANDIDATES))
    args = ap.parse_args()
    args.candidates = [c for c in args.candidates.split(",") if c]
    if unknown := set(args.candidates) - set(CANDIDATES):
        ap.error(f"unknown --candidates {sorted(unknown)}")
    install_sigterm()
    t0 = time.monotonic()
    fed = Federation(WORK_DIR / NAME, tenant_partitions=1, resource_partitions=1)
    try:
        fed.start()
        results = uvloop.run(measure(fed, args))
    finally:
        fed.stop()
    floor = results["floor"]["cpu_us_per_request"] if "floor" in results else 0.0
    emit(NAME, {
        "benchmark": NAME,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": host_info(),
        "params": vars(args),
        "peer": "floor: the lean forwarder's upstream half; aiohttp's ClientSession; pyreqwest",
        "candidates": results,
        "ratio_to_floor": {name: round(r["cpu_us_per_request"] / floor, 2) for name, r in results.items()} if floor else None,
        "total_seconds": round(time.monotonic() - t0, 1),
    })


if __name__ == "__main__":
    main()
