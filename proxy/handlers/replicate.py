"""Replicated writes of cluster-scoped definitions (`Route.replicate_to`, routing.decide.REPLICATED):
the system partition first, then every other live tenant partition.

The client's answer is the system partition's, as it came. Only when that answer is a success
does the same request go to the other TPs, at once and with the client's identity (their own
authorization and admission apply). A body's `metadata.resourceVersion` and `uid` are the system
partition's and mean nothing in another TP: they are dropped from a JSON body sent there (the
write is last-writer-wins in the copies). A create with `metadata.generateName` is copied from
the system partition's answer, so that every copy has the name the system partition generated.
A TP that refuses or cannot be reached is reported to
the client in a `Warning` header (`299 - "not replicated to tp2: 409 AlreadyExists ..."`) and
counted in `partition_proxy_replication_failures_total{partition, resource}`; the write itself
stands (kube-apiserver semantics of the system partition). A TP that missed a create (it was
down, or it joined later) gets it from proxy/definitions_sync.py.

A GET of a replicated definition (or of its status) is answered by the system partition, as it
came; the other TPs' copies are read at the same time (as JSON, with the client's identity) and
each that is missing or differs (routing.replicas: its definition, or the status of a condition
the system partition's copy reports, such as a CRD not Established there) is named in a
`Warning` header: `299 - "customresourcedefinitions widgets.example.com in tp2: condition
Established is False (...)"`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson
from multidict import CIMultiDict

from proxy import answers
from proxy.clients.errors import PartitionUnavailable, StreamBroken
from proxy.clients.partition import Whole
from proxy.context import ProxyContext
from proxy.headers import downstream_response_headers, upstream_request_headers
from proxy.messages import Answer, Exchange
from routing import protobuf as pb
from routing import translate
from routing.bodies import body_name
from routing.decide import REPLICATED_EVERYWHERE
from routing.replicas import copy_differences

# encodings whose answer a copy can be created from (not YAML, CBOR or a Table)
_OBJECT_ENCODINGS = (translate.Encoding.JSON, translate.Encoding.PROTOBUF)

# bytes of a copy's refusal quoted in the Warning header: a Status message, not the whole body
_WARNING_MESSAGE_CHARS = 200


async def replicate(ex: Exchange, ctx: ProxyContext) -> None:
    """Answer a replicated write, or a GET of a replicated definition (module docstring)."""
    assert ex.route is not None
    if ex.info.verb == "get":
        return await _read_and_compare(ex, ctx)
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
    if 200 <= status < 300 and (info.api_group, info.resource) in REPLICATED_EVERYWHERE:  # FlowSchemas, PLCs
        ctx.flowcontrol.changed()  # /metrics shows the partitions' new priority levels soon
    if 200 <= status < 300 and route.replicate_to:
        content_type = request.headers.get("Content-Type", "")
        if info.verb == "create" and body and not body_name(body, content_type):
            # metadata.generateName: every copy must get the name the system partition chose,
            # so the copies are created from its answer (the object as it was created there).
            body, content_type = _created(raw, got, body, content_type)
            headers["Content-Type"] = content_type

        async def replicate_to(partition: str) -> Whole:
            # An update must carry the partition's own resourceVersion (kube-apiserver refuses an
            # unconditional update of most definitions): the copy is last-writer-wins.
            own = await _current_rv(ctx, ex, partition) if info.verb == "update" else ""
            return await send(partition, _for_other_partitions(body, content_type, own))

        results = await asyncio.gather(*(replicate_to(p) for p in route.replicate_to), return_exceptions=True)
        for partition, result in zip(route.replicate_to, results):
            warning = _failure(partition, result, delete=info.verb == "delete")
            if warning is not None:
                ctx.metrics.replication_failures.labels(partition, info.resource).inc()
                out_headers.add("Warning", warning)
    await ex.respond(Answer(status, raw, out_headers, content_type=None))


async def _current_rv(ctx: ProxyContext, ex: Exchange, partition: str) -> str:
    """The partition's own resourceVersion of the object being updated ("" when it cannot be
    read: the update then goes without one and the partition says why)."""
    try:
        got = await ctx.clients[partition].read_whole("GET", ex.info.upstream_path, headers={"Accept": "application/json"},
                                                      identity=ex.identity)
    except (PartitionUnavailable, StreamBroken):
        return ""
    obj = _object(got.body) if got.status == 200 else None
    value = (obj.get("metadata") or {}).get("resourceVersion") if obj is not None else None
    return value if isinstance(value, str) else ""


def _created(answer: bytes, answer_headers: CIMultiDict[str], body: bytes, content_type: str) -> tuple[bytes, str]:
    """The body (and its Content-Type) a create with metadata.generateName is copied with: the
    system partition's answer, the object it created under the name it generated, when that
    answer is a plain JSON or protobuf object that names it; else the client's own body (each
    copy then gets a name of its own, as before)."""
    answer_type = answer_headers.get("Content-Type", "")
    if answer_headers.get("Content-Encoding") or translate.encoding_of(answer_type) not in _OBJECT_ENCODINGS:
        return body, content_type
    return (answer, answer_type) if body_name(answer, answer_type) else (body, content_type)


def _for_other_partitions(body: bytes | None, content_type: str, resource_version: str) -> bytes | None:
    """The body to send another partition: an object (JSON or protobuf: client-go's clientsets
    write protobuf) without the system partition's uid, and with `resource_version` (the other
    partition's, or none) instead of the system partition's, which would fail the write there
    as a Conflict; anything else as it is."""
    encoding = translate.encoding_of(content_type or "application/json")
    if body and encoding is translate.Encoding.PROTOBUF and body.startswith(pb.MAGIC):
        try:
            return pb.with_identity(body, resource_version)
        except pb.ProtobufError:
            return body  # not an object: the partitions judge it as it is
    if not body or encoding is not translate.Encoding.JSON:
        return body
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    if not isinstance(meta, dict) or not ({"resourceVersion", "uid"} & meta.keys()):
        return body
    meta.pop("uid", None)
    if resource_version and "resourceVersion" in meta:
        meta["resourceVersion"] = resource_version
    else:
        meta.pop("resourceVersion", None)
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


async def _read_and_compare(ex: Exchange, ctx: ProxyContext) -> None:
    """A GET of a replicated definition (module docstring)."""
    assert ex.route is not None
    request, info, route = ex.request, ex.info, ex.route
    system = route.partitions[0]
    ex.target = system
    headers = upstream_request_headers(request.headers)
    as_json = CIMultiDict(headers)
    as_json["Accept"] = "application/json"
    as_json.pop("Accept-Encoding", None)

    async def read(partition: str, sent: CIMultiDict[str]) -> Whole:
        return await ctx.clients[partition].read_whole("GET", info.upstream_path, query=request.query_string, headers=sent, identity=ex.identity)

    answered = await asyncio.gather(read(system, headers), *(read(p, as_json) for p in route.replicate_to), return_exceptions=True)
    first = answered[0]
    if isinstance(first, BaseException):
        if isinstance(first, PartitionUnavailable):
            return await ex.respond(answers.partition_unavailable(first))
        if isinstance(first, StreamBroken):
            return await ex.respond(answers.unavailable_answer(system, str(first), 1))
        raise first
    status, got, raw = first
    out_headers = downstream_response_headers(got, keep_length=False)
    if status == 200:
        ours = _object(raw)
        if ours is None:  # a Table or protobuf answer: the system partition's copy as JSON too
            with contextlib.suppress(PartitionUnavailable, StreamBroken):
                again = await read(system, as_json)
                ours = _object(again.body) if again.status == 200 else None
        if ours is not None:
            for partition, result in zip(route.replicate_to, answered[1:]):
                problem = _copy_problem(ours, result)
                if problem:
                    text = f"{info.resource} {info.name} in {partition}: {problem}".replace('"', "'")
                    out_headers.add("Warning", f'299 - "{text}"')
    await ex.respond(Answer(status, raw, out_headers, content_type=None))


def _object(raw: bytes) -> dict[str, Any] | None:
    """A JSON object answer (not a Table), else None."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) and doc.get("kind") not in (None, "Table", "Status") else None


def _copy_problem(ours: dict[str, Any], result: Whole | BaseException) -> str:
    """What is wrong with a TP's copy ("" when it agrees with `ours`)."""
    if isinstance(result, BaseException):
        if not isinstance(result, (PartitionUnavailable, StreamBroken)):
            raise result
        return "it does not answer"
    if result.status == 404:
        return "missing"
    if result.status != 200:
        return f"answered {result.status}"
    theirs = _object(result.body)
    if theirs is None:
        return "answered something else than the object"
    return "; ".join(copy_differences(ours, theirs))
