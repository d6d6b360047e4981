"""Answering discovery and OpenAPI documents merged over the tenant partitions
(`Route.discovery_from`; what is merged and how: routing.discovery_merge).

The system partition and every other live TP are asked at once, with the client's identity (a
discovery document is filtered by nothing, but authorization still applies). A merged document
is asked for in JSON (aggregated discovery: `routing.discovery_merge.AGGREGATED_JSON`, which
every client that accepts the protobuf form accepts too), answered with its own ETag and 304 for
a matching `If-None-Match`. The system partition's failure is the client's answer as it came;
another TP that fails is left out of the merge (discovery stays what the system partition
serves, as before the merge existed).
"""

from __future__ import annotations

import asyncio

import orjson
from multidict import CIMultiDict

from proxy import answers
from proxy.clients.errors import PartitionUnavailable, StreamBroken
from proxy.clients.partition import Whole
from proxy.context import ProxyContext
from proxy.headers import downstream_response_headers, upstream_request_headers
from proxy.messages import Answer, Exchange
from routing import discovery_merge as dm

async def serve_discovery(ex: Exchange, ctx: ProxyContext) -> bool:
    """Answer a discovery document (module docstring). False, answering nothing, for a document
    the proxy does not merge (the protobuf OpenAPI v2, say): the caller forwards it to the
    system partition."""
    assert ex.route is not None
    request, info, route = ex.request, ex.info, ex.route
    accept = request.headers.get("Accept", "")
    kind = dm.document_of(info.upstream_path, accept)
    if kind is None or not route.discovery_from:
        return False
    await _merged(ex, ctx, kind)
    return True


async def _merged(ex: Exchange, ctx: ProxyContext, kind: dm.Document) -> None:
    """The system partition's document with the other TPs' merged in (module docstring)."""
    assert ex.route is not None
    request, info, route = ex.request, ex.info, ex.route
    system = route.partitions[0]
    ex.target = system
    headers = upstream_request_headers(request.headers)
    headers.pop("If-None-Match", None)  # the ETag is the merged document's, judged here
    headers.pop("Accept-Encoding", None)
    if kind is dm.Document.AGGREGATED:
        headers["Accept"] = dm.AGGREGATED_JSON
    elif kind is not dm.Document.FALLBACK:
        headers["Accept"] = "application/json"

    async def fetch(partition: str) -> Whole:
        return await ctx.clients[partition].read_whole("GET", info.upstream_path, query=request.query_string, headers=headers,
                                                       identity=ex.identity)

    partitions = (system, *route.discovery_from)
    results = await asyncio.gather(*(fetch(p) for p in partitions), return_exceptions=True)
    first = results[0]
    if isinstance(first, PartitionUnavailable):
        return await ex.respond(answers.partition_unavailable(first))
    if isinstance(first, BaseException):
        if isinstance(first, StreamBroken):
            return await ex.respond(answers.unavailable_answer(system, str(first), 1))
        raise first
    answered = [r for r in results if not isinstance(r, BaseException)]
    for r in results:
        if isinstance(r, BaseException) and not isinstance(r, (PartitionUnavailable, StreamBroken)):
            raise r
    status, got, raw = first
    if kind is dm.Document.FALLBACK:
        if status == 404:
            status, got, raw = next((r for r in answered if r.status == 200), first)
        return await ex.respond(Answer(status, raw, downstream_response_headers(got, keep_length=False), content_type=None))
    if status != 200:
        return await ex.respond(Answer(status, raw, downstream_response_headers(got, keep_length=False), content_type=None))
    try:
        docs = [orjson.loads(r.body) for r in answered if r.status == 200]
        merged = dm.merge(kind, docs)
    except (orjson.JSONDecodeError, ValueError):
        merged = None  # a partition answered something that is not the document: the system partition's stands
    if merged is None or merged == docs[0]:
        body, etag = raw, got.get("ETag") or dm.etag_of(raw)  # nothing added: kube-apiserver's own bytes
    else:
        body = orjson.dumps(merged) + (b"\n" if raw.endswith(b"\n") else b"")  # Go's encoder ends with a newline
        etag = dm.etag_of(body)
    out = CIMultiDict({"Content-Type": got.get("Content-Type", "application/json"), "ETag": etag})
    if "Vary" in got:
        out["Vary"] = got["Vary"]
    if etag in {t.strip() for t in request.headers.get("If-None-Match", "").split(",")}:
        return await ex.respond(Answer(304, b"", out, content_type=None))
    await ex.respond(Answer(200, body, out, content_type=None))
