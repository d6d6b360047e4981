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
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from proxy.context import ProxyContext
from proxy.forward import (
    expired_response,
    status_response,
    translated_query,
    unavailable_response,
    upstream_error_response,
)
from proxy.headers import downstream_response_headers, json_accept, upstream_request_headers
from proxy.identity import Identity
from proxy.limits import watch_lifetime, write_or_drop
from proxy.streams import iter_lines
from routing import rv as rvcodec
from routing.decide import NAMESPACES, Route, owner_of_namespaced
from routing.merge import KeepFn, PartitionList, WatchMerge, merge_lists, object_meta
from routing.requestinfo import RequestInfo
from routing.status import expired, status, watch_error_event

# events; each partition's reader may run this far ahead of the downstream writer before it
# waits (TCP backpressure then holds the partition). 64 covers a burst of one event per pod of a
# kubelet's node without letting one slow client buffer a partition's whole stream.
_EVENT_QUEUE_DEPTH = 64
# seconds; pause before reopening an upstream watch that ended normally, so a partition that
# closes streams at once is not hammered; doubled after each failure up to the second value.
_REOPEN_PAUSE = 0.2
_REOPEN_PAUSE_MAX = 5.0

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


class PartitionDown(Exception):
    """A partition of the union did not answer (or its circuit breaker is open)."""


async def union_list(
    request: web.Request,
    *,
    ctx: ProxyContext,
    info: RequestInfo,
    route: Route,
    identity: Identity,
    fallback: Callable[[str], bytes | None] | None = None,
) -> web.StreamResponse:
    """Answer a list (or deletecollection) from every partition of the route. A partition that
    does not answer is left out with a Warning (policy `partial`; its share comes from
    `fallback`, a watch cache, when that has it) or fails the list with 503 (`unavailable`)."""
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
        if not upstream.breaker.allow():
            raise PartitionDown(partition)
        replace: dict[str, str | None] = {"limit": None, "continue": None}
        if vector is not None:
            replace["resourceVersion"] = str(vector[route.slot(partition)])
        query = translated_query(request.rel_url.raw_query_string, replace=replace)
        try:
            async with upstream.session.request(
                request.method,
                upstream.url(info.upstream_path, query),
                headers=ctx.upstream_headers(base_headers, upstream, identity),
                data=body,
                timeout=upstream.request_timeout,
                skip_auto_headers=("Content-Type",),
            ) as resp:
                answer = partition, resp.status, resp.headers.copy(), await resp.read()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            upstream.breaker.failure()
            upstream.rotate()
            raise PartitionDown(partition) from None
        upstream.breaker.success()
        return answer

    results = await asyncio.gather(*(one(p) for p in route.partitions), return_exceptions=True)
    answers: list[tuple[str, int, Any, bytes]] = []
    warnings: list[str] = []
    for partition, result in zip(route.partitions, results):
        if isinstance(result, PartitionDown):
            upstream = ctx.upstreams[partition]
            if ctx.config.failure.union_policy == "unavailable" or request.method != "GET":
                return unavailable_response(upstream, "it does not answer")
            share = fallback(partition) if fallback is not None else None
            if share is not None:
                answers.append((partition, 200, {}, share))
                warnings.append(f'299 - "partition {partition} is unavailable: its part comes from the watch cache and may be stale"')
                ctx.metrics.degraded.labels(partition, "stale").inc()
            else:
                warnings.append(f'299 - "partition {partition} is unavailable: the list is partial"')
                ctx.metrics.degraded.labels(partition, "partial").inc()
        elif isinstance(result, BaseException):
            raise result
        else:
            answers.append(result)
    if not answers:
        return unavailable_response(ctx.upstreams[route.partitions[0]], "no partition of the union answers")
    for _, code, headers, raw in answers:
        if code >= 300:
            return web.Response(status=code, body=raw, headers=downstream_response_headers(headers, keep_length=False))

    parts = [PartitionList(p, route.slot(p), raw) for p, _, _, raw in answers]
    try:
        merged = merge_lists(parts, epoch=ctx.epoch, slots=len(route.rv_space), keep=_keep_fn(info, route, ctx))
    except ValueError as exc:
        return status_response(502, "InternalError", f"a partition answered a list that is not one: {exc}")
    headers = downstream_response_headers(answers[0][2], keep_length=False) if answers[0][2] else CIMultiDict()
    headers.pop("Content-Encoding", None)
    headers["Content-Type"] = headers.get("Content-Type", "application/json")
    for warning in warnings:
        headers.add("Warning", warning)
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
        if not upstream.breaker.allow():
            raise aiohttp.ClientConnectionError(f"partition {partition} is marked down")
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
            failure = upstream_error_response(ctx.upstreams[partition], result)
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
        """Read one partition's watch, reopening it from the last RV it reached when it ends
        or breaks; while the partition is down the other partitions keep flowing."""
        upstream = ctx.upstreams[partition]
        resp: aiohttp.ClientResponse | None = first_responses[partition]
        pause = _REOPEN_PAUSE
        while True:
            try:
                if resp is None:
                    await asyncio.sleep(pause * random.uniform(0.5, 1.5))
                    resp = await open_watch(partition, first=False)
                    if resp.status != 200:
                        raw = await resp.read()
                        await queue.put((partition, _status_event(resp.status, raw)))
                        return
                    upstream.breaker.success()
                    pause = _REOPEN_PAUSE
                async with resp:
                    async for line in iter_lines(resp):
                        await queue.put((partition, line))
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                upstream.breaker.failure()
                upstream.rotate()
                pause = min(pause * 2, _REOPEN_PAUSE_MAX)
            resp = None

    response = web.StreamResponse(status=200)
    response.content_type = "application/json"
    first_type = next(iter(first_responses.values())).headers.get("Content-Type")
    if first_type:
        response.headers["Content-Type"] = first_type
    response.enable_chunked_encoding()
    await response.prepare(request)

    lifetime = watch_lifetime(query)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + lifetime
    tasks = [asyncio.create_task(pump(p), name=f"union-watch:{p}") for p in route.partitions]

    def finish() -> None:  # shutdown: the marker ("", b"") ends the loop below
        while queue.full():
            queue.get_nowait()
        queue.put_nowait(("", b""))

    try:
        ctx.streams.add(finish)
        if ctx.shutting_down:
            finish()
        while not merge.finished:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                partition, line = await asyncio.wait_for(queue.get(), timeout=remaining)
            except asyncio.TimeoutError:
                break
            if not partition:
                break
            out = merge.on_line(partition, line)
            if out:
                await write_or_drop(request, response, b"".join(out), timeout=ctx.config.limits.watch_write_timeout_seconds)
    finally:
        ctx.streams.discard(finish)
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
