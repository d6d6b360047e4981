"""Answering lists, watches and gets from a watch cache (route kind `serve-from-cache`).

LIST joins the stored bytes of the matching objects under the cache's RV, in the cache's format
(JSON, or protobuf for a cache's protobuf twin: proxy.cache.formats). WATCH registers a
cache watcher and, in one atomic step, takes the initial state (from "" / "0" or for
sendInitialEvents=true) or the ring's events after the client's RV; then it writes queued lines
as they come, everything queued in one write. One event is encoded once by the cache and the
same bytes go to every watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Protocol

from multidict import CIMultiDict

from proxy.cache.cache_watcher import CacheWatcher
from proxy.cache.watch_cache import WatchCache
from proxy.messages import Answer, Exchange, ResponseWriter
from routing.cache_policy import CacheMode, CachePlan
from routing.query import watch_lifetime
from routing.selectors import trigger_value


_NO_HEADERS: CIMultiDict[str] = CIMultiDict()  # the writers add Content-Type (start's content_type)

# objects per written piece of a list from cache: ~2.5 MiB of hollow nodes, large enough that
# writes are few, small enough that concurrent lists do not each hold the whole body.
LIST_BATCH = 1000


def too_old(cache: WatchCache, plan: CachePlan) -> bool:
    """Whether `plan` is a watch resumed from an RV the cache has passed but can no longer replay
    from (its ring's floor is later: evicted, or before this process started)."""
    return (plan.mode is CacheMode.WATCH and not plan.send_initial_events and plan.vector is not None
            and cache.is_synced and cache.too_old(plan.vector))


async def serve_expired(writer: ResponseWriter, cache: WatchCache, rv: str) -> None:
    """The cacher's answer to a watch from a too old RV: a watch stream of one ERROR event
    carrying a 410 Expired Status (k8s.io/apiserver/pkg/storage/cacher/cacher.go: `newErrWatcher`,
    "to match the uncached watch implementation"), so the client relists from the cache instead of
    holding a watch on the partitions."""
    await writer.start(200, _NO_HEADERS, content_type=cache.format.watch_content_type)
    await writer.write(cache.format.expired(f"too old resource version: {rv}"))
    await writer.end()


def can_serve(cache: WatchCache, plan: CachePlan) -> bool:
    """Whether the cache is at a position that lets it answer `plan`."""
    if not cache.is_synced or not cache.rv:
        return False
    if plan.vector is None:
        return True
    if plan.mode is CacheMode.WATCH and not plan.send_initial_events:
        return cache.resumable(plan.vector)
    return cache.reached(plan.vector)


def serve_get(cache: WatchCache, plan: CachePlan, slot: int | None) -> Answer | None:
    """The object by name, or None when the cache does not hold it (the partition answers)."""
    raw = cache.get(plan.namespace, plan.name, slot)
    return Answer(200, raw, content_type=cache.format.content_type) if raw is not None else None


async def serve_list(writer: ResponseWriter, cache: WatchCache, plan: CachePlan, slot: int | None) -> None:
    """The matching objects, written in pieces as they are joined (chunked encoding)."""
    objects = cache.matching(plan.label_selector, plan.field_selector, plan.namespace, slot=slot, name=plan.name)
    if len(objects) <= LIST_BATCH:
        return await writer.respond(Answer(200, cache.list_bytes(objects), content_type=cache.format.content_type))
    await writer.start(200, _NO_HEADERS, content_type=cache.format.content_type)
    for piece in cache.list_chunks(objects, batch=LIST_BATCH):
        await writer.write(piece)
    await writer.end()


class StreamRegistry(Protocol):
    """Where a watch registers its closer for the shutdown (`proxy.context.OpenStreams`)."""

    def add(self, closer: Callable[[], None], connection: object) -> None: ...

    def discard(self, closer: Callable[[], None], connection: object) -> None: ...


async def serve_watch(
    ex: Exchange,
    cache: WatchCache,
    plan: CachePlan,
    slot: int | None,
    *,
    streams: StreamRegistry,
    on_behind: Callable[[], None] | None = None,
) -> None:
    """Register a cache watcher and stream its lines. `streams` holds the closers a shutdown
    calls to end every open stream cleanly, by client connection. A front end that can take the
    stream on without this task (`ResponseWriter.detach`: HTTP/2) gets it once the initial
    lines are written; the exchange is then closed by that front end when the watch ends.
    `on_behind` is told when the watcher is closed for falling behind."""
    writer = ex.writer
    watcher = CacheWatcher(
        label_selector=plan.label_selector,
        field_selector=plan.field_selector,
        name=plan.name,
        trigger=trigger_value(cache.trigger_field, plan.field_selector),
        namespace=plan.namespace,
        slot=slot,
        bookmarks=plan.bookmarks,
        format=cache.format,
        on_behind=on_behind,
    )
    # One atomic step: the snapshot (or replay) and the registration, so no event falls between.
    if plan.vector is None or plan.send_initial_events:
        objects = cache.matching(plan.label_selector, plan.field_selector, plan.namespace, slot=slot, name=plan.name)
        initial = [cache.format.event("ADDED", o.raw) for o in objects]
        if plan.send_initial_events and plan.bookmarks:  # as the cacher: setInitialEventsEndBookmarkIfRequested
            initial.append(cache.bookmark_line(cache.rv, initial_events_end=True))
            watcher.last_stamp = cache.rv
    else:
        initial = []
        for event in cache.events_after(plan.vector):
            watcher.offer(event)
    cache.add_watcher(watcher)
    ex.hold(cache.remove_watcher, watcher)
    connection = writer.connection
    ex.hold(streams.discard, watcher.finish, connection)
    streams.add(watcher.finish, connection)

    await writer.start(200, _NO_HEADERS, content_type=cache.format.watch_content_type)
    if initial:
        await writer.write(b"".join(initial))
    deadline = asyncio.get_running_loop().time() + watch_lifetime(ex.request.query)
    if writer.detach(watcher, deadline=deadline, on_end=ex.close):
        ex.detach()
        return
    with contextlib.suppress(TimeoutError):  # the watch's lifetime is over: it ends normally
        async with asyncio.timeout_at(deadline):
            while True:
                await writer.write(b"".join(await watcher.next_batch()))
                if watcher.terminated and not watcher.pending:
                    break  # after a 410 ERROR event, or the end marker b"" of a shutdown
    await writer.end()
