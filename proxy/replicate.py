"""Replicated writes of cluster-scoped definitions (`Route.replicate_to`, routing.decide.REPLICATED):
the system partition first, then every other live tenant partition.

The client's answer is the system partition's, as it came. Only when that answer is a success
does the same request go to the other TPs, at once and with the client's identity (their own
authorization and admission apply). A body's `metadata.resourceVersion` and `uid` are the system
partition's and mean nothing in another TP: they are dropped from a JSON body sent there (the
write is last-writer-wins in the copies). A TP that refuses or cannot be reached is reported to
the client in a `Warning` header (`299 - "not replicated to tp2: 409 AlreadyExists ..."`) and
counted in `partition_proxy_replication_failures_total{partition, resource}`; the write itself
stands (kube-apiserver semantics of the system partition). What is not done: catching a TP up
on writes it missed while down, and copying existing definitions to a TP that joins: an operator
replays them (docs/partition-set.md).
"""

from __future__ import annotations

import asyncio

import orjson

from proxy import answers
from proxy.clients.errors import PartitionUnavailable, StreamBroken
from proxy.clients.partition import Whole
from proxy.context import ProxyContext
from proxy.headers import downstream_response_headers, upstream_request_headers
from proxy.messages import Answer, Exchange
from routing import translate

# bytes of a copy's refusal quoted in the Warning header: a Status message, not the whole body
_WARNING_MESSAGE_CHARS = 200


async def replicate(ex: Exchange, ctx: ProxyContext) -> None:
    """Answer a replicated write (module docstring)."""
    assert ex.route is not None
    request, info, route = ex.request, ex.info, ex.route
    system = route.partitions[0]
    ex.target = system
    body = ex.body if ex.body is not None else (await request.body.read(1 << 62) if request.body.can_read else None)
    headers = upstream_request_headers(request.headers)

    async def send(partition: str, payload: bytes | None) -> Whole:
        return await ctx.clients[partition].read_whole(request.method, info.upstream_path, query=request.query_string,
                                                       headers=headers, identity=ex.identity, body=payload)

    try:
        status, got, raw = await send(system, body)
    except (PartitionUnavailable, StreamBroken) as exc:
        if isinstance(exc, PartitionUnavailable):
            return await ex.respond(answers.partition_unavailable(exc))
        return await ex.respond(answers.unavailable_answer(system, str(exc), 1))
    out_headers = downstream_response_headers(got, keep_length=False)
    if 200 <= status < 300 and info.resource == "customresourcedefinitions":
        ctx.definitions_changed.set()  # routing learns whether its resource is namespaced
    if 200 <= status < 300 and route.replicate_to:
        copy = _for_other_partitions(body, request.headers.get("Content-Type", ""))
        results = await asyncio.gather(*(send(p, copy) for p in route.replicate_to), return_exceptions=True)
        for partition, result in zip(route.replicate_to, results):
            warning = _failure(partition, result, delete=info.verb == "delete")
            if warning is not None:
                ctx.metrics.replication_failures.labels(partition, info.resource).inc()
                out_headers.add("Warning", warning)
    await ex.respond(Answer(status, raw, out_headers, content_type=None))


def _for_other_partitions(body: bytes | None, content_type: str) -> bytes | None:
    """The body to send the other TPs: a JSON object without the system partition's
    resourceVersion and uid; anything else as it is."""
    if not body or translate.encoding_of(content_type or "application/json") is not translate.Encoding.JSON:
        return body
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    if not isinstance(meta, dict) or not ({"resourceVersion", "uid"} & meta.keys()):
        return body
    meta.pop("resourceVersion", None)
    meta.pop("uid", None)
    return orjson.dumps(doc)


def _failure(partition: str, result: Whole | BaseException, *, delete: bool) -> str | None:
    """The Warning for a copy that did not succeed, None when it did (a delete of an object the
    TP does not have counts as done)."""
    if isinstance(result, BaseException):
        if not isinstance(result, (PartitionUnavailable, StreamBroken)):
            raise result
        return f'299 - "not replicated to {partition}: it does not answer"'
    status, _, raw = result
    if 200 <= status < 300 or (delete and status == 404):
        return None
    try:
        doc = orjson.loads(raw)
        reason, message = doc.get("reason", ""), str(doc.get("message", ""))[:_WARNING_MESSAGE_CHARS]
    except (orjson.JSONDecodeError, AttributeError):
        reason, message = "", ""
    text = f"not replicated to {partition}: {status} {reason} {message}".replace('"', "'").strip()
    return f'299 - "{text}"'
