"""Union LIST and union WATCH over several partitions (route kind `fan-out`).

Union list: the same request goes to every partition at once (JSON; `limit`/`continue` are
dropped, which the API allows: "servers may ignore limit"); if any partition fails, its answer
is returned as it came; otherwise `routing.merge.merge_lists` joins them under one proxy RV.

Union watch: one upstream watch per partition, always with bookmarks. A client starting from
"" or "0" is served by upstream streaming lists (sendInitialEvents=true, KEP-3157), so each
partition's initial-events-end bookmark tells the proxy that partition's position and every
later RV names all of them. An upstream stream that ends normally is reopened from that
partition's last RV, invisibly to the client; a 410 ends the union watch with an `Expired`
ERROR event so the client relists. `routing.merge.WatchMerge` decides what is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from proxy.context import ProxyContext
from proxy.forward import expired_response, status_response, translated_query, upstream_error_response
from proxy.headers import downstream_response_headers, json_accept, upstream_request_headers
from proxy.identity import Identity
from proxy.limits import write_or_drop
from proxy.streams import iter_lines
from routing import rv as rvcodec
from routing.decide import NAMESPACES, Route, owner_of_namespaced
from routing.merge import KeepFn, PartitionList, WatchMerge, merge_lists, object_meta
from routing.requestinfo import RequestInfo
from routing.status import expired, status, watch_error_event

# seconds; a watch without timeoutSeconds lives a random time in [1800, 3600), as
# kube-apiserver picks from --min-request-timeout (1800 s) (apiserver endpoints/handlers/get.go).
_DEFAULT_WATCH_SECONDS = (1800.0, 3600.0)
# events; each partition's reader may run this far ahead of the downstream writer before it
# waits (TCP backpressure then holds the partition). 64 covers a burst of one event per pod of a
# kubelet's node without letting one slow client buffer a partition's whole stream.
_EVENT_QUEUE_DEPTH = 64
# seconds; pause before reopening an upstream watch that ended normally, so a partition that
# closes streams at once is not hammered.
_REOPEN_PAUSE = 0.2

_TRUE = {"true", "1"}


def _keep_fn(info: RequestInfo, route: Route, ctx: ProxyContext) -> KeepFn | None:
    """Drop objects that the partition which sent them does not own (every TP has its own
    default, kube-system, ...; DESIGN §4)."""
    if not route.owner_filter:
        return None
    by_name = (info.api_group, info.resource) == NAMESPACES

    def keep(partition: str, obj: dict[str, Any]) -> bool:
        meta = object_meta(obj)
        namespace = meta.get("name") if by_name else meta.get("namespace")
        if not namespace:
            return True
        return owner_of_namespaced(namespace, ctx.routing) == partition

    return keep


def _start_vector(client_rv: str, route: Route, ctx: ProxyContext) -> tuple[int, ...] | None:
    """The vector a client RV names, None for ""/"0"/non-numeric. Raises RVError."""
    if not client_rv.isdigit() or client_rv == "0":
        return None
    vector = rvcodec.decode(client_rv, epoch=ctx.epoch, slots=len(route.rv_space))
    if not all(vector):
        raise rvcodec.RVError("resourceVersion does not name a position in every partition")
    return vector


async def union_list(
    request: web.Request, *, ctx: ProxyContext, info: RequestInfo, route: Route, identity: Identity
) -> web.StreamResponse:
    """Answer a list (or deletecollection) from every partition of the route."""
    client_rv = request.query.get("resourceVersion", "")
    if request.query.get("continue"):
        return status_response(400, "BadRequest", "invalid continue token")
    try:
        vector = _start_vector(client_rv, route, ctx)
    except rvcodec.RVError as exc:
        return expired_response(f"too old resource version: {exc}")

    base_headers = upstream_request_headers(request.headers)
    base_headers["Accept"] = json_accept(request.headers.get("Accept", "application/json"))
    base_headers.pop("Accept-Encoding", None)
    body = await request.read() if request.can_read_body else None

    async def one(partition: str) -> tuple[str, int, Any, bytes]:
        upstream = ctx.upstreams[partition]
        replace: dict[str, str | None] = {"limit": None, "continue": None}
        if vector is not None:
            replace["resourceVersion"] = str(vector[route.slot(partition)])
        query = translated_query(request.rel_url.raw_query_string, replace=replace)
        async with upstream.session.request(
            request.method,
            upstream.url(info.upstream_path, query),
            headers=ctx.upstream_headers(base_headers, upstream, identity),
            data=body,
            timeout=upstream.request_timeout,
            skip_auto_headers=("Content-Type",),
        ) as resp:
            return partition, resp.status, resp.headers.copy(), await resp.read()

    results = await asyncio.gather(*(one(p) for p in route.partitions), return_exceptions=True)
    for partition, result in zip(route.partitions, results):
        if isinstance(result, BaseException):
            if not isinstance(result, (aiohttp.ClientError, asyncio.TimeoutError, OSError)):
                raise result
            return upstream_error_response(partition, result)
    answers = [r for r in results if not isinstance(r, BaseException)]
    for _, code, headers, raw in answers:
        if code >= 300:
            return web.Response(status=code, body=raw, headers=downstream_response_headers(headers, keep_length=False))

    parts = [PartitionList(p, route.slot(p), raw) for p, _, _, raw in answers]
    try:
        merged = merge_lists(parts, epoch=ctx.epoch, slots=len(route.rv_space), keep=_keep_fn(info, route, ctx))
    except ValueError as exc:
        return status_response(502, "InternalError", f"a partition answered a list that is not one: {exc}")
    headers = downstream_response_headers(answers[0][2], keep_length=False)
    headers.pop("Content-Encoding", None)
    return web.Response(status=200, body=merged, headers=headers)


async def union_watch(
    request: web.Request, *, ctx: ProxyContext, info: RequestInfo, route: Route, identity: Identity
) -> web.StreamResponse:
    """Merge one watch per partition into one stream (see module docstring)."""
    query = request.query
    client_rv = query.get("resourceVersion", "")
    client_sie = query.get("sendInitialEvents", "").lower() in _TRUE
    try:
        start = _start_vector(client_rv, route, ctx)
    except rvcodec.RVError as exc:
        return expired_response(f"too old resource version: {exc}")
    streaming_start = start is None and client_rv in {"", "0"}
    initial = set(route.partitions) if (client_sie or streaming_start) else set()
    merge = WatchMerge(
        epoch=ctx.epoch,
        space=route.rv_space,
        start=start or (0,) * len(route.rv_space),
        initial=initial,
        client_initial_events=client_sie,
        bookmarks=query.get("allowWatchBookmarks", "").lower() in _TRUE,
        keep=_keep_fn(info, route, ctx),
    )

    base_headers = upstream_request_headers(request.headers)
    base_headers["Accept"] = json_accept(request.headers.get("Accept", "application/json"))
    base_headers.pop("Accept-Encoding", None)

    def upstream_query(partition: str, *, first: bool) -> str:
        replace: dict[str, str | None] = {"allowWatchBookmarks": "true", "timeoutSeconds": None, "watch": "true"}
        native = merge.vector[route.slot(partition)]
        if (first or partition in merge.initial) and (client_sie or streaming_start):
            replace["sendInitialEvents"] = "true"
            replace["resourceVersionMatch"] = "NotOlderThan"
            replace["resourceVersion"] = str(native) if native else client_rv
        else:
            replace["sendInitialEvents"] = None
            replace["resourceVersionMatch"] = None
            replace["resourceVersion"] = str(native) if native else client_rv
        return translated_query(request.rel_url.raw_query_string, replace=replace)

    async def open_watch(partition: str, *, first: bool) -> aiohttp.ClientResponse:
        upstream = ctx.upstreams[partition]
        return await upstream.session.get(
            upstream.url(info.upstream_path, upstream_query(partition, first=first)),
            headers=ctx.upstream_headers(base_headers, upstream, identity),
            timeout=upstream.watch_timeout,
        )

    opened = await asyncio.gather(*(open_watch(p, first=True) for p in route.partitions), return_exceptions=True)
    failure: web.StreamResponse | None = None
    for partition, result in zip(route.partitions, opened):
        if failure is not None:
            continue
        if isinstance(result, BaseException):
            if not isinstance(result, (aiohttp.ClientError, asyncio.TimeoutError, OSError)):
                raise result
            failure = upstream_error_response(partition, result)
        elif result.status != 200:
            body = await result.read()
            failure = web.Response(
                status=result.status, body=body, headers=downstream_response_headers(result.headers, keep_length=False)
            )
    if failure is not None:
        for result in opened:
            if isinstance(result, aiohttp.ClientResponse):
                result.close()
        return failure
    first_responses = dict(zip(route.partitions, (r for r in opened if isinstance(r, aiohttp.ClientResponse))))

    queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue(maxsize=_EVENT_QUEUE_DEPTH)

    async def pump(partition: str) -> None:
        """Read one partition's watch, reopening it when it ends normally."""
        resp: aiohttp.ClientResponse | None = first_responses[partition]
        while True:
            try:
                if resp is None:
                    await asyncio.sleep(_REOPEN_PAUSE)
                    resp = await open_watch(partition, first=False)
                    if resp.status != 200:
                        raw = await resp.read()
                        await queue.put((partition, _status_event(resp.status, raw)))
                        return
                async with resp:
                    async for line in iter_lines(resp):
                        await queue.put((partition, line))
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                pass  # reopen from the last RV this partition reached
            resp = None

    response = web.StreamResponse(status=200)
    response.content_type = "application/json"
    first_type = next(iter(first_responses.values())).headers.get("Content-Type")
    if first_type:
        response.headers["Content-Type"] = first_type
    response.enable_chunked_encoding()
    await response.prepare(request)

    timeout_param = query.get("timeoutSeconds", "")
    lifetime = float(timeout_param) if timeout_param.isdigit() else random.uniform(*_DEFAULT_WATCH_SECONDS)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + lifetime
    tasks = [asyncio.create_task(pump(p), name=f"union-watch:{p}") for p in route.partitions]
    try:
        while not merge.finished:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                partition, line = await asyncio.wait_for(queue.get(), timeout=remaining)
            except asyncio.TimeoutError:
                break
            out = merge.on_line(partition, line)
            if out:
                await write_or_drop(request, response, b"".join(out), timeout=ctx.config.limits.watch_write_timeout_seconds)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response


def _status_event(code: int, raw: bytes) -> bytes:
    """An ERROR event line for an upstream watch that could not be reopened."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict) or obj.get("kind") != "Status":
        obj = expired("watch could not be resumed") if code == 410 else status(code, "InternalError", "watch could not be resumed")
    return watch_error_event(obj)
