"""Assembly and lifecycle of a running proxy: every part built from the config, every background
task started in one place and given an owner, the listener, and a graceful stop.

    ProxyApp.start(config)  build the cache set (proxy.cache.cache_set), open a PartitionClient
                            per partition, learn the namespaced resources from the system
                            partition's discovery, start the resourceVersion table loop and the
                            cache set (a reflector per cache and partition once the table is loaded)
    app.reconfigure(change) a new partition set, without a restart (proxy.partition_set)
    app.listen(...)         serve the pipeline on a TCP port (TLS; HTTP/2 or HTTP/1.1 by ALPN)
    app.stop(grace, drain)  stop accepting, let the client connections go one by one over up to
                            `drain` seconds (proxy.fronts.drain: each one's streams end cleanly,
                            clients re-watch on another replica; its other requests get `grace`
                            seconds), cancel and await every background task, close the clients
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
import contextlib
import dataclasses
import logging
import ssl
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from config import ConfigError
from config.changes import RuntimeChange
from config.models import ProxyConfig
from proxy.allocator import trim_free_heap
from proxy.authn import Authenticator
from proxy.authz import Authorizer
from proxy.cache.cache_set import CacheSet, ConfiguredCache
from proxy.cache.cache_set import build_caches as build_cache_entries
from proxy.clients.partition import PartitionClient, open_partition
from proxy.context import InForce, ProxyContext
from proxy.definitions_sync import follow_definitions
from proxy.discovery import DISCOVERY_REFRESH_SECONDS, namespaced_resources
from proxy.fronts.http1 import Http1Front
from proxy.fronts.http2 import Http2Front
from proxy.fronts.listener import Listener
from proxy.clients.kubelet import KubeletClient
from proxy.loop_health import GcPauses, probe_loop_lag, sweep_frozen
from proxy import metrics_workers
from proxy.metrics import METRICS_DIR_ENV, Metrics
from proxy.overload import InflightLimiter
from proxy.partition_set import PartitionSet
from proxy.pipeline.chain import Pipeline
from proxy.rv_epochs import ResourceVersions, TableUnavailable
from proxy.watch_limits import WatchLimiter
from routing.decide import RoutingState, owner_of_namespaced
from routing.placement import Placement
from routing.tokens import service_account_namespace

log = logging.getLogger("partition_proxy")


def build_resource_versions(config: ProxyConfig) -> ResourceVersions:
    """The RV codecs of the config's spaces. Raises ConfigError when two partition names
    share an object-form id (a 32-bit hash: practically never)."""
    try:
        return ResourceVersions(config)
    except ValueError as exc:
        raise ConfigError(f"partitions: {exc}") from None


# seconds a partition-set change waits for the resourceVersion table to get an epoch of the new
# RV spaces (a sync: a table read, a probe of every partition, a write; tens of ms) before the
# change is refused and the running set stays.
SPACE_WAIT_SECONDS = 10.0
# seconds a retired partition's client stays open after the change: open union watches list
# through it what they must tell their clients is gone (one paged LIST each, well under a second
# on a drained partition; generous for many watches at once).
RETIRED_CLIENT_GRACE_SECONDS = 30.0
# reads of discovery, half a second apart, after a definition was written through the proxy: a
# CRD is served (and discovered) once established, about a second after it is created.
_DISCOVERY_FOLLOW_UP_ROUNDS = 10


def build_caches(config: ProxyConfig, rv: ResourceVersions | None = None,
                 routing: Callable[[], RoutingState] | None = None) -> tuple[list[ConfiguredCache], dict[str, str]]:
    """The configured watch caches and the node index (proxy.cache.cache_set.build_caches) over
    the RV spaces of `rv`, by default the config's; `proxy.cli` checks a config with it before
    any I/O. Raises ConfigError naming the field when a cache's selector does not parse."""
    return build_cache_entries(config, codecs=rv or build_resource_versions(config), routing=routing)


