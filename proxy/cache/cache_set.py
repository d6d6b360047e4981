"""The cache set: every configured watch cache, its protobuf twin, their reflectors and the node
index, built from the config and started, rebased and stopped in one place.

    CacheSet.from_config(config, codecs=rv, routing=...)   every `caches[]` entry: its JSON cache
                                                           and, for a resource whose selectable
                                                           fields are read from protobuf, its twin
    cache_set.start(clients, ready=rv.ready)               a reflector per (JSON cache, live
                                                           partition), each once `ready` is set
    cache_set.protobuf_twin(index)                         the request path's way to a twin: the
                                                           first client that asks protobuf first
                                                           starts filling it
    cache_set.rebase(config, rv)                           a new partition set (plain def)
    await cache_set.stop_reflectors(partitions)            retired partitions' reflectors end
    await cache_set.stop()                                 every reflector cancelled and awaited

A protobuf twin holds the same objects as its cache, in protobuf (`proxy.cache.formats`), for
clients that ask protobuf first as kube-apiserver answers them in the first media type they
accept (apiserver pkg/endpoints/handlers/negotiation); it is filled only once such a client
comes (twice the cache's memory and upstream watches, paid only where such clients are). The
node index (node name -> the resource partition holding it) is kept by the JSON `nodes` cache
and read by routing (`routing.decide.RoutingState.node_index`, a live view).

Owns the reflector tasks (STYLE §5): each is named `reflector:<cache>:<partition>`, logged if it
ends by itself, cancelled and awaited by `stop` / `stop_reflectors`. Does not own the partition
clients (proxy.app opens and closes them; the set reads the live mapping it is given) nor the
resourceVersion table (`codecs` gives each RV space's codec).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from config import ConfigError
from config.models import SYSTEM_CACHE_ROLE, CacheConfig, PartitionRole, ProxyConfig
from proxy.cache.formats import PROTOBUF_FORMAT
from proxy.cache.reflector import Reflector
from proxy.cache.watch_cache import WatchCache
from proxy.clients.partition import PartitionClient
from routing import protobuf_items
from routing import rv as rvcodec
from routing.cache_policy import CacheSpec
from routing.decide import NODE_SCOPED, RoutingState, owner_by_key
from routing.placement import Placement
from routing.selectors import SelectorError, is_namespaced, parse_field_selector, parse_label_selector

__all__ = ["CacheSet", "Codecs", "ConfiguredCache", "build_caches"]

log = logging.getLogger("partition_proxy")


class Codecs(Protocol):
    """The RV codec of each RV space (proxy.rv_epochs.ResourceVersions)."""

    def codec(self, space: tuple[str, ...]) -> rvcodec.RVCodec: ...  # pragma: no cover


@dataclass(frozen=True, slots=True)
class ConfiguredCache:
    """One `caches[]` entry: its watch cache (JSON) and its protobuf twin (None when the
    resource's selectable fields cannot be read from protobuf, or `protobuf: false`)."""

    spec: CacheConfig
    cache: WatchCache
    protobuf: WatchCache | None


def build_caches(config: ProxyConfig, *, codecs: Codecs,
                 routing: Callable[[], RoutingState] | None = None) -> tuple[list[ConfiguredCache], dict[str, str]]:
    """The configured caches in config order, and the node index the node cache keeps (node
    name -> resource partition; empty until its reflectors list). `routing` gives the routing
    state in force at each call (tenant caches drop the copies of namespaces a partition does
    not own: routing.decide.owner_by_key); by default the config's. No I/O. Raises ConfigError
    naming the field when a cache's selector does not parse."""
    node_index: dict[str, str] = {}
    if routing is None:
        state = RoutingState(Placement.from_config(config), frozenset())
        routing = lambda: state  # noqa: E731

    def on_node(name: str, partition: str | None) -> None:
        if partition is None:
            node_index.pop(name, None)
        else:
            node_index[name] = partition

    built = []
    for i, spec in enumerate(config.caches):
        try:
            label_selector = parse_label_selector(spec.label_selector)
        except SelectorError as exc:
            raise ConfigError(f"caches.{i}.label_selector: {exc}") from None
        try:
            field_selector = parse_field_selector(spec.field_selector)
        except SelectorError as exc:
            raise ConfigError(f"caches.{i}.field_selector: {exc}") from None
        is_nodes = (spec.group, spec.resource) == ("", "nodes")
        by_name = (spec.group, spec.resource) == ("", "namespaces")
        keep = owner_by_key(by_name, routing) if spec.role is PartitionRole.TENANT else None
        if spec.role == SYSTEM_CACHE_ROLE and (is_namespaced(spec.group, spec.resource) or (spec.group, spec.resource) in NODE_SCOPED):
            raise ConfigError(f"caches.{i}.role: a system cache holds cluster-scoped objects of the system partition; "
                              f"{spec.resource} are not")
        codec = cache_codec(spec, config, codecs)
        cache = WatchCache(spec=spec, codec=codec, label_selector=label_selector, field_selector=field_selector,
                           on_node=on_node if is_nodes else None, keep=keep)
        twin = None
        if spec.protobuf and protobuf_items.readable(spec.group, spec.resource):
            twin_spec = spec.model_copy(update={"name": f"{spec.name}-protobuf"})
            twin = WatchCache(spec=twin_spec, codec=codec, label_selector=label_selector,
                              field_selector=field_selector, keep=keep, format=PROTOBUF_FORMAT)
        built.append(ConfiguredCache(spec=spec, cache=cache, protobuf=twin))
    return built, node_index


class CacheSet:
    """See the module docstring. Built by `from_config` (or from `build_caches`' result)."""

    def __init__(self, configured: Sequence[ConfiguredCache], node_index: dict[str, str]) -> None:
        self._configured = tuple(configured)
        self._node_index = node_index
        # the configured (JSON) caches, in config order: the order of `policy_specs`
        self.caches: tuple[WatchCache, ...] = tuple(c.cache for c in self._configured)
        self._policy_specs = tuple(c.policy_spec() for c in self.caches)
        self._clients: Mapping[str, PartitionClient] | None = None  # given by `start`
        self._ready: asyncio.Event | None = None  # given by `start`
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @classmethod
    def from_config(cls, config: ProxyConfig, *, codecs: Codecs, routing: Callable[[], RoutingState] | None = None) -> CacheSet:
        """`build_caches`, as a set. Raises ConfigError."""
        configured, node_index = build_caches(config, codecs=codecs, routing=routing)
        return cls(configured, node_index)

    # -- reads (request handlers, metrics, readiness) -----------------------------------------

    @property
    def node_index(self) -> Mapping[str, str]:
        """Node name -> the resource partition holding it, kept by the node cache (a live view)."""
        return self._node_index

    @property
    def policy_specs(self) -> tuple[CacheSpec, ...]:
        """What routing.cache_policy needs of each cache, in the order of `caches` (replaced by
        `rebase`: the codecs change)."""
        return self._policy_specs

    @property
    def synced(self) -> bool:
        """Every configured cache has synced (its twin does not count: it is filled on demand)."""
        return all(c.is_synced for c in self.caches)

    def all_caches(self) -> list[WatchCache]:
        """The configured caches and the protobuf twins being filled (metrics, /debug/caches)."""
        return [*self.caches, *(c.protobuf for c in self._configured if c.protobuf is not None and c.protobuf.filling)]

    def protobuf_twin(self, index: int) -> WatchCache | None:
        """The protobuf twin of cache `index` (None when it has none), filled from now on if
        it was not (idempotent; before `start`, nothing is filled). Plain def: callable from the
        request path."""
        twin = self._configured[index].protobuf
        if twin is not None and not twin.filling and self._clients is not None:
            log.info("watch cache %s: a client asks protobuf, filling %s", self.caches[index].spec.name, twin.spec.name)
            self._fill(twin)
        return twin

    # -- lifecycle (proxy.app) -----------------------------------------------------------------

    def start(self, clients: Mapping[str, PartitionClient], *, ready: asyncio.Event) -> None:
        """Start a reflector per live partition of every configured cache; each lists once
        `ready` is set (events are stamped with RVs of the resourceVersion table). `clients` is
        the live mapping of partition clients (a partition that joins is in it before `rebase`)."""
        self._clients, self._ready = clients, ready
        for cache in self.caches:
            self._fill(cache)

    def rebase(self, config: ProxyConfig, codecs: Codecs) -> None:
        """Serve the partition set of `config` (plain def: one loop turn with the rest of the
        change). Every cache and twin, filled or not, takes its role's new codec
        (`WatchCache.rebase`: retired partitions' objects leave as DELETED events); the filled
        ones start a reflector for each partition that joined."""
        twins = [c.protobuf for c in self._configured if c.protobuf is not None]  # filled or not: same RV space
        for cache in [*self.caches, *twins]:
            for partition in cache.rebase(cache_codec(cache.spec, config, codecs)):
                if cache.filling:
                    self._start_reflector(cache, partition)
        self._policy_specs = tuple(c.policy_spec() for c in self.caches)

    async def stop_reflectors(self, partitions: Iterable[str]) -> None:
        """Cancel and await the reflectors of `partitions` (retired) in every filled cache."""
        partitions = tuple(partitions)
        for cache in self.all_caches():
            for partition in partitions:
                task = self._tasks.pop(_task_name(cache, partition), None)
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    async def stop(self) -> None:
        """Cancel and await every reflector."""
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _fill(self, cache: WatchCache) -> None:
        """Start a reflector per live partition of the cache."""
        assert self._clients is not None
        cache.start_filling()
        for partition in cache.space:
            if partition in self._clients and partition not in cache.codec.retired:
                self._start_reflector(cache, partition)

    def _start_reflector(self, cache: WatchCache, partition: str) -> None:
        assert self._clients is not None and self._ready is not None
        reflector = Reflector(store=cache, client=self._clients[partition])
        name = _task_name(cache, partition)
        task = asyncio.create_task(_after(self._ready, reflector.run), name=name)
        task.add_done_callback(_log_unexpected_end)
        self._tasks[name] = task


def cache_codec(spec: CacheConfig, config: ProxyConfig, codecs: Codecs) -> rvcodec.RVCodec:
    """The RV codec of a cache: its role's RV space, or for a system cache the system
    partition's native RVs (rvcodec.NativeCodec)."""
    if spec.role == SYSTEM_CACHE_ROLE:
        return rvcodec.NativeCodec(config.system_partition)
    return codecs.codec(config.names(spec.role))


def _task_name(cache: WatchCache, partition: str) -> str:
    return f"reflector:{cache.spec.name}:{partition}"


async def _after(ready: asyncio.Event, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run `work()` once `ready` is set (reflectors stamp events with RVs of the epoch table)."""
    await ready.wait()
    await work()


def _log_unexpected_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background task %s died: %r", task.get_name(), task.exception())
