"""Union LIST and union WATCH over several partitions (route kind `fan-out`).

Union list: the same request goes to every partition at once (`limit`/`continue` are dropped,
which the API allows: "servers may ignore limit"); if any partition fails, its answer is
returned as it came; otherwise `routing.merge` joins them under one proxy RV, in protobuf when
the client asked for it (kube-apiserver's own choice of media type is kept), else JSON.

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
from proxy.answers import expired_response, invalid_rv_response, not_acceptable_response, status_response, unavailable_response
from proxy.forward import is_malformed_rv, marked_down_response, translated_query, upstream_error_response
from proxy.headers import downstream_response_headers, union_accept, upstream_request_headers
from proxy.health import TRANSPORT_ERRORS, PartitionMarkedDown
from proxy.identity import Identity
from proxy.limits import watch_lifetime, write_or_drop
from proxy.streams import iter_lines
from routing import protobuf as pb
from routing import rv as rvcodec
from routing import translate
from routing.decide import NAMESPACES, Route, owner_of_namespaced
from routing.merge import KeepFn, PartitionList, WatchMerge, merge_lists, merge_protobuf_lists, object_meta
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


async def _start_vector(client_rv: str, route: Route, ctx: ProxyContext) -> tuple[int, ...] | None:
    """The vector a client RV names, None for ""/"0"/non-numeric. Raises RVError (an RV of an
    epoch newer than this replica knows is looked up in the shared table first)."""
    if not client_rv.isdigit() or client_rv == "0":
        return None
    codec = ctx.rv.codec(route.rv_space)
    try:
        vector = codec.decode(client_rv)
    except rvcodec.RVTooOld as exc:
        if exc.epoch <= codec.table.newest_number:
            raise
        await ctx.rv.sync_now()
        vector = codec.decode(client_rv)
    if not all(vector):
        raise rvcodec.RVNotInSpace("resourceVersion does not name a position in every partition")
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
        vector = await _start_vector(client_rv, route, ctx)
    except rvcodec.RVError as exc:
        return expired_response(f"too old resource version: {client_rv} ({exc})")
    accept = union_accept(request.headers.get("Accept", ""))
    if accept is None:
        return not_acceptable_response()
    if translate.encoding_of(request.headers.get("Content-Type", "")) is translate.Encoding.CBOR and request.can_read_body:
        return status_response(415, "UnsupportedMediaType", "the body of the request was in an unknown format")

    base_headers = upstream_request_headers(request.headers)
    base_headers["Accept"] = accept
    base_headers.pop("Accept-Encoding", None)
    body = await request.read() if request.can_read_body else None

    async def one(partition: str) -> tuple[str, int, Any, bytes]:
        upstream = ctx.upstreams[partition]
        replace: dict[str, str | None] = {"limit": None, "continue": None}
        if vector is not None:
            replace["resourceVersion"] = str(vector[route.slot(partition)])
        query = translated_query(request.rel_url.raw_query_string, replace=replace)
        try:
            with upstream.breaker.attempt():
                resp = await upstream.session.request(
                    request.method,
                    upstream.url(info.upstream_path, query),
                    headers=ctx.upstream_headers(base_headers, upstream, identity),
                    data=body,
                    timeout=upstream.request_timeout,
                    skip_auto_headers=("Content-Type",),
                )
            async with resp:
                return partition, resp.status, resp.headers.copy(), await resp.read()
        except PartitionMarkedDown:
            raise PartitionDown(partition) from None
        except TRANSPORT_ERRORS:
            upstream.rotate()
            raise PartitionDown(partition) from None

    results = await asyncio.gather(*(one(p) for p in route.partitions), return_exceptions=True)
    answers: list[tuple[str, int, Any, bytes]] = []
    down: list[str] = []
    for partition, result in zip(route.partitions, results):
        if isinstance(result, PartitionDown):
            upstream = ctx.upstreams[partition]
            if ctx.config.failure.union_policy == "unavailable" or request.method != "GET":
                return unavailable_response(partition, "it does not answer", upstream.breaker.retry_after())
            down.append(partition)
        elif isinstance(result, BaseException):
            raise result
        else:
            answers.append(result)
    if not answers:
        first = ctx.upstreams[route.partitions[0]]
        return unavailable_response(first.name, "no partition of the union answers", first.breaker.retry_after())
    for _, code, headers, raw in answers:
        if code >= 300:
            return web.Response(status=code, body=raw, headers=downstream_response_headers(headers, keep_length=False))

    media = {translate.encoding_of(h.get("Content-Type", "")) for _, _, h, _ in answers}
    protobuf = media == {translate.Encoding.PROTOBUF}
    warnings: list[str] = []
    for partition in down:
        share = fallback(partition) if fallback is not None and not protobuf else None
        if share is not None:
            answers.append((partition, 200, {}, share))
            warnings.append(f'299 - "partition {partition} is unavailable: its part comes from the watch cache and may be stale"')
            ctx.metrics.degraded.labels(partition, "stale").inc()
        else:
            warnings.append(f'299 - "partition {partition} is unavailable: the list is partial"')
            ctx.metrics.degraded.labels(partition, "partial").inc()

    parts = [PartitionList(p, route.slot(p), raw) for p, _, _, raw in answers]
    codec = ctx.rv.codec(route.rv_space)
    try:
        if len(media) > 1:
            raise ValueError(f"partitions answered in different media types: {sorted(m.value for m in media)}")
        if protobuf:
            merged = merge_protobuf_lists(parts, codec=codec, keep=_keep_fn(info, route, ctx))
        else:
            merged = merge_lists(parts, codec=codec, keep=_keep_fn(info, route, ctx))
    except rvcodec.RVUnencodable as exc:
        ctx.rv.request_sync()
        return unavailable_response(route.partitions[0], f"its resourceVersion table is behind ({exc})", 1)
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
    """Merge one watch per partition into one stream (see module docstring). The stream is in
    protobuf when the client accepts it (kube-apiserver's choice from the client's Accept),
    else JSON."""
    query = request.query
    client_rv = query.get("resourceVersion", "")
    client_sie = query.get("sendInitialEvents", "").lower() in _TRUE
    if is_malformed_rv(client_rv):
        return invalid_rv_response(client_rv, "not a decimal integer")
    try:
        start = await _start_vector(client_rv, route, ctx)
    except rvcodec.RVError as exc:
        return expired_response(f"too old resource version: {client_rv} ({exc})")
    accept = union_accept(request.headers.get("Accept", ""))
    if accept is None:
        return not_acceptable_response()
    streaming_start = start is None and client_rv in {"", "0"}
    initial = set(route.partitions) if (client_sie or streaming_start) else set()
    merge = WatchMerge(
        codec=ctx.rv.codec(route.rv_space),
        start=start or (0,) * len(route.rv_space),
        initial=initial,
        client_initial_events=client_sie,
        bookmarks=query.get("allowWatchBookmarks", "").lower() in _TRUE,
        keep=_keep_fn(info, route, ctx),
    )

    base_headers = upstream_request_headers(request.headers)
    base_headers["Accept"] = accept
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
        """Raises PartitionMarkedDown or a transport error (counted by the breaker)."""
        upstream = ctx.upstreams[partition]
        with upstream.breaker.attempt():
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
        if isinstance(result, PartitionMarkedDown):
            failure = marked_down_response(ctx.upstreams[partition])
        elif isinstance(result, BaseException):
            if not isinstance(result, TRANSPORT_ERRORS):
                raise result
            ctx.upstreams[partition].rotate()
            failure = upstream_error_response(ctx.upstreams[partition], result)
        elif result.status != 200:
            body = await result.read()
            failure = web.Response(
                status=result.status, body=body, headers=downstream_response_headers(result.headers, keep_length=False)
            )
    first_responses = dict(zip(route.partitions, (r for r in opened if isinstance(r, aiohttp.ClientResponse))))
    types = {translate.encoding_of(r.headers.get("Content-Type", "")) for r in first_responses.values()}
    if failure is None and len(types) > 1:
        failure = status_response(502, "InternalError", "partitions answered the watch in different media types")
    if failure is not None:
        for result in opened:
            if isinstance(result, aiohttp.ClientResponse):
                result.close()
        return failure
    protobuf = types == {translate.Encoding.PROTOBUF}

    queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue(maxsize=_EVENT_QUEUE_DEPTH)

    async def read_events(partition: str, resp: aiohttp.ClientResponse) -> None:
        if protobuf:
            frames = pb.FrameReader()
            async for chunk in resp.content.iter_any():
                for frame in frames.feed(chunk):
                    await queue.put((partition, frame))
        else:
            async for line in iter_lines(resp):
                await queue.put((partition, line))

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
                        await queue.put((partition, _status_event(resp.status, raw, protobuf=protobuf)))
                        return
                    pause = _REOPEN_PAUSE
                async with resp:
                    await read_events(partition, resp)
            except PartitionMarkedDown:
                pause = min(pause * 2, _REOPEN_PAUSE_MAX)
            except (*TRANSPORT_ERRORS, pb.ProtobufError):
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
    on_event = merge.on_frame if protobuf else merge.on_line
    write_timeout = ctx.config.limits.watch_write_timeout_seconds

    def finish() -> None:  # shutdown: the marker ("", b"") ends the loop below
        while queue.full():
            queue.get_nowait()
        queue.put_nowait(("", b""))

    try:
        ctx.streams.add(finish)
        if ctx.shutting_down:
            finish()
        # One timeout for the watch's whole lifetime, and every event already queued is merged
        # and written in one chunk: under load the partitions' events arrive faster than one
        # loop turn per event would deliver them (bench/density.py: a union watch that woke,
        # and wrote, once per event fell seconds behind while the proxy waited for a CPU).
        async with asyncio.timeout_at(deadline):
            while not merge.finished:
                batch = [await queue.get()]
                while not queue.empty():
                    batch.append(queue.get_nowait())
                out: list[bytes] = []
                ended = False
                i = holds = 0
                while i < len(batch) and not merge.finished:
                    partition, event = batch[i]
                    if not partition:
                        ended = True  # the shutdown marker
                        break
                    try:
                        out += on_event(partition, event)
                    except (ValueError, pb.ProtobufError):
                        pass  # an event kube-apiserver would not send: skipped, the stream goes on
                    except rvcodec.RVUnencodable as exc:
                        # The partitions ran past the newest epoch: write what is ready, hold the
                        # stream until the table catches up, then offer the same event again.
                        if out:
                            await write_or_drop(request, response, b"".join(out), timeout=write_timeout)
                            out = []
                        holds += 1
                        if holds > _TABLE_HOLDS or not await _table_caught_up(ctx):
                            out += merge.expire(str(exc), protobuf=protobuf)
                        continue
                    holds = 0
                    i += 1
                if out:
                    await write_or_drop(request, response, b"".join(out), timeout=write_timeout)
                if ended:
                    break
    except TimeoutError:
        pass  # the watch's lifetime (timeoutSeconds) is over: it ends normally
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


# seconds; how long a union watch holds an event no epoch can encode yet while the replicas
# publish a new one (a sync takes a table read, a probe of every partition and maybe a write:
# tens of ms; two refresh rounds of slack) before it ends the watch with 410.
_TABLE_HOLD_SECONDS = 10.0
# new epochs one event may wait for: a watch lagging more than an epoch's quarter range behind the
# partitions may not fit even the newest epoch; it relists rather than waiting forever.
_TABLE_HOLDS = 3


async def _table_caught_up(ctx: ProxyContext, *, hold: float = _TABLE_HOLD_SECONDS) -> bool:
    """Wait (at most `hold` seconds) for the next sync of the shared table, asking for one now;
    False when the time is over. The caller retries its encoding after each True."""
    deadline = asyncio.get_running_loop().time() + hold
    published = ctx.rv.table.newest_number
    while asyncio.get_running_loop().time() < deadline:
        ctx.rv.request_sync()
        await ctx.rv.sync_now()
        if ctx.rv.table.newest_number != published:
            return True
        await asyncio.sleep(0.2)
    return False


def _status_event(code: int, raw: bytes, *, protobuf: bool) -> bytes:
    """An ERROR event for an upstream watch that could not be reopened (a JSON line, or a
    protobuf frame payload for a protobuf stream)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict) or obj.get("kind") != "Status":
        obj = expired("watch could not be resumed") if code == 410 else status(code, "InternalError", "watch could not be resumed")
    if protobuf:
        reason = "Expired" if code == 410 else str(obj.get("reason", "InternalError"))
        return pb.encode_watch_event("ERROR", pb.status_object(code=code, reason=reason, message=str(obj.get("message", ""))))
    return watch_error_event(obj)
