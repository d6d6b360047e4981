"""The aiohttp application: start-up, the request pipeline and the proxy's own endpoints.

Pipeline of an API request: authenticate (client certificate) -> RequestInfo -> `decide()` ->
forward to one partition | union list/watch over several | reject with a Status.
The proxy's own endpoints: `/livez`, `/readyz` (every partition's /readyz answers 200), and
`/metrics` (Prometheus text).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from config import ConfigError
from config.models import PartitionRole, ProxyConfig
from proxy.cache.reflector import Reflector
from proxy.cache.serve import can_serve, serve_get, serve_list, serve_watch
from proxy.cache.watch_cache import WatchCache
from proxy.context import ProxyContext
from proxy.discovery import namespaced_resources
from proxy.answers import status_response
from proxy.forward import forward
from proxy.rv_epochs import ResourceVersions
from proxy.authn import Authenticator
from proxy.authz import Authorizer, impersonate, impersonation_request
from proxy.identity import Identity
from proxy.limits import TooManyWatches, WatchLimiter
from proxy.overload import InflightLimiter, Overloaded, request_class
from proxy.metrics import Metrics
from proxy.union import union_list, union_watch
from proxy.upstream import open_upstream
from routing.cache_policy import CacheMode, plan, selected_name
from routing.decide import Route, RouteKind, RoutingState, decide, owner_of_namespaced
from routing.requestinfo import RequestInfo
from routing.selectors import SelectorError, parse_field_selector, parse_label_selector
from routing.sli import sli_labels
from routing.status import status
from routing.placement import Placement
from routing.protobuf import object_name
from routing.requestinfo import is_long_running, parse_request_info

log = logging.getLogger("partition_proxy")

CONTEXT = web.AppKey("context", ProxyContext)


def try_cache(request: web.Request, ctx: ProxyContext, info: RequestInfo, route: Route) -> tuple[WatchCache, Any] | None:
    """The cache and plan that can answer this request, if any (see routing.cache_policy)."""
    if route.kind not in (RouteKind.FAN_OUT, RouteKind.FORWARD) or info.verb not in ("list", "watch", "get"):
        return None
    for cache in ctx.caches:
        if route.rv_space != cache.space or not set(route.partitions) <= set(cache.space):
            continue
        spec = cache.policy_spec()
        found = plan(info, request.query, request.headers.get("Accept", ""), spec)
        if found is not None and can_serve(cache, found):
            return cache, found
    return None


async def serve_from_cache(
    request: web.Request, ctx: ProxyContext, info: RequestInfo, route: Route, cache: WatchCache, found: Any
) -> web.StreamResponse | None:
    # A partition path prefix limits the answer to that partition's share of the cache.
    slot = cache.space.index(route.partitions[0]) if info.partition and route.kind is RouteKind.FORWARD else None
    if found.mode is CacheMode.LIST:
        return await serve_list(request, cache, found, slot, write_timeout=ctx.config.limits.watch_write_timeout_seconds)
    if found.mode is CacheMode.GET:
        return serve_get(cache, found, slot)
    return await serve_watch(
        request, cache, found, slot, write_timeout=ctx.config.limits.watch_write_timeout_seconds, stream=ctx.stream
    )


def body_name(body: bytes, content_type: str) -> str:
    """metadata.name of a create body (JSON or protobuf), "" when absent or undecodable."""
    if content_type.startswith("application/vnd.kubernetes.protobuf"):
        return object_name(body) or ""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def forbidden(identity: Identity, info: RequestInfo, reason: str = "") -> web.Response:
    """403 as kube-apiserver words it (k8s.io/apiserver/pkg/endpoints/handlers/responsewriters)."""
    scope = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
    what = f'{info.resource} "{info.name}"' if info.name else info.resource
    message = (
        f'{what} is forbidden: User "{identity.user}" cannot {info.verb} resource "{info.resource}" '
        f'in API group "{info.api_group}" {scope}'
    )
    if reason:
        message += f": {reason}"
    details = {"name": info.name, "kind": info.resource} if info.name else {"kind": info.resource}
    return web.json_response(status(403, "Forbidden", message, details=details), status=403)


def cache_attributes(info: RequestInfo, request: web.Request) -> dict[str, Any]:
    """SubjectAccessReview resourceAttributes of a read answered from a cache, selectors
    included (the Node authorizer decides node lists by their field selector)."""
    attrs: dict[str, Any] = {
        "verb": info.verb,
        "group": info.api_group,
        "version": info.api_version,
        "resource": info.resource,
    }
    if info.namespace:
        attrs["namespace"] = info.namespace
    name = info.name or selected_name(request.query.get("fieldSelector", ""))
    if name:
        # A list or watch selecting metadata.name=<n> is authorized as a request for <n>, as
        # kube-apiserver's RequestInfoFactory does (the Node authorizer relies on it).
        attrs["name"] = name
    if request.query.get("fieldSelector"):
        attrs["fieldSelector"] = {"rawSelector": request.query["fieldSelector"]}
    if request.query.get("labelSelector"):
        attrs["labelSelector"] = {"rawSelector": request.query["labelSelector"]}
    return attrs


def _limits_response(request: web.Request, ctx: ProxyContext) -> web.Response | None:
    """413/414/431 for requests over the configured sizes, before anything is read."""
    limits = ctx.config.limits
    if len(request.rel_url.raw_path_qs) > limits.max_url_bytes:
        return status_response(414, "BadRequest", f"the request URL is longer than {limits.max_url_bytes} bytes")
    for key, value in request.headers.items():
        if len(key) + len(value) > limits.max_header_bytes:
            return status_response(431, "BadRequest", f"a request header is larger than {limits.max_header_bytes} bytes")
    if request.content_length is not None and request.content_length > limits.max_body_bytes:
        return status_response(413, "RequestEntityTooLarge", "the request body is too large")
    return None


async def handle_api(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CONTEXT]
    started = time.monotonic()
    info = parse_request_info(request.method, request.rel_url.raw_path, request.query)
    record = Answer(None)
    long_running = is_long_running(info, request.query)
    ctx.metrics.inflight.labels("long-running" if long_running else "other").inc()
    try:
        answer = await _answer(request, ctx, info, record)
        record.response, record.route_kind, record.target = answer.response, answer.route_kind, answer.target
        assert answer.response is not None
        return answer.response
    finally:
        elapsed = time.monotonic() - started
        # 499: the client went away before the answer ended (a watch it closed, usually);
        # the route and partition are those decided before it left.
        code = str(record.response.status) if record.response is not None else "499"
        verb = info.verb or request.method.lower()
        ctx.metrics.inflight.labels("long-running" if long_running else "other").dec()
        ctx.metrics.requests.labels(verb, record.route_kind, record.target, code).inc()
        ctx.metrics.duration.labels(verb, record.route_kind).observe(elapsed)
        if not long_running:
            labels = sli_labels(info, method=request.method, content_type=request.headers.get("Content-Type", ""))
            if labels is not None:
                ctx.metrics.sli.labels(*labels.values()).observe(elapsed)


@dataclass(slots=True)
class Answer:
    """The answer to a request and where it was routed. `record` in the pipeline is filled in
    as soon as the route is known, so a request its client abandons is still counted under its
    route."""

    response: web.StreamResponse | None
    route_kind: str = "reject"
    target: str = ""


async def _answer(request: web.Request, ctx: ProxyContext, info: RequestInfo, record: Answer) -> Answer:
    """The request pipeline: limits, authentication, route, impersonation, watch limits,
    then cache, forward or union."""
    if (too_big := _limits_response(request, ctx)) is not None:
        return Answer(too_big)
    identity = await ctx.authn.authenticate(request)
    if identity is None:
        return Answer(status_response(401, "Unauthorized", "Unauthorized"))
    klass = request_class(request.method, is_long_running(info, request.query))
    try:
        with ctx.overload.admit(klass, identity.user):
            return await _admitted(request, ctx, info, identity, record)
    except Overloaded as exc:
        ctx.metrics.rejected.labels(exc.request_class, exc.reason).inc()
        return Answer(status_response(429, "TooManyRequests", f"too many requests: {exc}", headers={"Retry-After": "1"}))


async def _admitted(request: web.Request, ctx: ProxyContext, info: RequestInfo, identity: Identity, record: Answer) -> Answer:
    route = decide(info, ctx.routing)
    body: bytes | None = None
    if route.kind is RouteKind.NEEDS_BODY_NAME:
        body = await request.content.read(ctx.config.limits.max_body_bytes + 1)
        if len(body) > ctx.config.limits.max_body_bytes:
            return Answer(status_response(413, "RequestEntityTooLarge", "the request body is too large"))
        route = decide(info, ctx.routing, body_name=body_name(body, request.headers.get("Content-Type", "")))
    if route.kind is RouteKind.REJECT:
        if route.plain_text:
            return Answer(web.Response(status=route.status_code, text=route.message + "\n"))
        return Answer(status_response(route.status_code, route.reason, route.message))

    wanted = impersonation_request(request.headers)
    if wanted is not None:
        acting, message = await impersonate(ctx.authz, identity, wanted, route.partitions)
        if acting is None:
            return Answer(web.json_response(status(403, "Forbidden", message), status=403), route.kind.value)
        identity = acting

    if info.verb == "watch":
        try:
            with ctx.watches.hold(identity.user):
                return await _route(request, ctx, info, route, identity, body, record)
        except TooManyWatches:
            return Answer(
                status_response(
                    429,
                    "TooManyRequests",
                    f"too many open watches for this user (limit {ctx.config.limits.max_watches_per_identity})",
                    headers={"Retry-After": "1"},
                )
            )
    return await _route(request, ctx, info, route, identity, body, record)


async def _route(
    request: web.Request, ctx: ProxyContext, info: RequestInfo, route: Route, identity: Identity, body: bytes | None,
    record: Answer,
) -> Answer:
    cached = try_cache(request, ctx, info, route)
    if cached is not None:
        cache, found = cached
        record.route_kind, record.target = "serve-from-cache", cache.spec.name
        partitions = [route.partitions[0]] if info.partition and route.kind is RouteKind.FORWARD else list(cache.space)
        decision = await ctx.authz.allowed(identity, cache_attributes(info, request), partitions)
        if not decision.allowed:
            return Answer(forbidden(identity, info, decision.reason), "serve-from-cache", cache.spec.name)
        answer = await serve_from_cache(request, ctx, info, route, cache, found)
        if answer is not None:
            return Answer(answer, "serve-from-cache", cache.spec.name)
    record.route_kind, record.target = route.kind.value, route.partitions[0] if route.kind is RouteKind.FORWARD else "union"
    if route.kind is RouteKind.FORWARD:
        response = await forward(request, ctx=ctx, info=info, route=route, identity=identity, body=body)
        return Answer(response, route.kind.value, route.partitions[0])
    if info.verb == "watch":
        return Answer(await union_watch(request, ctx=ctx, info=info, route=route, identity=identity), route.kind.value, "union")
    response = await union_list(
        request, ctx=ctx, info=info, route=route, identity=identity,
        fallback=lambda partition: cache_share(request, ctx, info, route, partition),
    )
    return Answer(response, route.kind.value, "union")


def cache_share(request: web.Request, ctx: ProxyContext, info: RequestInfo, route: Route, partition: str) -> bytes | None:
    """For a union list whose `partition` is down: that partition's share from a watch cache
    (its list RV native, as the partition would answer; items already in object form), or None when no cache can answer the request's
    selectors and media type. Only called on that degraded path, never per request."""
    query = {k: v for k, v in request.query.items() if k not in {"continue", "limit", "resourceVersionMatch"}}
    query["resourceVersion"] = "0"
    for cache in ctx.caches:
        if route.rv_space != cache.space or partition not in cache.synced:
            continue
        found = plan(info, query, request.headers.get("Accept", ""), cache.policy_spec())
        if found is None:
            continue
        slot = cache.space.index(partition)
        objects = [o for o in cache.matching(found.label_selector, found.field_selector, found.namespace) if o.slot == slot]
        head = orjson.dumps(
            {"kind": cache.kind, "apiVersion": cache.api_version, "metadata": {"resourceVersion": str(cache.vector[slot])}}
        )
        items = b",".join(o.raw for o in objects)
        return head[:-1] + b',"items":[' + items + b"]}"
    return None


async def handle_livez(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def handle_readyz(request: web.Request) -> web.Response:
    """200 once the resourceVersion table is loaded and every watch cache has synced (no
    answers from a partial view).
    A partition that is down does not make the proxy unready: its requests get 503 and the
    others are served (DESIGN §8); taking every replica out of its Service for one partition's
    outage would fail every partition's clients. The partitions' state is listed for people."""
    ctx = request.app[CONTEXT]
    table = ctx.rv.ready.is_set()
    lines = [f"[{'+' if table else '-'}]resource-version-table {'ok' if table else 'not loaded'}"]
    lines += [f"[{'+' if c.is_synced else '-'}]watch-cache-{c.spec.name} {'ok' if c.is_synced else 'not synced'}" for c in ctx.caches]
    for name, upstream in ctx.upstreams.items():
        lines.append(f"   partition {name}: {'marked down, requests get 503' if upstream.breaker.is_open else 'up'}")
    ready = table and ctx.caches_synced
    lines.append("readyz check passed" if ready else "readyz check failed")
    return web.Response(text="\n".join(lines) + "\n", status=200 if ready else 500)


async def handle_debug_caches(request: web.Request) -> web.Response:
    """Per cache: objects, bytes, watchers, ring span, last RV and relists per partition."""
    ctx = request.app[CONTEXT]
    return web.Response(body=orjson.dumps({"caches": [c.debug() for c in ctx.caches]}), content_type="application/json")


async def handle_debug_resource_versions(request: web.Request) -> web.Response:
    """The epoch table this replica serves with and the partitions' positions it last saw."""
    ctx = request.app[CONTEXT]
    return web.Response(body=orjson.dumps(ctx.rv.debug()), content_type="application/json")


