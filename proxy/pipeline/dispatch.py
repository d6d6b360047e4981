"""The last step of the pipeline: answer from a watch cache when one can, else forward to the one
partition or fan out over several (union list, union watch); a write of a cluster-scoped
definition every TP needs is replicated (`proxy.handlers.replicate`); discovery and OpenAPI documents
are merged over the TPs (`proxy.handlers.discovery_merge`); a pod's log is asked of its node's kubelet
(`proxy.handlers.kubelet`).

A read answered from a cache never reaches a partition, so it is authorized here with
SubjectAccessReviews to every partition the answer comes from (`proxy.authz`). A partition path
prefix limits a cached answer to that partition's share.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy import answers
from proxy.cache.serve import can_serve, serve_expired, serve_get, serve_list, serve_watch, too_old
from proxy.cache.watch_cache import WatchCache
from proxy.clients.partition import InvalidRequest
from proxy.context import ProxyContext
from proxy.handlers.discovery_merge import serve_discovery
from proxy.handlers.forward import forward
from proxy.handlers.kubelet import pod_log, pod_port_forward, pod_stream
from proxy.messages import Exchange
from proxy.handlers.replicate import replicate
from proxy.handlers.union_list import union_list
from proxy.handlers.union_watch import union_watch
from routing.access import resource_attributes
from routing.cache_policy import CacheMode, CachePlan, choose, is_consistent_read, prefers_protobuf
from routing.decide import RouteKind

_CACHE_VERBS = frozenset({"list", "watch", "get"})
# Parameters that do not apply when a union list takes a partition's share from a cache.
_NOT_FOR_SHARE = frozenset({"continue", "limit", "resourceVersionMatch"})


class Dispatch:
    """Cache, forward or union (module docstring)."""

    def __init__(self, ctx: ProxyContext) -> None:
        self.ctx = ctx
        # (group, resource) of every cache (fixed at start-up): most requests are of a resource no
        # cache holds and skip the search at once
        self._cached = frozenset((spec.group, spec.resource) for spec in ctx.cache_set.policy_specs)
        # cache name -> its watchers_behind counter's `inc`, made once: every cache watcher keeps
        # it for its whole life, and a bound method made per watch is ~160 bytes more per watch
        self._behind: dict[str, Callable[[], None]] = {}

    async def __call__(self, ex: Exchange) -> None:
        try:
            await self._dispatch(ex)
        except InvalidRequest as exc:  # a path or header the wire cannot carry: nothing was sent
            if not ex.writer.started:
                await ex.respond(answers.bad_request(str(exc)))

    async def _dispatch(self, ex: Exchange) -> None:
        route = ex.route
        assert route is not None
        info = ex.info
        if (info.verb in _CACHE_VERBS and (info.api_group, info.resource) in self._cached
                and not is_consistent_read(info, ex.request.query) and await self._from_cache(ex)):
            return
        ex.route_kind = route.kind.value
        if route.kind is RouteKind.FORWARD and route.replicate_to:
            await replicate(ex, self.ctx)
        elif route.kind is RouteKind.FORWARD and route.discovery_from and await serve_discovery(ex, self.ctx):
            pass
        elif route.kind is RouteKind.FORWARD and route.via_kubelet and self.ctx.kubelet is not None:
            handler = {"log": pod_log, "portforward": pod_port_forward}.get(ex.info.subresource, pod_stream)
            await handler(ex, self.ctx)
        elif route.kind is RouteKind.FORWARD:
            await forward(ex, self.ctx)
        elif ex.info.verb == "watch":
            await union_watch(ex, self.ctx)
        else:
            await union_list(ex, self.ctx, fallback=lambda partition: self._cache_share(ex, partition))

    async def _from_cache(self, ex: Exchange) -> bool:
        """Answer from the first cache that can; False when none can (or a GET's object is not
        in it): the request goes upstream."""
        ctx, route, request = self.ctx, ex.route, ex.request
        assert route is not None and ex.identity is not None
        pinned = bool(ex.info.partition) and route.kind is RouteKind.FORWARD
        accept = request.headers.get("Accept", "")
        for index, found in choose(ctx.cache_set.policy_specs, ex.info, request.query, accept,
                                   rv_space=route.rv_space, partitions=route.partitions):
            cache = self._in_format(index, found, accept)
            expired = too_old(cache, found)
            if not expired and not can_serve(cache, found):
                continue
            ex.route_kind, ex.target = "serve-from-cache", cache.spec.name
            # a retired partition keeps its slot in the cache's space but has no client: ask the live ones
            partitions = [route.partitions[0]] if pinned else [p for p in cache.space if p not in cache.codec.retired]
            decision = await ctx.authz.allowed(ex.identity, resource_attributes(ex.info, request.query), partitions)
            if not decision.allowed:
                await ex.respond(answers.refused(ex.identity, ex.info, decision.reason, error=decision.error))
                return True
            slot = cache.space.index(route.partitions[0]) if pinned else None
            if expired:
                await serve_expired(ex.writer, cache, request.query.get("resourceVersion", ""))
            elif found.mode is CacheMode.LIST:
                await serve_list(ex.writer, cache, found, slot)
            elif found.mode is CacheMode.WATCH:
                behind = self._behind.get(cache.spec.name)
                if behind is None:
                    behind = self._behind[cache.spec.name] = ctx.metrics.watchers_behind.labels(cache.spec.name).inc
                await serve_watch(ex, cache, found, slot, streams=ctx.streams, on_behind=behind)
            else:
                answer = serve_get(cache, found, slot)
                if answer is None:
                    return False
                await ex.respond(answer)
            return True
        return False

    def _in_format(self, index: int, found: CachePlan, accept: str) -> WatchCache:
        """Cache `index`'s protobuf twin for a client that asks protobuf first, once the twin
        can answer (the cache set starts filling it for the first such client); else the cache
        itself, whose JSON such a client also accepts."""
        cache = self.ctx.cache_set.caches[index]
        if not prefers_protobuf(accept):
            return cache
        twin = self.ctx.cache_set.protobuf_twin(index)
        if twin is None:
            return cache
        return twin if can_serve(twin, found) else cache

    def _cache_share(self, ex: Exchange, partition: str) -> bytes | None:
        """For a union list whose `partition` is down: that partition's share from a watch cache
        (its list RV native, as the partition would answer; items already in object form), or
        None when no cache can answer the request's selectors. Only called on that degraded
        path, never per request."""
        ctx, route = self.ctx, ex.route
        assert route is not None
        query = {k: v for k, v in ex.request.query.items() if k not in _NOT_FOR_SHARE}
        query["resourceVersion"] = "0"
        for index, found in choose(ctx.cache_set.policy_specs, ex.info, query, ex.request.headers.get("Accept", ""),
                                   rv_space=route.rv_space, partitions=[partition]):
            cache = ctx.cache_set.caches[index]
            if cache.has_synced(partition):
                return cache.share_bytes(cache.space.index(partition), found.label_selector, found.field_selector, found.namespace)
        return None
