"""What every request handler needs, assembled once at start-up by `proxy.app` (no module-level
singletons).

`ProxyContext` is frozen: its parts are fixed for the life of the process. What changes while
it runs is held by parts that are mutable on purpose, each saying why: the partition set in
force (`InForce`: a partition-set change and a discovery refresh replace it), the partition
clients (partitions join and retire), the open streams (`OpenStreams`: registered as they open,
ended on SIGTERM), the listeners of partition-set changes and the definitions-changed event.
The watch caches, their protobuf twins and reflectors are the cache set's
(`proxy.cache.cache_set.CacheSet`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from config.models import ProxyConfig
from proxy.authn import Authenticator
from proxy.authz import Authorizer
from proxy.cache.cache_set import CacheSet
from proxy.clients.partition import PartitionClient
from proxy.flowcontrol_metrics import FlowcontrolMetrics
from proxy.metrics import Metrics
from proxy.overload import InflightLimiter
from proxy.rv_epochs import ResourceVersions
from proxy.watch_limits import WatchLimiter
from routing.decide import RoutingState

if TYPE_CHECKING:  # proxy.handlers.kubelet needs this module
    from proxy.clients.kubelet import KubeletClient


@dataclass(slots=True)
class InForce:
    """The partition set in force and the routing state made of it. Mutable on purpose: a
    partition-set change (`ProxyApp.reconfigure`) and a discovery refresh replace these, each in
    one loop turn, and every request reads the one in force when it is routed."""

    config: ProxyConfig
    routing: RoutingState


class OpenStreams:
    """Closers of open streams, by the client connection each goes out on, called at shutdown
    so each stream ends cleanly and its client re-watches on another replica (the failure
    semantics in docs/serving.md). The shutdown ends them connection by connection
    (`end_connection`, paced by `proxy.fronts.drain`), then whatever is left (`end_all`).
    Mutable on purpose: streams come and go, and a drained connection is a state every later
    stream on it must see."""

    __slots__ = ("_by_connection", "_drained", "shutting_down")

    def __init__(self) -> None:
        self._by_connection: dict[object, set[Callable[[], None]]] = {}
        self._drained: set[object] = set()  # connections whose streams were ended (only during a shutdown)
        self.shutting_down = False  # end_all ran: every stream, on any connection, ends at once

    def __len__(self) -> int:
        return sum(len(c) for c in self._by_connection.values())

    def add(self, closer: Callable[[], None], connection: object) -> None:
        """Register an open stream's `closer` on the client `connection` (any hashable key:
        `ResponseWriter.connection`); it is called at once when that connection is already
        drained or the proxy is shutting down."""
        self._by_connection.setdefault(connection, set()).add(closer)
        if self.shutting_down or connection in self._drained:
            closer()

    def discard(self, closer: Callable[[], None], connection: object) -> None:
        """Forget `closer` (its stream ended); unknown closers are ignored."""
        closers = self._by_connection.get(connection)
        if closers is not None:
            closers.discard(closer)
            if not closers:
                del self._by_connection[connection]

    @contextmanager
    def stream(self, closer: Callable[[], None], connection: object) -> Iterator[None]:
        """Register an open stream's closer for the duration of the block (`add`)."""
        self.add(closer, connection)
        try:
            yield
        finally:
            self.discard(closer, connection)

    def end_connection(self, connection: object) -> int:
        """Ask every open stream on `connection` to end now, and every later one on it at once;
        returns how many were asked (plain def: runs atomically)."""
        self._drained.add(connection)
        closers = tuple(self._by_connection.get(connection, ()))
        for closer in closers:
            closer()
        return len(closers)

    def end_all(self) -> None:
        """Ask every open stream to end now, and every later one at once (plain def)."""
        self.shutting_down = True
        for closers in tuple(self._by_connection.values()):
            for closer in tuple(closers):
                closer()


@dataclass(frozen=True, slots=True)
class ProxyContext:
    """What handlers need (the module docstring); `config` and `routing` read the ones in force."""

    in_force: InForce
    # one per live partition, by name; mutated in place (never replaced) when partitions join
    # or retire (ProxyApp.reconfigure), so every holder sees the clients in force
    clients: dict[str, PartitionClient]
    metrics: Metrics
    cache_set: CacheSet  # the watch caches, their protobuf twins, reflectors and the node index
    authn: Authenticator
    authz: Authorizer
    watches: WatchLimiter
    overload: InflightLimiter
    rv: ResourceVersions  # the codec of each RV space and the shared epoch table
    # the proxy's client for kubelets (config `kubelet`), None when not configured
    kubelet: KubeletClient | None = None
    streams: OpenStreams = field(default_factory=OpenStreams)  # mutable on purpose: see OpenStreams
    # called (plain defs, in one loop turn) after the partition set changed: open union
    # watches take partitions that joined and end on ones that retired (proxy.partition_set);
    # a mutable set: union watches register for their lifetime
    partition_set_listeners: set[Callable[[], None]] = field(default_factory=set)
    # set after a definition (a CRD) is written through the proxy: discovery is read again soon
    definitions_changed: asyncio.Event = field(default_factory=asyncio.Event)
    # the partitions' API Priority and Fairness samples /metrics carries, reused between scrapes;
    # told when a FlowSchema or PriorityLevelConfiguration is written through the proxy
    flowcontrol: FlowcontrolMetrics = field(default_factory=FlowcontrolMetrics)

    @property
    def config(self) -> ProxyConfig:
        """The config in force (`InForce`)."""
        return self.in_force.config

    @property
    def routing(self) -> RoutingState:
        """The routing state in force (`InForce`)."""
        return self.in_force.routing

    def stream(self, closer: Callable[[], None], connection: object) -> AbstractContextManager[None]:
        """Register an open stream's closer on its client connection for the duration of the
        block (`OpenStreams.stream`)."""
        return self.streams.stream(closer, connection)

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
