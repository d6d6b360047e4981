"""The partitions' API Priority and Fairness metrics, in the proxy's `/metrics`.

API Priority and Fairness runs in every kube-apiserver: each partition classifies and queues the
requests it serves by its own FlowSchemas and PriorityLevelConfigurations (which the proxy
replicates to every partition: routing.decide.REPLICATED_EVERYWHERE). Clients that watch APF
through `/metrics` (the conformance spec `should ensure that requests can be classified by adding
FlowSchema and PriorityLevelConfiguration` reads `apiserver_flowcontrol_nominal_limit_seats` of
its priority level there) read it from the proxy, so the proxy's `/metrics` carries every
partition's `apiserver_flowcontrol_*` samples with a `partition` label added. They are read with
the proxy's own credential (get on the non-resource URL /metrics) when `/metrics` is scraped, at
most every FLOWCONTROL_METRICS_SECONDS; a partition that does not answer is left out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from proxy.clients.errors import UpstreamError
from proxy.clients.partition import PartitionClient

# seconds the partitions' APF samples are reused between scrapes: a kube-apiserver's /metrics is
# megabytes, and Prometheus scrapes every 15-60 s; a client polling faster sees samples this old.
FLOWCONTROL_METRICS_SECONDS = 5.0
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

    def __init__(self) -> None:
        self._text = b""
        self._read_at = -FLOWCONTROL_METRICS_SECONDS

    async def text(self, clients: Mapping[str, PartitionClient]) -> bytes:
        """Every live partition's APF samples, one HELP and TYPE per family."""
        if time.monotonic() - self._read_at < FLOWCONTROL_METRICS_SECONDS:
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
        self._read_at = time.monotonic()
        return self._text
