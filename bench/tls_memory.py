"""Memory and CPU of a client TLS connection, by TLS layer: what a TLS connection of the partition
transport keeps after the answers it received.

Cases, each in a fresh client process on uvloop that opens `--connections` TLS 1.3 connections
to one local TLS server (a child process), asks each for one answer (SMALL or LARGE bytes), reads
it whole into a protocol that only counts it, and keeps every connection open:
- `uvloop`: uvloop's TLS transport (`loop.create_connection(..., ssl=context)`), the way the
  partition transport connects;
- `memory-bio`: `bench.peers.memory_bio_tls.TLSConnection` over a plain TCP connection (memory
  BIOs fed a record at a time; see that module for why the proxy does not use it yet).
Each is run with a small answer (what a Lease renewal gets) and a large one (a LIST page, a
burst of watch events): what a connection once received decides what it keeps. Figures:
the client process's RSS growth per connection (KiB, /proc/self/status VmRSS after minus before,
glibc's mmap threshold fixed as the proxy fixes it: `proxy.allocator`), and its CPU (user +
system, ms) per connection (the handshake included) and per MiB received. The server's own
cost is not counted.

Run: `python -m bench.tls_memory [--connections 200] [--rounds 3]`. One JSON document on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import uvloop

from bench.common import emit, host_info, log
from hack.pki import CertificateAuthority

CASES = ("uvloop", "memory-bio")
SMALL = 2_000  # bytes: about a Lease renewal's answer
LARGE = 1 << 20  # bytes: a LIST page or a burst of watch events


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _serve(cert: str, key: str) -> None:
    """The TLS server: reads a 12-digit size, answers that many bytes, keeps the connection."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    blob = os.urandom(8 << 20)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        size = int(await reader.readexactly(12))
        writer.write(blob[:size])
        await writer.drain()
        await reader.read()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(3600)


class _Counting(asyncio.Protocol):
    """Counts the bytes of its answer; `done` once `size` arrived."""

    def __init__(self, size: int, done: asyncio.Future[None]) -> None:
        self.size, self.done, self.received = size, done, 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(b"%012d" % self.size)  # type: ignore[attr-defined]

    def data_received(self, data: bytes | memoryview) -> None:
        self.received += len(data)
        if self.received >= self.size and not self.done.done():
            self.done.set_result(None)


async def _client(case: str, port: int, ca: str, connections: int, size: int) -> dict[str, Any]:
    from proxy.allocator import tune_allocator
    from bench.peers.memory_bio_tls import TLSConnection

    tune_allocator()
    loop = asyncio.get_running_loop()
    context = ssl.create_default_context(cafile=ca)
    kept = []
    # one connection first, so that what every connection shares (imports, the read buffers) is
    # not counted per connection
    for n in range(connections + 1):
        if n == 1:
            rss0, cpu0 = _rss_kib(), _cpu_s()
        done: asyncio.Future[None] = loop.create_future()
        app = _Counting(size, done)
        if case == "uvloop":
            transport, _ = await loop.create_connection(lambda: app, "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1")
        else:
            tls = TLSConnection(context, "127.0.0.1", app, loop)
            transport, _ = await loop.create_connection(lambda: tls, "127.0.0.1", port)
            failed = await tls.handshake
            if failed:
                raise RuntimeError(failed)
        await done
        kept.append(transport)
    rss1, cpu1 = _rss_kib(), _cpu_s()
    mib = connections * size / 2**20
    return {"rss_kib_per_connection": round((rss1 - rss0) / connections, 1),
            "cpu_ms_per_connection": round((cpu1 - cpu0) * 1000 / connections, 3),
            "cpu_ms_per_mib": round((cpu1 - cpu0) * 1000 / mib, 2)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.tls_memory", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--client", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.serve:
        uvloop.run(_serve(*a.serve))
        return
    if a.client:
        case, port, ca, connections, size = a.client
        print(json.dumps(uvloop.run(_client(case, int(port), ca, int(connections), int(size)))))
        return

    with tempfile.TemporaryDirectory() as tmp:
        authority = CertificateAuthority.create(Path(tmp), "tls-memory-ca")
        cert, key = authority.issue_serving(Path(tmp), "server", ["127.0.0.1"])
        server = subprocess.Popen([sys.executable, "-m", "bench.tls_memory", "--serve", str(cert), str(key)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            port = server.stdout.readline().strip()
            runs: dict[str, list[dict[str, Any]]] = {}
            for r in range(a.rounds):
                for size_name, size in (("small", SMALL), ("large", LARGE)):
                    for case in (CASES if r % 2 == 0 else tuple(reversed(CASES))):
                        out = subprocess.run([sys.executable, "-m", "bench.tls_memory", "--client", case, port,
                                              str(authority.cert_file), str(a.connections), str(size)],
                                             check=True, capture_output=True, text=True)
                        figures = json.loads(out.stdout)
                        runs.setdefault(f"{case} {size_name}", []).append(figures)
                        log(f"round {r + 1} {case} {size_name}: {figures}")
        finally:
            server.terminate()
            server.wait()

    result = {
        "benchmark": "tls_memory",
        "host": host_info(),
        "connections": a.connections,
        "answer_bytes": {"small": SMALL, "large": LARGE},
        "rounds": a.rounds,
        "cases": {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
                  for name, rs in runs.items()},
    }
    emit("tls_memory", result)


if __name__ == "__main__":
    main()
