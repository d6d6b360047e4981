"""What every request handler needs, assembled once at start-up (no module-level singletons)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from multidict import CIMultiDict

from config.models import ProxyConfig
from proxy.authn import Authenticator
from proxy.authz import Authorizer
from proxy.cache.watch_cache import WatchCache
from proxy.limits import WatchLimiter
from proxy.overload import InflightLimiter
from proxy.identity import Identity, add_impersonation
from proxy.metrics import Metrics
from proxy.rv_epochs import ResourceVersions
from proxy.upstream import Upstream
from routing.decide import RoutingState


@dataclass(slots=True)
class ProxyContext:
    config: ProxyConfig
    routing: RoutingState
    upstreams: dict[str, Upstream]
    metrics: Metrics
    caches: list[WatchCache]
    authn: Authenticator
    authz: Authorizer
    watches: WatchLimiter
    overload: InflightLimiter
    rv: ResourceVersions  # the codec of each RV space and the shared epoch table
    # closers of open streams, called on SIGTERM so each ends cleanly and its client re-watches
    # elsewhere (DESIGN §8)
    streams: set[Callable[[], None]] = field(default_factory=set)
    shutting_down: bool = False

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

    def end_streams(self) -> None:
        """Ask every open stream to end now (plain def: runs atomically)."""
        self.shutting_down = True
        for closer in tuple(self.streams):
            closer()

    @property
    def caches_synced(self) -> bool:
        return all(c.is_synced for c in self.caches)

    def upstream_headers(self, base: CIMultiDict[str], upstream: Upstream, identity: Identity) -> CIMultiDict[str]:
        """`base` (already stripped of client identity headers) plus the proxy's own credential
        for `upstream` and the client's identity as impersonation headers."""
        headers = CIMultiDict(base)
        if upstream.auth_header:
            headers["Authorization"] = upstream.auth_header
        add_impersonation(headers, identity)
        return headers
