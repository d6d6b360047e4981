"""Union LIST over several partitions (route kind `fan-out`, verb list or deletecollection).

The same request goes to every partition at once (`limit`/`continue` are dropped, which the API
allows: "servers may ignore limit"). If any partition answers an error, that answer is the
client's as it came; otherwise `routing.merge` joins the lists under one proxy RV, in protobuf
when the client asked for it (kube-apiserver's own choice of media type is kept), else JSON.

A partition that does not answer is left out with a Warning (policy `partial`; its share comes
from a watch cache when one holds it, marked stale) or fails the list with 503 (`unavailable`,
and always for deletecollection).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from multidict import CIMultiDict

from proxy import answers
from proxy.clients.errors import PartitionUnavailable, StreamBroken
from proxy.context import ProxyContext
from proxy.handlers.query_rv import RefusedRV, union_start
from proxy.headers import downstream_response_headers, union_accept, upstream_request_headers
from proxy.messages import Answer, Exchange
from routing import rv as rvcodec
from routing import translate
from routing.decide import route_keep
from routing.merge import PartitionList, merge_lists, merge_protobuf_lists
from routing.query import translated_query

# partition -> its share of the list from a watch cache (JSON bytes), None when none covers it
Fallback = Callable[[str], bytes | None]


class _Down(Exception):
    """A partition of the union did not answer (or its circuit breaker is open)."""

    def __init__(self, partition: str, retry_after: int) -> None:
        super().__init__(partition)
        self.partition = partition
        self.retry_after = retry_after


_Part = tuple[str, int, Any, bytes]  # (partition, status, headers, body) of one partition's answer


async def union_list(ex: Exchange, ctx: ProxyContext, *, fallback: Fallback | None = None) -> None:
    """Answer a list (or deletecollection) from every partition of the route (module docstring)."""
    assert ex.route is not None
    request, route = ex.request, ex.route
    ex.target = "union"
    client_rv = request.query.get("resourceVersion", "")
    if request.query.get("continue"):
        return await ex.respond(answers.bad_request("invalid continue token"))
    codec = ctx.rv.codec(route.rv_space)
    try:
        vector = await union_start(ctx.rv, codec, client_rv)
    except RefusedRV as refused:
        return await ex.respond(refused.answer)
    accept = union_accept(request.headers.get("Accept", ""))
    if accept is None:
        return await ex.respond(answers.not_acceptable())
    if translate.encoding_of(request.headers.get("Content-Type", "")) is translate.Encoding.CBOR and request.body.can_read:
        return await ex.respond(answers.unsupported_media_type(request.headers.get("Content-Type", "")))
    asked = await _ask_every_partition(ex, ctx, vector, accept)
    if isinstance(asked, Answer):
        return await ex.respond(asked)
    parts, down = asked
    for _, code, headers, raw in parts:
        if code >= 300:
            return await ex.respond(Answer(code, raw, downstream_response_headers(headers, keep_length=False), content_type=None))
    await ex.respond(_merged(ex, ctx, codec, parts, down, fallback))


async def _ask_every_partition(ex: Exchange, ctx: ProxyContext, vector: tuple[int, ...] | None, accept: str) -> Answer | tuple[list[_Part], list[str]]:
    """Every live partition's answer to the request, each from its slot of `vector`: (the
    answers, the partitions that did not answer), or the answer to give instead (503 when one
    is down and the policy or method does not allow a partial list, or when none answered)."""
    request, info, route = ex.request, ex.info, ex.route
    assert route is not None
    base_headers = upstream_request_headers(request.headers)
    base_headers["Accept"] = accept
    base_headers.pop("Accept-Encoding", None)
    body = ex.body if ex.body is not None else (await request.body.read(1 << 62) if request.body.can_read else None)

    async def one(partition: str) -> _Part:
        replace: dict[str, str | None] = {"limit": None, "continue": None}
        if vector is not None:
            replace["resourceVersion"] = str(vector[route.slot(partition)])
        client = ctx.clients[partition]
        try:
            whole = await client.read_whole(request.method, info.upstream_path, query=translated_query(request.query_string, replace=replace),
                                            headers=base_headers, identity=ex.identity, body=body)
            return partition, whole.status, whole.headers, whole.body
        except PartitionUnavailable as exc:
            raise _Down(partition, exc.retry_after) from None
        except StreamBroken:
            raise _Down(partition, 1) from None

    results = await asyncio.gather(*(one(p) for p in route.partitions), return_exceptions=True)
    parts: list[_Part] = []
    down: list[str] = []
    for partition, result in zip(route.partitions, results):
        if isinstance(result, _Down):
            if ctx.config.failure.union_policy == "unavailable" or request.method != "GET":
                return answers.unavailable_answer(partition, "it does not answer", result.retry_after)
            down.append(partition)
        elif isinstance(result, BaseException):
            raise result
        else:
            parts.append(result)
    if not parts:
        first = ctx.clients[route.partitions[0]]
        return answers.unavailable_answer(first.name, "no partition of the union answers", first.retry_after())
    return parts, down


def _merged(ex: Exchange, ctx: ProxyContext, codec: rvcodec.RVCodec, parts: list[_Part], down: list[str],
            fallback: Fallback | None) -> Answer:
    """The partitions' lists merged into one answer, a down partition's share from a watch
    cache (`fallback`) when one holds it, each left-out share named in a Warning."""
    info, route = ex.info, ex.route
    assert route is not None
    media = {translate.encoding_of(h.get("Content-Type", "")) for _, _, h, _ in parts}
    protobuf = media == {translate.Encoding.PROTOBUF}
    warnings: list[str] = []
    for partition in down:
        share = fallback(partition) if fallback is not None and not protobuf else None
        if share is not None:
            parts.append((partition, 200, {}, share))
            warnings.append(f'299 - "partition {partition} is unavailable: its part comes from the watch cache and may be stale"')
            ctx.metrics.degraded.labels(partition, "stale").inc()
        else:
            warnings.append(f'299 - "partition {partition} is unavailable: the list is partial"')
            ctx.metrics.degraded.labels(partition, "partial").inc()

    lists = [PartitionList(p, route.slot(p), raw) for p, _, _, raw in parts]
    keep = route_keep(info, route, lambda: ctx.routing)
    try:
        if len(media) > 1:
            raise ValueError(f"partitions answered in different media types: {sorted(m.value for m in media)}")
        merged = (merge_protobuf_lists if protobuf else merge_lists)(lists, codec=codec, keep=keep)
    except rvcodec.RVUnencodable as exc:
        ctx.rv.request_sync()
        return answers.unavailable_answer(route.partitions[0], f"its resourceVersion table is behind ({exc})", 1)
    except ValueError as exc:
        return answers.bad_gateway(f"a partition answered a list that is not one: {exc}")
    headers = downstream_response_headers(parts[0][2], keep_length=False) if parts[0][2] else CIMultiDict()
    headers.pop("Content-Encoding", None)
    if "Content-Type" not in headers:
        headers["Content-Type"] = "application/json"
    for warning in warnings:
        headers.add("Warning", warning)
    return Answer(200, merged, headers, content_type=None)