def _token_reviewer(token: str, *, in_force: InForce, clients: Mapping[str, PartitionClient],
                    partition: str | None) -> PartitionClient | None:
    """The client of the partition that reviews `token` for the proxy's own authentication:
    with `auth.token_review_partition` set (`partition`), the tenant partition owning the
    namespace a service-account token names (routing.tokens), else that partition; None when
    unset."""
    if partition is None:
        return None
    namespace = service_account_namespace(token)
    owner = owner_of_namespaced(namespace, in_force.routing) if namespace else partition  # as decide routes a TokenReview
    return clients.get(owner) or clients.get(partition)


class ProxyApp:
    """A running proxy (see the module docstring). `tasks` are its background tasks by name
    (the reflectors are the cache set's: `ctx.cache_set`). With `config_path`, the partition set
    follows that file (`partition_set`)."""

    def __init__(self, ctx: ProxyContext, *, config_path: Path | None = None) -> None:
        self.ctx = ctx
        self.definitions_wake = asyncio.Event()  # a TP joined: copy the replicated definitions to it now
        self.partition_set = PartitionSet(ctx.config, config_path, ctx.metrics, self.reconfigure)
        self.pipeline = Pipeline(ctx, debug_partitions=self.partition_set.debug)
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._servers: list[asyncio.Server] = []
        self.listener = self._listener()
        self.gc_pauses = GcPauses(ctx.metrics.gc_pause)

    def _listener(self) -> Listener:
        config = self.ctx.config
        limits, http2 = config.limits, config.listen.http2
        http1 = Http1Front(self.pipeline, max_line_size=2 * limits.max_url_bytes, max_field_size=2 * limits.max_header_bytes,
                           write_timeout=limits.watch_write_timeout_seconds)
        h2 = Http2Front(self.pipeline, max_concurrent_streams=http2.max_concurrent_streams,
                        max_header_list_size=http2.max_header_list_size, write_timeout=limits.watch_write_timeout_seconds)
        listener = Listener(http1, h2 if http2.enabled else None)
        self.ctx.metrics.count_connections(listener.open_connections, listener.accepted)
        return listener

    @classmethod
    async def start(cls, config: ProxyConfig, *, config_path: Path | None = None) -> ProxyApp:
        """Build every part and start the background tasks (with `config_path`, one follows
        the file for partition-set changes). Raises ConfigError (a bad cache selector),
        OSError/ValueError (an unusable kubeconfig), UpstreamError or ValueError (the system
        partition's discovery cannot be read)."""
        rv = build_resource_versions(config)
        # the routing state of the config until discovery was read (no reflector runs before)
        in_force = InForce(config, RoutingState(Placement.from_config(config), frozenset()))
        cache_set = CacheSet.from_config(config, codecs=rv, routing=lambda: in_force.routing)
        clients: dict[str, PartitionClient] = {}
        try:
            for p in config.partitions:
                if p.live:
                    clients[p.name] = await open_partition(p, config.upstream, config.failure)
            namespaced = await namespaced_resources(clients[config.system_partition])
        except BaseException:
            for client in clients.values():
                await client.close()
            raise
        in_force.routing = RoutingState(Placement.from_config(config), namespaced, cache_set.node_index)
        reviewer = functools.partial(_token_reviewer, in_force=in_force, clients=clients, partition=config.auth.token_review_partition)
        ctx = ProxyContext(
            in_force=in_force,
            clients=clients,
            metrics=Metrics.create(workers_dir=os.environ.get(METRICS_DIR_ENV) or None),
            cache_set=cache_set,
            authn=Authenticator(config.auth, reviewer),
            authz=Authorizer(config.auth, clients),
            watches=WatchLimiter(config.limits.max_watches_per_identity),
            overload=InflightLimiter(config.failure),
            rv=rv,
            kubelet=KubeletClient(config.kubelet, config.upstream) if config.kubelet is not None else None,
        )
        rv.bind(clients)
        app = cls(ctx, config_path=config_path)
        app._spawn("resource-version-table", rv.run())
        app._spawn("partition-set", app.partition_set.run())
        app._spawn("discovery", app._follow_discovery())
        app._spawn("definitions-sync", follow_definitions(ctx, app.definitions_wake))
        app._spawn("event-loop-lag", probe_loop_lag(ctx.metrics.loop_lag, on_tick=app.gc_pauses.drain))
        app._spawn("gc-sweep-frozen", sweep_frozen())
        app._spawn("heap-trim", trim_free_heap())
        ctx.metrics.read_at_scrape(functools.partial(_read_health, ctx))
        if ctx.metrics.workers_dir is not None:  # one of several workers: the others ask it at scrape time
            app._servers.append(await metrics_workers.serve(ctx.metrics, cache_set.all_caches, ctx.metrics.workers_dir))
        cache_set.start(clients, ready=rv.ready)
        log.info("serving %d partitions, %d namespaced resources, %d caches", len(clients), len(namespaced), len(cache_set.caches))
        return app

    async def _follow_discovery(self) -> None:
        """Keep the routing state's namespaced resources the union of every live TP's (see
        proxy.discovery): every DISCOVERY_REFRESH_SECONDS, and after a definition is written
        through the proxy (`ctx.definitions_changed`) every half second for a few seconds, as
        a new CRD is served once established (about a second)."""
        ctx = self.ctx
        await self._refresh_namespaced()  # start-up read the system partition's only
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ctx.definitions_changed.wait(), DISCOVERY_REFRESH_SECONDS)
            rounds = _DISCOVERY_FOLLOW_UP_ROUNDS if ctx.definitions_changed.is_set() else 1
            ctx.definitions_changed.clear()
            for _ in range(rounds):
                if await self._refresh_namespaced():
                    break
                if rounds > 1:
                    await asyncio.sleep(0.5)

    async def _refresh_namespaced(self) -> bool:
        """Read every live TP's discovery; replace the routing state if the union changed
        (a TP that does not answer keeps what was known). True when it changed."""
        ctx = self.ctx
        tenants = [ctx.clients[p] for p in ctx.routing.placement.tenant_partitions if p in ctx.clients]
        found = await asyncio.gather(*(namespaced_resources(c) for c in tenants), return_exceptions=True)
        union = set(ctx.routing.namespaced) if any(isinstance(f, BaseException) for f in found) else set()
        for f in found:
            if not isinstance(f, BaseException):
                union |= f
        if frozenset(union) == ctx.routing.namespaced:
            return False
        ctx.in_force.routing = dataclasses.replace(ctx.routing, namespaced=frozenset(union))
        log.info("discovery: %d namespaced resources", len(union))
        return True

    async def reconfigure(self, change: RuntimeChange) -> None:
        """Serve the partition set of `change.config` from now on, without a restart
        (docs/partition-set.md). In order: open the clients of partitions that joined; give the
        RV spaces their codecs and wait until the shared table has an epoch of each (the first
        RV a joined partition's event gets must decode on every replica); stop the reflectors of
        retired partitions; then, in one loop turn (atomic for every request and watch of this
        process), replace the routing state, rebase the cache set (joined partitions'
        reflectors start: their objects reach open cache watchers as ADDED; retired ones'
        objects leave as DELETED) and tell open union watches; last, close retired clients
        (after RETIRED_CLIENT_GRACE_SECONDS: union watches list through them what left).
        Raises ConfigError when the change cannot be applied; the running set is then kept."""
        ctx = self.ctx
        config = change.config
        previous = ctx.config
        opened: dict[str, PartitionClient] = {}
        try:
            ctx.rv.configure(config)
        except ValueError as exc:
            ctx.rv.configure(previous)
            raise ConfigError(f"partitions: {exc}") from None
        try:
            for p in config.partitions:
                if p.name in change.joined:
                    opened[p.name] = await open_partition(p, config.upstream, config.failure)
            ctx.clients.update(opened)
            await self._wait_for_spaces()
        except (ConfigError, OSError, ValueError) as exc:
            for name, client in opened.items():
                ctx.clients.pop(name, None)
                await client.close()
            ctx.rv.configure(previous)
            raise ConfigError(f"partition set: {exc}") from None
        await ctx.cache_set.stop_reflectors(change.retired)
        # From here to the listeners: no await (one loop turn).
        ctx.in_force.config = config
        ctx.in_force.routing = RoutingState(Placement.from_config(config), ctx.routing.namespaced, ctx.routing.node_index)
        ctx.cache_set.rebase(config, ctx.rv)
        ctx.partition_set_changed()
        if any(name in ctx.routing.placement.tenant_partitions for name in change.joined):
            self.definitions_wake.set()
        for name in change.retired:
            if name in ctx.clients:
                self._spawn(f"close-retired:{name}", _close_after(ctx.clients.pop(name), RETIRED_CLIENT_GRACE_SECONDS))

    async def _wait_for_spaces(self) -> None:
        """Wait until the shared table has an epoch of every current RV space (publishing one
        through a sync). Raises ConfigError after SPACE_WAIT_SECONDS."""
        rv = self.ctx.rv
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SPACE_WAIT_SECONDS
        while not rv.covers():
            if loop.time() > deadline:
                raise ConfigError(f"the resourceVersion table got no epoch of the new partitions within {SPACE_WAIT_SECONDS:.0f} s")
            try:
                await asyncio.wait_for(rv.sync(), max(0.1, deadline - loop.time()))
            except (TableUnavailable, asyncio.TimeoutError) as exc:
                log.warning("partition set: waiting for the resourceVersion table: %s", exc)
                await asyncio.sleep(0.5)

    def _spawn(self, name: str, work: Coroutine[Any, Any, None]) -> None:
        """Start a named background task, logged if it ever ends by itself."""
        task = asyncio.create_task(work, name=name)
        task.add_done_callback(_log_unexpected_end)
        self.tasks[name] = task

    async def listen(self, host: str, port: int, *, ssl_context: ssl.SSLContext | None, reuse_port: bool = False) -> asyncio.Server:
        """Serve the pipeline on host:port: HTTP/2 or HTTP/1.1 per connection as ALPN chose (the
        caller's TLS context offers the protocols: `proxy.fronts.listener.offer_alpn`). Raises
        OSError when the port cannot be bound."""
        server = await asyncio.get_running_loop().create_server(
            self.listener.protocol, host, port, ssl=ssl_context, reuse_port=reuse_port, backlog=1024
        )
        self._servers.append(server)
        return server

    async def stop(self, grace: float, drain_seconds: float = 0.0) -> None:
        """Stop as the module docstring says: no new connections, the open ones let go one by
        one over up to `drain_seconds` (`proxy.fronts.drain`), each with `grace` seconds for
        its requests in flight. Safe to call once the listener failed too."""
        for server in self._servers:
            server.close()
        await self.listener.shutdown(grace, streams=self.ctx.streams, drain_seconds=drain_seconds)
        for server in self._servers:
            await server.wait_closed()
        await self.ctx.cache_set.stop()
        for task in self.tasks.values():
            task.cancel()
        for task in self.tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for client in self.ctx.clients.values():
            await client.close()
        if self.ctx.kubelet is not None:
            await self.ctx.kubelet.close()
        self.gc_pauses.close()


