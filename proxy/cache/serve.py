"""Answering lists, watches and gets from a watch cache (route kind `serve-from-cache`).

LIST joins the stored bytes of the matching objects under the cache's RV. WATCH registers a
cache watcher and, in one atomic step, takes the initial state (from "" / "0" or for
sendInitialEvents=true) or the ring's events after the client's RV; then it writes queued lines
as they come. One event is encoded once by the cache and the same bytes go to every watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

from aiohttp import web

from proxy.cache.cache_watcher import CacheWatcher
from proxy.cache.watch_cache import WatchCache, event_line
from proxy.limits import watch_lifetime, write_or_drop
from routing.cache_policy import CacheMode, CachePlan
from routing.status import status_bytes



def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


def can_serve(cache: WatchCache, plan: CachePlan) -> bool:
    """Whether the cache is at a position that lets it answer `plan`."""
    if not cache.is_synced or not cache.rv:
        return False
    if plan.vector is None:
        return True
    if plan.mode is CacheMode.WATCH and not plan.send_initial_events:
        return cache.resumable(plan.vector)
    return cache.reached(plan.vector)


def serve_get(cache: WatchCache, plan: CachePlan, slot: int | None) -> web.Response | None:
    """The object by name, or None when the cache does not hold it (the partition answers)."""
    for candidate in range(len(cache.space)) if slot is None else (slot,):
        obj = cache.objects.get((candidate, plan.namespace, plan.name))
        if obj is not None:
            return _json(obj.raw)
    return None


# objects per written piece of a list from cache: ~2.5 MiB of hollow nodes, large enough that
# writes are few, small enough that concurrent lists do not each hold the whole body.
LIST_BATCH = 1000


async def serve_list(
    request: web.Request, cache: WatchCache, plan: CachePlan, slot: int | None, *, write_timeout: float
) -> web.StreamResponse:
    """The matching objects, written in pieces as they are joined (chunked encoding)."""
    objects = cache.matching(plan.label_selector, plan.field_selector, plan.namespace)
    if slot is not None:
        objects = [o for o in objects if o.slot == slot]
    if len(objects) <= LIST_BATCH:
        return _json(cache.list_bytes(objects))
    response = web.StreamResponse(status=200)
    response.content_type = "application/json"
    response.enable_chunked_encoding()
    await response.prepare(request)
    for piece in cache.list_chunks(objects, batch=LIST_BATCH):
        await write_or_drop(request, response, piece, timeout=write_timeout)
    await response.write_eof()
    return response


async def serve_watch(
    request: web.Request,
    cache: WatchCache,
    plan: CachePlan,
    slot: int | None,
    *,
    write_timeout: float,
    stream: Callable[[Callable[[], None]], AbstractContextManager[None]],
) -> web.StreamResponse:
    """`stream(closer)` registers the watch so a shutdown can end it cleanly."""
    watcher = CacheWatcher(
        label_selector=plan.label_selector,
        field_selector=plan.field_selector,
        name=plan.name,
        namespace=plan.namespace,
        slot=slot,
        bookmarks=plan.bookmarks,
    )
    # One atomic step: the snapshot (or replay) and the registration, so no event falls between.
    if plan.vector is None or plan.send_initial_events:
        objects = cache.matching(plan.label_selector, plan.field_selector, plan.namespace)
        if slot is not None:
            objects = [o for o in objects if o.slot == slot]
        if plan.name:
            objects = [o for o in objects if o.name == plan.name]
        initial = [event_line("ADDED", o.raw) for o in objects]
        if plan.send_initial_events:
            initial.append(cache.bookmark_line(cache.rv, initial_events_end=True))
        start = cache.rv
    else:
        initial = []
        for event in cache.events_after(plan.vector):
            watcher.offer(event)
        start = ""
    cache.add_watcher(watcher)
    if start:
        watcher.last_stamp = start if plan.send_initial_events else ""

    response = web.StreamResponse(status=200)
    response.content_type = "application/json"
    response.enable_chunked_encoding()
    with stream(watcher.finish):
        return await _stream_watch(request, response, cache, watcher, initial, write_timeout)


async def _stream_watch(
    request: web.Request,
    response: web.StreamResponse,
    cache: WatchCache,
    watcher: CacheWatcher,
    initial: list[bytes],
    write_timeout: float,
) -> web.StreamResponse:
    try:
        await response.prepare(request)
        if initial:
            await write_or_drop(request, response, b"".join(initial), timeout=write_timeout)
        deadline = asyncio.get_running_loop().time() + watch_lifetime(request.query)
        with contextlib.suppress(TimeoutError):  # the watch's lifetime is over: it ends normally
            async with asyncio.timeout_at(deadline):
                while True:
                    # Write everything queued in one go: fewer syscalls under bursts.
                    batch = [await watcher.queue.get()]
                    while not watcher.queue.empty():
                        batch.append(watcher.queue.get_nowait())
                    await write_or_drop(request, response, b"".join(batch), timeout=write_timeout)
                    if watcher.terminated and watcher.queue.empty():
                        break  # after a 410 ERROR event, or the end marker b"" of a shutdown
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
    finally:
        cache.remove_watcher(watcher)
    return response


def not_ready_status() -> web.Response:
    """Used when a request needs a cache that has not synced and cannot go upstream."""
    return _json(status_bytes(503, "ServiceUnavailable", "watch cache not synced yet"), status=503)