async def handle_metrics(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    ctx.metrics.observe_caches(ctx.caches)
    return web.Response(body=generate_latest(ctx.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _after(ready: asyncio.Event, work: Coroutine[Any, Any, None]) -> None:
    """Run `work` once `ready` is set (reflectors stamp events with RVs of the epoch table)."""
    try:
        await ready.wait()
    except asyncio.CancelledError:
        work.close()
        raise
    await work


def _log_unexpected_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background task %s died: %r", task.get_name(), task.exception())


def build_resource_versions(config: ProxyConfig) -> ResourceVersions:
    """The RV codecs of the config's spaces. Raises ConfigError when two partition names
    share an object-form id (a 32-bit hash: practically never)."""
    try:
        return ResourceVersions(config)
    except ValueError as exc:
        raise ConfigError(f"partitions: {exc}") from None


def build_caches(config: ProxyConfig, rv: ResourceVersions | None = None) -> tuple[list[WatchCache], dict[str, str]]:
    """The configured watch caches and the node index the node cache keeps. Raises
    ConfigError naming the field when a cache's selector does not parse."""
    rv = rv or build_resource_versions(config)
    node_index: dict[str, str] = {}
    state = RoutingState(Placement.from_config(config), frozenset())

    def owner_keep(by_name: bool) -> Callable[[str, dict[str, Any]], bool]:
        def keep(partition: str, obj: dict[str, Any]) -> bool:
            meta = obj.get("metadata") or {}
            namespace = meta.get("name") if by_name else meta.get("namespace")
            return not namespace or owner_of_namespaced(namespace, state) == partition

        return keep

    def on_node(name: str, partition: str | None) -> None:
        if partition is None:
            node_index.pop(name, None)
        else:
            node_index[name] = partition

    caches = []
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
        caches.append(
            WatchCache(
                spec=spec,
                codec=rv.codec(config.names(spec.role)),
                label_selector=label_selector,
                field_selector=field_selector,
                on_node=on_node if is_nodes else None,
                keep=owner_keep(spec.resource == "namespaces" and not spec.group)
                if spec.role is PartitionRole.TENANT
                else None,
            )
        )
    return caches, node_index


def build_app(config: ProxyConfig) -> web.Application:
    """The application for `config`. Partition sessions open on start-up and close on cleanup;
    start-up fails (OSError/ValueError/aiohttp.ClientError) if a kubeconfig is unusable or the
    system partition's discovery cannot be read."""
    app = web.Application(client_max_size=config.limits.max_body_bytes, middlewares=[api_requests])

    rv = build_resource_versions(config)
    caches, node_index = build_caches(config, rv)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        upstreams = {}
        tasks: list[asyncio.Task[None]] = []
        try:
            for p in config.partitions:
                upstreams[p.name] = await open_upstream(p, config.upstream, config.failure)
            namespaced = await namespaced_resources(upstreams[config.system_partition])
            review = config.auth.token_review_partition
            app[CONTEXT] = ProxyContext(
                config=config,
                routing=RoutingState(Placement.from_config(config), namespaced, node_index),
                upstreams=upstreams,
                metrics=Metrics.create(),
                caches=caches,
                authn=Authenticator(config.auth, upstreams[review] if review else None),
                authz=Authorizer(config.auth, upstreams),
                watches=WatchLimiter(config.limits.max_watches_per_identity),
                overload=InflightLimiter(config.failure),
                rv=rv,
            )
            rv.bind(upstreams)
            task = asyncio.create_task(rv.run(), name="resource-version-table")
            task.add_done_callback(_log_unexpected_end)
            tasks.append(task)
            for cache in caches:
                for partition in cache.space:
                    reflector = Reflector(cache=cache, upstream=upstreams[partition])
                    task = asyncio.create_task(_after(rv.ready, reflector.run()), name=f"reflector:{cache.spec.name}:{partition}")
                    task.add_done_callback(_log_unexpected_end)
                    tasks.append(task)
            log.info("serving %d partitions, %d namespaced resources, %d caches", len(upstreams), len(namespaced), len(caches))
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for upstream in upstreams.values():
                await upstream.session.close()

    async def end_streams(app: web.Application) -> None:
        app[CONTEXT].end_streams()

    app.cleanup_ctx.append(lifecycle)
    app.on_shutdown.append(end_streams)
    app.router.add_get("/livez", handle_livez)
    app.router.add_get("/healthz", handle_livez)
    app.router.add_get("/readyz", handle_readyz)
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/debug/caches", handle_debug_caches)
    app.router.add_get("/debug/resource-versions", handle_debug_resource_versions)
    return app


@web.middleware
async def api_requests(request: web.Request, handler: Any) -> web.StreamResponse:
    """Everything that is not one of the proxy's own endpoints is an API request. A middleware
    rather than a catch-all route: a route pattern would not match every possible path (a
    percent-encoded newline, say), and those must reach the partitions too."""
    if request.match_info.http_exception is not None:
        return await handle_api(request)
    response: web.StreamResponse = await handler(request)
    return response
