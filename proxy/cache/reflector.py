"""A reflector: keeps one partition's share of a watch cache up to date (client-go
`tools/cache/reflector.go`, asyncio edition).

LIST (consistent, with the cache's selectors, in pages) then WATCH from the list's RV with
bookmarks, through the partition's client (`proxy.clients`: its breaker, failover and timeouts
apply, so a reflector's call can be a recovered partition's half-open trial like any other).
The watch is a `WatchStream`: it reopens from the cache's position when a stream ends or breaks
and drops one silent past the inactivity timeout. A 410 (`Expired`/`Gone`, as an HTTP answer or
an ERROR event) relists, and the watch cache turns the difference into synthetic events.
Failures back off with jitter.

The reflector talks to its partition with the proxy's own credential, not a client's. Like
client-go's Reflector it knows no wire format and no cache: it writes to a `Store` (a watch
cache, `proxy.cache.watch_cache.WatchCache`), whose format (`proxy.cache.formats`: JSON, or
protobuf for a cache's protobuf twin) names the media types it asks for and decodes what the
partition answers. Which reflectors run, and when, is `proxy.cache.cache_set`'s.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
from collections.abc import Iterable
from typing import Any, Protocol
from urllib.parse import urlencode

from config.models import CacheConfig
from proxy.allocator import release_free_heap
from proxy.cache.formats import ListPage, ObjectFormat
from proxy.clients.errors import APIExpired, PartitionMarkedDown, UpstreamError, api_error
from proxy.clients.partition import PartitionClient
from proxy.clients.watch import Backoff, WatchStream

log = logging.getLogger("partition_proxy.reflector")

# seconds; a watch asks the partition to end it after a random time in this range, as client-go's
# reflector does (minWatchTimeout 5 min), so connections are rebalanced now and then.
WATCH_TIMEOUT = (300, 600)
# seconds; pauses after a failure (LIST or watch): doubles from `first` up to `most`, +-50 %.
BACKOFF = Backoff(after_end=0.2, first=0.5, most=30.0)
# objects per LIST page: client-go's pager default (tools/pager), which kube-apiserver serves
# from its watch cache in one snapshot.
LIST_PAGE = 500


def release_freed_memory() -> None:
    """After a LIST: collect, move the surviving objects (the cache's long-lived records) out of
    the garbage collector's view (gc.freeze: full collections no longer walk every cached
    object; they are still freed by reference counting), and give freed memory back to the OS
    (glibc keeps freed arenas otherwise), so the proxy's RSS follows the objects it keeps rather
    than the peak of decoding them."""
    gc.collect()
    gc.freeze()
    release_free_heap()


class RelistNeeded(Exception):
    """The partition no longer has the RV the reflector would resume from (410)."""


class Store(Protocol):
    """What a reflector writes to (client-go's `Reflector.store`): one watch cache
    (proxy.cache.watch_cache.WatchCache). `spec` names the resource and selectors to list and
    watch, `format` the wire (proxy.cache.formats); `position` is the native RV the partition
    has reached, where a watch resumes. Plain defs: each change is atomic (STYLE §8)."""

    @property
    def spec(self) -> CacheConfig: ...  # pragma: no cover
    @property
    def format(self) -> ObjectFormat: ...  # pragma: no cover
    def position(self, partition: str) -> int: ...  # pragma: no cover
    def begin_list(self, partition: str, *, kind: str, api_version: str) -> None: ...  # pragma: no cover
    def list_page(self, partition: str, items: Iterable[Any]) -> None: ...  # pragma: no cover
    def end_list(self, partition: str, list_rv: int) -> None: ...  # pragma: no cover
    def apply(self, partition: str, kind: str, obj: Any) -> None: ...  # pragma: no cover
    def bookmark(self, partition: str, native: int) -> None: ...  # pragma: no cover


def _path(spec: CacheConfig) -> str:
    base = f"/api/{spec.version}" if not spec.group else f"/apis/{spec.group}/{spec.version}"
    namespace = f"/namespaces/{spec.namespace}" if spec.namespace else ""
    return f"{base}{namespace}/{spec.resource}"


def _selectors(spec: CacheConfig) -> dict[str, str]:
    query = {}
    if spec.label_selector:
        query["labelSelector"] = spec.label_selector
    if spec.field_selector:
        query["fieldSelector"] = spec.field_selector
    return query


class Reflector:
    """Keeps `partition`'s share of `store` in sync through `client` (the module docstring)."""

    def __init__(self, *, store: Store, client: PartitionClient) -> None:
        self.store = store
        self.client = client
        self.partition = client.name

    async def list(self) -> None:
        """LIST page by page (limit=500, as client-go's pager) into the store, so a partition's
        objects are never all decoded at once. Raises UpstreamError (APIExpired when a later
        page's snapshot was compacted away: the caller starts again), ProtobufError."""
        started = False
        token = ""
        list_rv = 0
        while True:
            query = {**_selectors(self.store.spec), "limit": str(LIST_PAGE)}
            if token:
                query["continue"] = token
            page = await self._page(urlencode(query))
            if not started:
                self.store.begin_list(self.partition, kind=page.kind, api_version=page.api_version)
                list_rv = int(page.resource_version)
                started = True
            self.store.list_page(self.partition, page.items)
            token = page.continue_token
            del page
            if not token:
                break
        self.store.end_list(self.partition, list_rv)
        release_freed_memory()

    async def _page(self, query: str) -> ListPage:
        """One LIST page, decoded by the store's format. Raises UpstreamError (the partition's
        APIError for a non-2xx answer), ValueError, KeyError (not a list)."""
        fmt = self.store.format
        async with self.client.request("GET", _path(self.store.spec), query=query, headers={"Accept": fmt.content_type}) as answer:
            body = await answer.read()
            if answer.status >= 300:
                raise api_error(self.partition, answer.status, body)
        return fmt.decode_list(body)

    def _watch_query(self) -> str:
        return urlencode({
            **_selectors(self.store.spec),
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": str(self.store.position(self.partition)),
            "timeoutSeconds": str(random.randint(*WATCH_TIMEOUT)),
        })

    async def watch(self) -> None:
        """WATCH from the store's position until a relist is needed (raises RelistNeeded). The
        stream reopens by itself after an end or a break."""
        stream = WatchStream(self.client, _path(self.store.spec), query=self._watch_query,
                             headers={"Accept": self.store.format.watch_content_type}, backoff=BACKOFF)
        try:
            async for event in stream.events():
                self._on_event(event)
        except APIExpired:
            raise RelistNeeded() from None
        finally:
            await stream.close()

    def _on_event(self, data: bytes) -> None:
        """One watch event's bytes (a JSON line, or a protobuf frame's payload) into the store.
        Raises RelistNeeded (an ERROR event with 410), UpstreamError (another ERROR event),
        ValueError (bytes the format cannot read: a partition that answered JSON to a protobuf
        watch included)."""
        event = self.store.format.decode_event(data)
        if event.type == "ERROR":
            if event.code == 410:
                raise RelistNeeded()
            raise UpstreamError(self.partition, f"watch error: {event.message}")
        if event.type == "BOOKMARK":
            rv = event.resource_version
            if rv.isdigit():
                self.store.bookmark(self.partition, int(rv))
            return
        self.store.apply(self.partition, event.type, event.object)

    async def run(self) -> None:
        """Keep the store in sync until cancelled."""
        failures = 0
        listed = False
        name = self.store.spec.name
        while True:
            try:
                if not listed:
                    await self.list()
                    listed = True
                    failures = 0
                await self.watch()
            except RelistNeeded:
                log.info("%s/%s: resourceVersion expired, relisting", name, self.partition)
                listed = False
            except PartitionMarkedDown as exc:
                pause = BACKOFF.after_window(exc.reopens_in)  # tried again when the window ends
                log.warning("%s/%s: %s; retrying in %.1f s", name, self.partition, exc, pause)
                await asyncio.sleep(pause)
            except (UpstreamError, ValueError, KeyError) as exc:
                if isinstance(exc, APIExpired):
                    listed = False  # a later LIST page's snapshot is gone: list again
                failures += 1
                pause = BACKOFF.pause(failures)
                log.warning("%s/%s: %s; retrying in %.1f s", name, self.partition, exc, pause)
                await asyncio.sleep(pause)
