"""The proxy's own endpoints, answered without authentication (health probes carry no
credential): `/livez` and `/healthz` (the process serves), `/readyz` (the resourceVersion table
is loaded and every watch cache has synced), `/metrics` (Prometheus text, with the partitions'
API Priority and Fairness samples: proxy.flowcontrol_metrics), `/debug/caches`,
`/debug/resource-versions`, `/debug/partitions` and `/debug/memory` (JSON for people). GET and HEAD only; any other method on these
paths is an API request like any other (the partitions answer it).

`/livez`, `/healthz` and `/readyz` with `?verbose` answer as one kube-apiserver does: every check
the partitions run (each asked with the proxy's own credential, `[+]` when it passes on every
partition that runs it: `routing.health`), then the proxy's own (`partition-proxy/...`), 500
when any fails. Without `?verbose` they answer for this process alone, as probes need: a
partition that is down must not restart or unready the replicas serving every other partition.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from multidict import CIMultiDict
from prometheus_client import CONTENT_TYPE_LATEST

from proxy import metrics_workers
from proxy.allocator import TRIMS, heap_usage
from proxy.census import CENSUS_ENV, census, census_enabled
from proxy.clients.errors import UpstreamError
from proxy.clients.partition import PartitionClient, connection_objects, connection_reads
from proxy.context import ProxyContext
from proxy.messages import Answer, Request
from routing.health import Check, merge_checks, parse_checks, verbose_answer

Endpoint = Callable[[Request], Awaitable[Answer]]
_TEXT = "text/plain; charset=utf-8"
# seconds a verbose health answer waits for each partition's: kube-apiserver answers its own at
# once; one that has not answered in 5 s is reported as a failed check of its own.
_PARTITION_HEALTH_TIMEOUT = 5.0
# allocation sites /debug/memory lists, the largest first: enough to cover ~95 % of a
# replica's traced bytes with its default caches and a kubelet fleet (bench/fleet.py --trace-memory).
_MEMORY_SITES = 60
_PROC_STATUS = "/proc/self/status"


class Endpoints:
    """The endpoints of the module docstring. `debug_partitions` gives what /debug/partitions
    shows (proxy.partition_set.PartitionSet.debug; {} without it)."""

    def __init__(self, ctx: ProxyContext, *, debug_partitions: Callable[[], dict[str, Any]] | None = None) -> None:
        self.ctx = ctx
        self._debug_partitions = debug_partitions
        self._by_path: dict[str, Endpoint] = {
            "/livez": functools.partial(self.livez, endpoint="livez"),
            "/healthz": functools.partial(self.livez, endpoint="healthz"),
            "/readyz": self.readyz,
            "/metrics": self.metrics,
            "/debug/caches": self.debug_caches,
            "/debug/resource-versions": self.debug_resource_versions,
            "/debug/partitions": self.debug_partitions,
            "/debug/memory": self.debug_memory,
        }

    def find(self, method: str, raw_path: str) -> Endpoint | None:
        """The endpoint serving this request, None for an API request."""
        if method not in ("GET", "HEAD"):
            return None
        return self._by_path.get(raw_path)

    async def livez(self, request: Request, *, endpoint: str) -> Answer:
        if "verbose" in request.query:
            return await self._verbose(endpoint, [Check("partition-proxy/ping", True)])
        return Answer(200, b"ok", content_type=_TEXT)

    async def readyz(self, request: Request) -> Answer:
        """200 once the resourceVersion table is loaded and every watch cache has synced (no
        answers from a partial view). A partition that is down does not make the proxy unready:
        its requests get 503 and the others are served; taking every replica out of its Service
        for one partition's outage would fail every partition's clients. Each partition's
        breaker state is listed for people."""
        ctx = self.ctx
        table = ctx.rv.ready.is_set()
        breakers = []
        for name, client in ctx.clients.items():
            health = client.health
            detail = {"marked down": ", requests get 503", "recovering": ", the next request is its trial"}.get(health, "")
            breakers.append(f"partition {name}: {health}{detail}")
        if "verbose" in request.query:
            own = [Check("partition-proxy/resource-version-table", table)]
            own += [Check(f"partition-proxy/watch-cache/{c.spec.name}", c.is_synced) for c in ctx.cache_set.caches]
            return await self._verbose("readyz", own, breakers)
        lines = [f"[{'+' if table else '-'}]resource-version-table {'ok' if table else 'not loaded'}"]
        lines += [f"[{'+' if c.is_synced else '-'}]watch-cache-{c.spec.name} {'ok' if c.is_synced else 'not synced'}" for c in ctx.cache_set.caches]
        lines += (f"   {line}" for line in breakers)
        ready = table and ctx.cache_set.synced
        lines.append("readyz check passed" if ready else "readyz check failed")
        return Answer(200 if ready else 500, ("\n".join(lines) + "\n").encode(), content_type=_TEXT)

    async def _verbose(self, endpoint: str, own: list[Check], notes: list[str] | None = None) -> Answer:
        """Every partition's checks of `endpoint`, merged, then the proxy's own (module docstring),
        then `notes` for people."""
        async def checks_of(name: str, client: PartitionClient) -> tuple[str, list[Check] | None]:
            try:
                async with asyncio.timeout(_PARTITION_HEALTH_TIMEOUT):
                    async with client.request("GET", f"/{endpoint}", query="verbose") as answer:
                        text = (await answer.read()).decode(errors="replace")
            except (UpstreamError, TimeoutError):
                return name, None
            return name, parse_checks(text) or None

        answers = dict(await asyncio.gather(*(checks_of(name, client) for name, client in tuple(self.ctx.clients.items()))))
        status, body = verbose_answer(endpoint, merge_checks(answers) + own, notes or ())
        return Answer(status, body.encode(), content_type=_TEXT)

    async def metrics(self, request: Request) -> Answer:
        """This process's metrics, or every worker's (proxy.metrics_workers), then the
        partitions' API Priority and Fairness samples (proxy.flowcontrol_metrics)."""
        metrics, caches = self.ctx.metrics, self.ctx.cache_set.all_caches()
        if metrics.workers_dir is not None:
            text = await metrics_workers.exposition(metrics, caches, metrics.workers_dir)
        else:
            text = metrics.exposition(caches)
        text += await self.ctx.flowcontrol.text(self.ctx.clients)
        return Answer(200, text, CIMultiDict({"Content-Type": CONTENT_TYPE_LATEST}), content_type=None)

    async def debug_caches(self, request: Request) -> Answer:
        """Per cache: objects, bytes, watchers, ring span, last RV and relists per partition."""
        return Answer(200, orjson.dumps({"caches": [c.debug() for c in self.ctx.cache_set.all_caches()]}))

    async def debug_resource_versions(self, request: Request) -> Answer:
        """The epoch table this replica serves with and the partitions' positions it last saw."""
        return Answer(200, orjson.dumps(self.ctx.rv.debug()))

    async def debug_partitions(self, request: Request) -> Answer:
        """The partition-set version this process serves, each partition's state, fenced
        tenants and the last refused reload (proxy.partition_set)."""
        show = self._debug_partitions
        return Answer(200, orjson.dumps(show() if show is not None else {}))

    async def debug_memory(self, request: Request) -> Answer:
        """This process's resident memory (bytes) and, when Python's allocations are traced
        (PYTHONTRACEMALLOC=1 in the environment: tracing costs CPU and memory, so it is off by
        default), the traced bytes and the largest allocation sites: {"rss_bytes",
        "malloc": proxy.allocator.heap_usage() (what the C allocator holds in use and free,
        null off glibc), "heap_trims": proxy.allocator.TRIMS (the periodic trims of its free
        pages: count, CPU seconds in all and at most), "partition_connections": {"open":
        connections open to the partitions, "objects": connection objects not yet freed (more than open: closed ones still
        referenced), "largest_read": proxy.clients.transport.largest_reads()}, "tracing", "traced_bytes", "sites": [{"site": "file:line", "bytes",
        "count"}]}. With `?census`, also "census": proxy.census.census() (Python objects by type;
        it holds the event loop ~0.5 s at 1,000 kubelets) when the process runs with
        PARTITION_PROXY_CENSUS=1, else {"error": how to turn it on}."""
        body: dict[str, Any] = {
            "rss_bytes": _rss_bytes(), "malloc": heap_usage(), "heap_trims": dataclasses.asdict(TRIMS),
            "partition_connections": {"open": sum(c.connections for c in self.ctx.clients.values()), "objects": connection_objects(),
                                      "largest_read": connection_reads()},
            "tracing": tracemalloc.is_tracing(),
        }
        if tracemalloc.is_tracing():
            stats = tracemalloc.take_snapshot().statistics("lineno")
            body["traced_bytes"] = sum(s.size for s in stats)
            body["sites"] = [{"site": f"{s.traceback[0].filename}:{s.traceback[0].lineno}", "bytes": s.size, "count": s.count}
                             for s in stats[:_MEMORY_SITES]]
        if "census" in request.query:
            body["census"] = census() if census_enabled() else {"error": f"a census runs only in a process started with {CENSUS_ENV}=1"}
        return Answer(200, orjson.dumps(body))


def _rss_bytes() -> int | None:
    """VmRSS of this process (bytes), None where /proc is not there."""
    try:
        with open(_PROC_STATUS, encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
