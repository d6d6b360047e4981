"""The partitions' API Priority and Fairness metrics, in the proxy's `/metrics`.

API Priority and Fairness runs in every kube-apiserver: each partition classifies and queues the
requests it serves by its own FlowSchemas and PriorityLevelConfigurations (which the proxy
replicates to every partition: routing.decide.REPLICATED_EVERYWHERE). Clients that watch APF
through `/metrics` (the conformance spec `should ensure that requests can be classified by adding
FlowSchema and PriorityLevelConfiguration` reads `apiserver_flowcontrol_nominal_limit_seats` of
its priority level there) read it from the proxy, so the proxy's `/metrics` carries every
partition's `apiserver_flowcontrol_*` samples with a `partition` label added. They are read with
the proxy's own credential (get on the non-resource URL /metrics) when `/metrics` is scraped, at
most every FLOWCONTROL_METRICS_SECONDS, and at most every FRESH_SECONDS for FRESH_WINDOW_SECONDS
after a FlowSchema or PriorityLevelConfiguration was written through this worker (`changed`: the
conformance spec reads its new priority level's seats once, right after its FlowSchema took
effect); a partition that does not answer is left out.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping

from proxy.clients.errors import UpstreamError
from proxy.clients.partition import PartitionClient

# seconds the partitions' APF samples are reused between scrapes. Each refresh makes every
# partition render its whole /metrics (3.3 MB and ~90 ms of a kube-apiserver's CPU in the soak's
# federation on this machine, 2026-11-27), and every worker of every replica refreshes its own:
# at 5 s, the soak's scrapes of two replicas every 5 s cost the partitions ~0.2 of the machine's
# 2 cores. Prometheus scrapes every 15-60 s; a client polling faster sees samples this old.
FLOWCONTROL_METRICS_SECONDS = 30.0
# seconds: after a FlowSchema or PriorityLevelConfiguration write through this worker, samples
# are reused at most FRESH_SECONDS (the reuse before 2026-11-27) for FRESH_WINDOW_SECONDS, so a
# client that waits for its new priority level to show in /metrics sees it within seconds.
FRESH_SECONDS = 5.0
FRESH_WINDOW_SECONDS = 60.0
# seconds a scrape waits for a partition's /metrics
_TIMEOUT = 5.0
_PREFIX = b"apiserver_flowcontrol_"


def flowcontrol_families(text: bytes, partition: str) -> dict[bytes, list[bytes]]:
    """The `apiserver_flowcontrol_*` families of a Prometheus text exposition (one that writes
    each family's HELP, TYPE and samples together, as every Prometheus client library does), by
    family name: its HELP and TYPE lines as they are, then its samples with `partition` added to
    their labels."""
    label = f'partition="{partition}"'.encode()
    families: dict[bytes, list[bytes]] = {}
    current: list[bytes] | None = None
    for line in text.split(b"\n"):
        if line.startswith((b"# HELP ", b"# TYPE ")):
            name = line.split(b" ", 3)[2]
            current = families.setdefault(name, []) if name.startswith(_PREFIX) else None
            if current is not None:
                current.append(line)
        elif current is not None and line.startswith(_PREFIX):
            name, brace, rest = line.partition(b"{")
            if brace:
                current.append(name + b"{" + label + (b"," if not rest.startswith(b"}") else b"") + rest)
            else:
                name, _, value = line.partition(b" ")
                current.append(name + b"{" + label + b"} " + value)
    return families


class FlowcontrolMetrics:
    """The partitions' APF samples as Prometheus text lines (module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._text = b""
        self._read_at = -math.inf
        self._fresh_until = -math.inf

    def changed(self) -> None:
        """A FlowSchema or PriorityLevelConfiguration was written: the next scrape reads the
        partitions again, and scrapes for FRESH_WINDOW_SECONDS reuse samples at most FRESH_SECONDS."""
        self._read_at = -math.inf
        self._fresh_until = self._clock() + FRESH_WINDOW_SECONDS

    async def text(self, clients: Mapping[str, PartitionClient]) -> bytes:
        """Every live partition's APF samples, one HELP and TYPE per family."""
        now = self._clock()
        reuse = FRESH_SECONDS if now < self._fresh_until else FLOWCONTROL_METRICS_SECONDS
        if now - self._read_at < reuse:
            return self._text

        async def one(name: str, client: PartitionClient) -> dict[bytes, list[bytes]]:
            try:
                async with asyncio.timeout(_TIMEOUT):
                    async with client.request("GET", "/metrics", headers={"Accept": "text/plain"}) as answer:
                        body = await answer.read()
                        return flowcontrol_families(body, name) if answer.status == 200 else {}
            except (UpstreamError, TimeoutError):
                return {}

        merged: dict[bytes, list[bytes]] = {}
        for families in await asyncio.gather(*(one(n, c) for n, c in tuple(clients.items()))):
            for name, lines in families.items():
                kept = merged.setdefault(name, [])
                kept += (line for line in lines if not (line.startswith(b"#") and line in kept))
        lines = [line for family in merged.values() for line in family]
        self._text = b"\n".join(lines) + b"\n" if lines else b""
        self._read_at = self._clock()
        return self._text
