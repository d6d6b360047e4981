"""Forwarding a request to the one partition that owns it (route kind `forward`).

Bodies stream both ways; a watch is written downstream event by event. Merged resources
(`Route.rv_space` non-empty) speak proxy RVs to the client: the request's resourceVersion
(query and JSON body) is translated to the owner's native RV, and JSON answers get theirs
translated back (`routing.rvrewrite`). Protobuf passes through untouched, with native RVs: the
proxy does not decode protobuf objects.

Errors: upstream errors are returned as they came. A partition that cannot be reached or does
not answer within its deadline, or whose circuit breaker is open (`proxy.health`), gives 503
ServiceUnavailable with an integer Retry-After, as a Status.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from urllib.parse import parse_qsl, urlencode

import aiohttp
from aiohttp import web

from proxy.context import ProxyContext
from proxy.headers import downstream_response_headers, upstream_request_headers
from proxy.identity import Identity
from proxy.limits import write_or_drop
from proxy.streams import iter_lines
from proxy.upstream import Upstream
from routing import rv as rvcodec
from routing.decide import Route
from routing.merge import translate_single
from routing.requestinfo import RequestInfo, is_long_running
from routing.rvrewrite import rewrite_rvs
from routing.status import expired, status

# Media types whose bodies may carry resourceVersions the proxy translates.
_JSON_BODY_TYPES = ("application/json", "application/merge-patch+json", "application/strategic-merge-patch+json")


def status_response(code: int, reason: str, message: str, *, headers: dict[str, str] | None = None) -> web.Response:
    """A Status answer made by the proxy itself."""
    return web.json_response(status(code, reason, message), status=code, headers=headers)


def expired_response(message: str) -> web.Response:
    return web.json_response(expired(message), status=410)


def unavailable_response(upstream: Upstream, why: str) -> web.Response:
    """503 ServiceUnavailable with an integer Retry-After (client-go retries such answers up
    to 10 times, waiting that long: k8s.io/client-go/rest/with_retry.go)."""
    return status_response(
        503,
        "ServiceUnavailable",
        f"partition {upstream.name} is unavailable: {why}",
        headers={"Retry-After": str(upstream.breaker.retry_after())},
    )


def upstream_error_response(upstream: Upstream, exc: BaseException) -> web.Response:
    """The Status for a partition the proxy could not talk to (it counts against the
    partition's circuit breaker)."""
    upstream.breaker.failure()
    why = "no answer within its deadline" if isinstance(exc, asyncio.TimeoutError) else type(exc).__name__
    return unavailable_response(upstream, why)


def translated_query(query_string: str, *, replace: dict[str, str | None]) -> str:
    """The query with some parameters replaced (value) or removed (None); others untouched."""
    pairs = [(k, v) for k, v in parse_qsl(query_string, keep_blank_values=True) if k not in replace]
    pairs += [(k, v) for k, v in replace.items() if v is not None]
    return urlencode(pairs)


async def _body_chunks(request: web.Request) -> AsyncIterator[bytes]:
    async for chunk in request.content.iter_any():
        yield chunk


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
    if not upstream.breaker.allow():
        return unavailable_response(upstream, "marked down after repeated failures")
    merged = bool(route.rv_space) and partition in route.rv_space
    slots = len(route.rv_space)
    slot = route.slot(partition) if merged else 0

    query_string = request.rel_url.raw_query_string
    if merged and "resourceVersion" in request.query:
        try:
            native = rvcodec.to_native(request.query["resourceVersion"], epoch=ctx.epoch, slots=slots, slot=slot)
        except rvcodec.RVError as exc:
            return expired_response(f"too old resource version: {exc}")
        if native is not None:
            query_string = translated_query(query_string, replace={"resourceVersion": native})

    headers = ctx.upstream_headers(upstream_request_headers(request.headers), upstream, identity)
    content_type = request.headers.get("Content-Type", "")
    if merged:
        headers.pop("Accept-Encoding", None)  # JSON answers are rewritten: ask for them plain
        if body is None and request.can_read_body and content_type.startswith(_JSON_BODY_TYPES):
            body = await request.read()
        if body is not None and content_type.startswith(_JSON_BODY_TYPES):

            def to_native(value: bytes) -> bytes | None:
                try:
                    native = rvcodec.to_native(value.decode(), epoch=ctx.epoch, slots=slots, slot=slot)
                except rvcodec.RVError:
                    return None  # the partition rejects it as a conflict, as it would
                return native.encode() if native is not None else None

            body = rewrite_rvs(body, to_native)

    data: bytes | AsyncIterator[bytes] | None = body
    if data is None and request.can_read_body:
        data = _body_chunks(request)

    is_watch = is_long_running(info, request.query)
    timeout = upstream.watch_timeout if is_watch else upstream.request_timeout
    attempts = len(upstream.endpoints)
    while True:
        try:
            upstream_response = await upstream.session.request(
                request.method,
                upstream.url(info.upstream_path, query_string),
                headers=headers,
                data=data,
                timeout=timeout,
                allow_redirects=False,
                # A body the client sent without Content-Type goes on without one (aiohttp would
                # add application/octet-stream, which kube-apiserver refuses with 415).
                skip_auto_headers=("Content-Type",),
            )
            break
        except aiohttp.ClientConnectorError as exc:
            # Nothing was sent: the next endpoint of the partition may take the request, even
            # a mutating one. A streamed body cannot be replayed, so only bytes are retried.
            upstream.rotate()
            attempts -= 1
            if attempts <= 0 or not (data is None or isinstance(data, bytes)):
                return upstream_error_response(upstream, exc)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            upstream.rotate()
            return upstream_error_response(upstream, exc)
    upstream.breaker.success()

    async with upstream_response:
        answer_type = upstream_response.headers.get("Content-Type", "")
        rewrite = merged and answer_type.startswith("application/json")
        translate = translate_single(ctx.epoch, slots, slot)
        write_timeout = ctx.config.limits.watch_write_timeout_seconds
        response: web.StreamResponse | None = None
        try:
            if not is_watch and rewrite:
                raw = await upstream_response.read()
                return web.Response(
                    status=upstream_response.status,
                    body=rewrite_rvs(raw, translate),
                    headers=downstream_response_headers(upstream_response.headers, keep_length=False),
                )
            response = web.StreamResponse(
                status=upstream_response.status,
                headers=downstream_response_headers(upstream_response.headers, keep_length=not rewrite),
            )
            await response.prepare(request)
            with ctx.stream(upstream_response.close):  # a shutdown ends the stream cleanly
                await _copy(request, response, upstream_response, rewrite, translate, write_timeout)
            await response.write_eof()
            return response
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            if response is None or not response.prepared:
                return upstream_error_response(upstream, exc)
            # The partition went away mid-stream (or the proxy shuts down): end the stream;
            # the client re-watches.
            await response.write_eof()
            return response


async def _copy(
    request: web.Request,
    response: web.StreamResponse,
    upstream_response: aiohttp.ClientResponse,
    rewrite: bool,
    translate: Callable[[bytes], bytes | None],
    write_timeout: float,
) -> None:
    """Copy a streaming answer: line by line with RVs rewritten, or chunks as they come."""
    if rewrite:
        async for line in iter_lines(upstream_response):
            await write_or_drop(request, response, rewrite_rvs(line, translate), timeout=write_timeout)
    else:
        async for chunk in upstream_response.content.iter_any():
            await write_or_drop(request, response, chunk, timeout=write_timeout)
