"""Forwarding a request to the one partition that owns it (route kind `forward`).

Bodies stream both ways; a watch is written downstream event by event. Merged resources
(`Route.rv_space` non-empty) speak proxy RVs to the client in every encoding
(`routing.translate`): the request's resourceVersion (query, and the preconditions in a JSON,
YAML or protobuf body) is translated to the owner's native RV, and answers get theirs turned
into object-form proxy RVs, whole bodies or watch streams event by event. CBOR is negotiated
away as a kube-apiserver without it would (406 / 415).

Errors: upstream errors are returned as they came. A partition that cannot be reached or does
not answer within its deadline, or whose circuit breaker is open (`proxy.health`), gives 503
ServiceUnavailable with an integer Retry-After, as a Status. A resourceVersion that cannot be
translated answers as kube-apiserver answers a bad one: 409 Conflict for a write precondition,
410 Expired for a list or watch, 400 BadRequest when it is no decimal integer at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import parse_qsl, urlencode

import aiohttp
from aiohttp import web

from proxy.answers import (
    conflict_response,
    expired_response,
    invalid_rv_response,
    not_acceptable_response,
    status_response,
    unavailable_response,
    unsupported_media_type_response,
)
from proxy.context import ProxyContext
from proxy.headers import downstream_response_headers, upstream_request_headers
from proxy.health import TRANSPORT_ERRORS, PartitionMarkedDown
from proxy.identity import Identity
from proxy.limits import write_or_drop
from proxy.upstream import Upstream
from routing import protobuf as pb
from routing import rv as rvcodec
from routing import rvjson
from routing import translate
from routing.decide import Route
from routing.merge import object_translator
from routing.requestinfo import RequestInfo, is_long_running

def marked_down_response(upstream: Upstream) -> web.Response:
    return unavailable_response(upstream.name, "marked down after repeated failures", upstream.breaker.retry_after())


def upstream_error_response(upstream: Upstream, exc: BaseException) -> web.Response:
    """The Status for a partition the proxy could not talk to (already counted against its
    circuit breaker by `CircuitBreaker.attempt`)."""
    why = "no answer within its deadline" if isinstance(exc, asyncio.TimeoutError) else type(exc).__name__
    return unavailable_response(upstream.name, why, upstream.breaker.retry_after())


def translated_query(query_string: str, *, replace: dict[str, str | None]) -> str:
    """The query with some parameters replaced (value) or removed (None); others untouched."""
    pairs = [(k, v) for k, v in parse_qsl(query_string, keep_blank_values=True) if k not in replace]
    pairs += [(k, v) for k, v in replace.items() if v is not None]
    return urlencode(pairs)


def is_malformed_rv(rv: str) -> bool:
    """Not empty and not digits at all (kube-apiserver answers some of these 500). Digits that
    are no RV of ours (too long, leading zeros: an RV of the proxy's old 143-bit encoding) are
    too old instead: 410, so informers relist."""
    return bool(rv) and not (rv.isascii() and rv.isdigit())


async def _body_chunks(request: web.Request) -> AsyncIterator[bytes]:
    async for chunk in request.content.iter_any():
        yield chunk


class _Refused(Exception):
    """A request the proxy answers itself before forwarding it."""

    def __init__(self, response: web.Response) -> None:
        self.response = response


async def _translate_request(
    request: web.Request, ctx: ProxyContext, info: RequestInfo, route: Route, body: bytes | None
) -> tuple[str, bytes | None]:
    """The query string and body to send for a merged resource. Raises _Refused."""
    partition = route.partitions[0]
    codec = ctx.rv.codec(route.rv_space)
    slot = route.slot(partition)
    query_string = request.rel_url.raw_query_string
    client_rv = request.query.get("resourceVersion", "")
    if client_rv:
        if is_malformed_rv(client_rv) and info.verb in ("watch", "get"):
            raise _Refused(invalid_rv_response(client_rv, "not a decimal integer"))
        try:
            native = await _native_for(ctx, codec, client_rv, slot)
        except rvcodec.RVError as exc:
            if info.verb != "get":
                raise _Refused(expired_response(f"too old resource version: {client_rv} ({exc})")) from None
            # A GET is "not older than" its RV: the current object satisfies an RV this
            # partition cannot be asked for, so ask without one (a consistent read).
            query_string = translated_query(query_string, replace={"resourceVersion": None})
            native = None
        if native is not None:
            query_string = translated_query(query_string, replace={"resourceVersion": native})

    # A body without Content-Type is JSON to kube-apiserver (kubectl --raw sends none).
    content_type = request.headers.get("Content-Type", "") or "application/json"
    encoding = translate.encoding_of(content_type)
    if encoding is translate.Encoding.CBOR and request.can_read_body:
        raise _Refused(unsupported_media_type_response(content_type))
    if encoding in (translate.Encoding.JSON, translate.Encoding.YAML, translate.Encoding.PROTOBUF):
        if body is None and request.can_read_body:
            body = await request.read()
        if body:
            body = await _translate_body(ctx, info, codec, slot, body, content_type)
    return query_string, body


async def _native_for(ctx: ProxyContext, codec: rvcodec.RVCodec, rv: str, slot: int) -> str | None:
    """codec.native_for, re-reading the epoch table once when the RV names an epoch newer than
    this replica knows (another replica published it moments ago)."""
    try:
        return codec.native_for(rv, slot)
    except rvcodec.RVTooOld as exc:
        if exc.epoch <= codec.table.newest_number:
            raise
        await ctx.rv.sync_now()
        return codec.native_for(rv, slot)


async def _translate_body(
    ctx: ProxyContext, info: RequestInfo, codec: rvcodec.RVCodec, slot: int, body: bytes, content_type: str
) -> bytes:
    needs_sync = False

    def to_native(value: str) -> str | None:
        nonlocal needs_sync
        if is_malformed_rv(value):
            raise _Refused(invalid_rv_response(value, "not a decimal integer"))
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
            await ctx.rv.sync_now()
            return run()
    except rvcodec.RVError:
        raise _Refused(conflict_response(info)) from None
    except (rvjson.BodyError, pb.ProtobufError) as exc:
        raise _Refused(status_response(400, "BadRequest", str(exc))) from None


async def forward(
    request: web.Request,
    *,
    ctx: ProxyContext,
    info: RequestInfo,
    route: Route,
    identity: Identity,
    body: bytes | None,
) -> web.StreamResponse:
    """Forward one request to `route.partitions[0]` and stream the answer back."""
    partition = route.partitions[0]
    upstream = ctx.upstreams[partition]
    merged = bool(route.rv_space) and partition in route.rv_space
    headers = ctx.upstream_headers(upstream_request_headers(request.headers), upstream, identity)
    query_string = request.rel_url.raw_query_string
    if merged:
        accept = translate.without_cbor(request.headers.get("Accept", ""))
        if accept is None:
            return not_acceptable_response()
        if accept:
            headers["Accept"] = accept
        headers.pop("Accept-Encoding", None)  # answers are rewritten: ask for them plain
        try:
            query_string, body = await _translate_request(request, ctx, info, route, body)
        except _Refused as refused:
            return refused.response

    data: bytes | AsyncIterator[bytes] | None = body
    if data is None and request.can_read_body:
        data = _body_chunks(request)

    is_watch = is_long_running(info, request.query)
    timeout = upstream.watch_timeout if is_watch else upstream.request_timeout
    attempts = len(upstream.endpoints)
    while True:
        try:
            with upstream.breaker.attempt():
                upstream_response = await upstream.session.request(
                    request.method,
                    upstream.url(info.upstream_path, query_string),
                    headers=headers,
                    data=data,
                    timeout=timeout,
                    allow_redirects=False,
                    # A body the client sent without Content-Type goes on without one (aiohttp
                    # would add application/octet-stream, which kube-apiserver refuses with 415).
                    skip_auto_headers=("Content-Type",),
                )
            break
        except PartitionMarkedDown:
            return marked_down_response(upstream)
        except aiohttp.ClientConnectorError as exc:
            # Nothing was sent: the next endpoint of the partition may take the request, even
            # a mutating one. A streamed body cannot be replayed, so only bytes are retried.
            upstream.rotate()
            attempts -= 1
            if attempts <= 0 or not (data is None or isinstance(data, bytes)):
                return upstream_error_response(upstream, exc)
        except TRANSPORT_ERRORS as exc:
            upstream.rotate()
            return upstream_error_response(upstream, exc)

    async with upstream_response:
        answer_type = upstream_response.headers.get("Content-Type", "")
        to_proxy = object_translator(ctx.rv.codec(route.rv_space), route.slot(partition)) if merged else None
        write_timeout = ctx.config.limits.watch_write_timeout_seconds
        response: web.StreamResponse | None = None
        try:
            if not is_watch and to_proxy is not None:
                rewrite = translate.answer_translator(answer_type, to_proxy)
                if rewrite is not None:
                    raw = await upstream_response.read()
                    try:
                        raw = rewrite(raw)
                    except pb.ProtobufError:
                        pass  # not an object kube-apiserver would send: passed on as it came
                    return web.Response(
                        status=upstream_response.status,
                        body=raw,
                        headers=downstream_response_headers(upstream_response.headers, keep_length=False),
                    )
            stream = translate.stream_translator(answer_type, to_proxy) if to_proxy is not None else None
            response = web.StreamResponse(
                status=upstream_response.status,
                headers=downstream_response_headers(upstream_response.headers, keep_length=stream is None),
            )
            await response.prepare(request)
            with ctx.stream(upstream_response.close):  # a shutdown ends the stream cleanly
                async for chunk in upstream_response.content.iter_any():
                    out = stream.feed(chunk) if stream is not None else chunk
                    if out:
                        await write_or_drop(request, response, out, timeout=write_timeout)
                if stream is not None and (rest := stream.end()):
                    await write_or_drop(request, response, rest, timeout=write_timeout)
            await response.write_eof()
            return response
        except (aiohttp.ClientError, asyncio.TimeoutError, pb.ProtobufError) as exc:
            if response is None or not response.prepared:
                return upstream_error_response(upstream, exc)
            # The partition went away mid-stream (or the proxy shuts down): end the stream;
            # the client re-watches.
            await response.write_eof()
            return response