def _read_health(ctx: ProxyContext, metrics: Metrics) -> None:
    """The partitions' availability, the resourceVersion table's age and the asyncio tasks
    alive, at scrape time (on the event loop)."""
    for name, client in ctx.clients.items():
        metrics.partition_available.labels(name).set(0 if client.is_marked_down else 1)
        idle = client.idle_connections
        metrics.partition_connections.labels(name, "idle").set(idle)
        metrics.partition_connections.labels(name, "busy").set(client.connections - idle)
    # A retired partition's client is closed and gone: its samples go too, or its last value
    # (0 if it was down when it retired) would fire PartitionProxyPartitionDown for good.
    for gauge in (metrics.partition_available, metrics.partition_connections):
        for family in gauge.collect():
            for sample in family.samples:
                if sample.labels["partition"] not in ctx.clients:
                    gauge.remove(*sample.labels.values())  # in the order of the gauge's label names
    read_at = ctx.rv.read_at
    metrics.table_age.set(time.monotonic() - read_at if read_at else float("inf"))
    with contextlib.suppress(RuntimeError):  # no running loop: called outside one (a unit test)
        metrics.tasks.set(len(asyncio.all_tasks()))


async def _close_after(client: PartitionClient, delay: float) -> None:
    """Close a retired partition's client after `delay` seconds (at once when cancelled: shutdown)."""
    try:
        await asyncio.sleep(delay)
    finally:
        await client.close()


def _log_unexpected_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background task %s died: %r", task.get_name(), task.exception())
