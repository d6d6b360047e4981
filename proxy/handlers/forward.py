"""Forwarding a request to the one partition that owns it (route kind `forward`).

Bodies stream both ways; a watch is written downstream as its chunks arrive. Merged resources
(`Route.rv_space` non-empty) speak proxy RVs to the client in every encoding
(`routing.translate`): the request's resourceVersion (query, and the preconditions in a JSON,
YAML or protobuf body) is translated to the owner's native RV, and answers get theirs turned
into object-form proxy RVs, whole bodies or watch streams event by event. CBOR is negotiated
away as a kube-apiserver without it would (406 / 415).

Errors: the partition's answers are passed on as they came, whatever their code. A partition
the client layer cannot use (`PartitionUnavailable`: unreachable, no answer in time, marked
down) gives 503 ServiceUnavailable with an integer Retry-After, as a Status. A resourceVersion
that cannot be translated answers as kube-apiserver answers a bad one: 409 Conflict for a write
precondition, 410 Expired for a list or watch, 400 BadRequest when it is no decimal integer.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable

from proxy import answers
from proxy.clients.errors import PartitionUnavailable, StreamBroken
from proxy.clients.partition import RequestClass, UpstreamResponse
from proxy.context import ProxyContext
from proxy.handlers.query_rv import too_old
from proxy.headers import downstream_raw_headers, upstream_header_block
from proxy.messages import Answer, Exchange
from proxy.rv_epochs import ResourceVersions
from routing import protobuf as pb
from routing import rv as rvcodec
from routing import rvjson
from routing import translate
from routing.translate import object_translator
from routing.query import is_malformed_rv, translated_query
from routing.requestinfo import RequestInfo


class _Refused(Exception):
    """A request the proxy answers itself before forwarding it."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer


async def _translate_request(ex: Exchange, rv: ResourceVersions, slot: int, codec: rvcodec.RVCodec) -> tuple[str, bytes | None]:
    """The query string and body to send for a merged resource. Raises _Refused."""
    request, info = ex.request, ex.info
    query_string = request.query_string
    client_rv = request.query.get("resourceVersion", "")
    if client_rv:
        if is_malformed_rv(client_rv) and info.verb in ("watch", "get"):
            raise _Refused(answers.invalid_rv(client_rv, "not a decimal integer"))
        try:
            native = await rv.native_for(codec, client_rv, slot)
        except rvcodec.RVError as exc:
            if info.verb != "get":
                raise _Refused(too_old(client_rv, exc)) from None
            # A GET is "not older than" its RV: the current object satisfies an RV this
            # partition cannot be asked for, so ask without one (a consistent read).
            query_string = translated_query(query_string, replace={"resourceVersion": None})
            native = None
        if native is not None:
            query_string = translated_query(query_string, replace={"resourceVersion": native})

    body = ex.body
    # A body without Content-Type is JSON to kube-apiserver (kubectl --raw sends none).
    content_type = request.headers.get("Content-Type", "") or "application/json"
    encoding = translate.encoding_of(content_type)
    if encoding is translate.Encoding.CBOR and request.body.can_read:
        raise _Refused(answers.unsupported_media_type(content_type))
    if encoding in (translate.Encoding.JSON, translate.Encoding.YAML, translate.Encoding.PROTOBUF):
        if body is None and request.body.can_read:
            body = await request.body.read(1 << 62)
        if body:
            body = await _translate_body(rv, info, codec, slot, body, content_type)
    return query_string, body


async def _translate_body(
    rv: ResourceVersions, info: RequestInfo, codec: rvcodec.RVCodec, slot: int, body: bytes, content_type: str
) -> bytes:
    """The body with its resourceVersion preconditions native. Raises _Refused (409 for an RV
    that names no position of the partition, 400 for a malformed one or body)."""
    needs_sync = False

    def to_native(value: str) -> str | None:
        nonlocal needs_sync
        if is_malformed_rv(value):
            raise _Refused(answers.invalid_rv(value, "not a decimal integer"))
        try:
            return codec.native_for(value, slot)
        except rvcodec.RVTooOld as exc:
            if exc.epoch > codec.table.newest_number:
                needs_sync = True
            raise

    def run() -> bytes:
        return translate.translate_request_body(body, content_type, delete_options=info.verb == "delete", to_native=to_native)

    try:
        try:
            return run()
        except rvcodec.RVTooOld:
            if not needs_sync:
                raise
            await rv.sync_now()
            return run()
    except rvcodec.RVError:
        raise _Refused(answers.conflict(info)) from None
    except (rvjson.BodyError, pb.ProtobufError) as exc:
        raise _Refused(answers.bad_request(str(exc))) from None


