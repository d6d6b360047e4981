"""What every request handler needs, assembled once at start-up by `proxy.app` (no module-level
singletons)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from contextlib import contextmanager
from dataclasses import dataclass, field

from config.models import ProxyConfig
from proxy.authn import Authenticator
from proxy.authz import Authorizer
from proxy.cache.watch_cache import WatchCache
from proxy.clients.partition import PartitionClient
from proxy.watch_limits import WatchLimiter
from proxy.metrics import Metrics
from proxy.overload import InflightLimiter
from proxy.rv_epochs import ResourceVersions
from routing.cache_policy import CacheSpec
from routing.decide import RoutingState

if TYPE_CHECKING:  # proxy.handlers.kubelet needs this module
    from proxy.clients.kubelet import KubeletClient


@dataclass(slots=True)
class ProxyContext:
    config: ProxyConfig
    routing: RoutingState
    clients: dict[str, PartitionClient]  # one per partition, by name
    metrics: Metrics
    caches: list[WatchCache]
    authn: Authenticator
    authz: Authorizer
    watches: WatchLimiter
    overload: InflightLimiter
    rv: ResourceVersions  # the codec of each RV space and the shared epoch table
    # what routing.cache_policy needs of each cache, in the order of `caches` (fixed at start-up)
    cache_specs: list[CacheSpec] = field(default_factory=list)
    # closers of open streams, called on SIGTERM so each ends cleanly and its client re-watches
    # on another replica (the failure semantics in README.md)
    streams: set[Callable[[], None]] = field(default_factory=set)
    shutting_down: bool = False
    # called (plain defs, in one loop turn) after the partition set changed: open union
    # watches take partitions that joined and end on ones that retired (proxy.partition_set)
    partition_set_listeners: set[Callable[[], None]] = field(default_factory=set)
    # set after a definition (a CRD) is written through the proxy: discovery is read again soon
    definitions_changed: asyncio.Event = field(default_factory=asyncio.Event)
    # the proxy's client for kubelets (config `kubelet`), None when not configured
    kubelet: KubeletClient | None = None
    # start filling a cache's protobuf twin (idempotent), set by proxy.app
    fill_protobuf_cache: Callable[[WatchCache], None] | None = None
    # what /debug/partitions shows (proxy.partition_set.PartitionSet.debug), set by proxy.app
    debug_partitions: Callable[[], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if not self.cache_specs:
            self.cache_specs = [c.policy_spec() for c in self.caches]

    @contextmanager
    def stream(self, closer: Callable[[], None]) -> Iterator[None]:
        """Register an open stream's closer for the duration of the block."""
        if self.shutting_down:
            closer()
        self.streams.add(closer)
        try:
            yield
        finally:
            self.streams.discard(closer)

    @contextmanager
    def partition_set_listener(self, listener: Callable[[], None]) -> Iterator[None]:
        """Tell `listener` about changes of the partition set for the duration of the block."""
        self.partition_set_listeners.add(listener)
        try:
            yield
        finally:
            self.partition_set_listeners.discard(listener)

    def partition_set_changed(self) -> None:
        """Call every listener (plain def: atomic with the change that preceded it)."""
        for listener in tuple(self.partition_set_listeners):
            listener()

    def end_streams(self) -> None:
        """Ask every open stream to end now (plain def: runs atomically)."""
        self.shutting_down = True
        for closer in tuple(self.streams):
            closer()

    def all_caches(self) -> list[WatchCache]:
        """The configured caches and the protobuf twins being filled (metrics, /debug/caches)."""
        return [*self.caches, *(c.protobuf for c in self.caches if c.protobuf is not None and c.protobuf.filling)]

    @property
    def caches_synced(self) -> bool:
        return all(c.is_synced for c in self.caches)