async def forward(ex: Exchange, ctx: ProxyContext) -> None:
    """Forward one request to `ex.route.partitions[0]` and answer with its answer."""
    assert ex.route is not None
    request, info, route = ex.request, ex.info, ex.route
    partition = route.partitions[0]
    client = ctx.clients[partition]
    ex.target = partition
    query_string = request.query_string
    body: bytes | AsyncIterator[bytes] | None = ex.body
    merged = bool(route.rv_space) and partition in route.rv_space
    if merged:
        accept = translate.without_cbor(request.headers.get("Accept", ""))
        if accept is None:
            return await ex.respond(answers.not_acceptable())
        # answers are rewritten: asked for plain (no Accept-Encoding)
        headers = upstream_header_block(request.headers, replace={"accept": accept or None, "accept-encoding": None})
        try:
            query_string, body = await _translate_request(ex, ctx.rv, route.slot(partition), ctx.rv.codec(route.rv_space))
        except _Refused as refused:
            return await ex.respond(refused.answer)
    else:
        headers = upstream_header_block(request.headers)
    if body is None and request.body.can_read:
        body = request.body.chunks()

    kind = RequestClass.WATCH if ex.long_running else RequestClass.REQUEST
    try:
        async with client.request(
            request.method, info.upstream_path, query=query_string, header_block=headers, identity=ex.identity, body=body, kind=kind
        ) as answer:
            await _pass_on(ex, ctx, answer, (ctx.rv.codec(route.rv_space), route.slot(partition)) if merged else None)
    except PartitionUnavailable as exc:
        if not ex.writer.started:
            await ex.respond(answers.partition_unavailable(exc))


@functools.lru_cache(maxsize=256)  # (codec, slot, media type) in use: a handful per RV epoch
def _answer_rewriter(codec: rvcodec.RVCodec, slot: int, content_type: str) -> Callable[[bytes], bytes] | None:
    """The whole-answer translator of a partition's answers in one media type (made once, not
    per answer)."""
    return translate.answer_translator(content_type, object_translator(codec, slot))


@functools.lru_cache(maxsize=256)
def _list_rewriter(rv: ResourceVersions, codec: rvcodec.RVCodec, slot: int, content_type: str) -> Callable[[bytes], bytes] | None:
    """`_answer_rewriter` of a list answer: its own resourceVersion becomes a position of the
    whole RV space, not of one partition (docs/resource-versions.md: "Answers of one
    partition"), so a union list or watch can start from a namespaced list's RV."""

    def list_rv(native: int) -> bytes | None:
        try:
            return codec.encode(rv.position_vector(codec, slot, native)).encode()
        except rvcodec.RVUnencodable:
            return None  # no epoch fits these positions yet: the object form, one partition's

    return translate.answer_translator(content_type, object_translator(codec, slot), list_rv=list_rv)


async def _pass_on(ex: Exchange, ctx: ProxyContext, answer: UpstreamResponse, merged: tuple[rvcodec.RVCodec, int] | None) -> None:
    """The partition's answer to the client: whole and rewritten (a merged resource's single
    answer: `merged` is its RV codec and the partition's slot), or streamed chunk by chunk
    (translated event by event for a merged watch)."""
    if not ex.long_running and merged is not None:
        rewrite = (_answer_rewriter(*merged, answer.content_type) if ex.info.verb != "list"
                   else _list_rewriter(ctx.rv, *merged, answer.content_type))
        if rewrite is not None:
            try:
                raw = await answer.read()
            except StreamBroken as exc:
                return await ex.respond(answers.unavailable_answer(answer.partition, str(exc), 1))
            try:
                raw = rewrite(raw)
            except pb.ProtobufError:
                pass  # not an object kube-apiserver would send: passed on as it came
            headers = downstream_raw_headers(answer.raw_headers, keep_length=False)
            return await ex.respond(Answer(answer.status, raw, headers, content_type=None))
    stream = translate.stream_translator(answer.content_type, object_translator(*merged)) if merged is not None else None
    await ex.writer.start(answer.status, downstream_raw_headers(answer.raw_headers, keep_length=stream is None))
    with ctx.stream(answer.close, ex.writer.connection):  # a shutdown ends the stream cleanly
        try:
            async for chunk in answer.chunks():
                out = stream.feed(chunk) if stream is not None else chunk
                if out:
                    await ex.writer.write(out)
            if stream is not None and (rest := stream.end()):
                await ex.writer.write(rest)
        except (StreamBroken, pb.ProtobufError):
            pass  # the partition went away mid-stream (or the proxy shuts down): the client re-watches
    await ex.writer.end()
