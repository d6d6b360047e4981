"""A reflector: keeps one partition's share of a watch cache up to date (client-go
`tools/cache/reflector.go`, asyncio edition).

LIST (consistent, with the cache's selectors, in pages) then WATCH from the list's RV with
bookmarks, through the partition's client (`proxy.clients`: its breaker, failover and timeouts
apply, so a reflector's call can be a recovered partition's half-open trial like any other).
The watch is a `WatchStream`: it reopens from the cache's position when a stream ends or breaks
and drops one silent past the inactivity timeout. A 410 (`Expired`/`Gone`, as an HTTP answer or
an ERROR event) relists, and the watch cache turns the difference into synthetic events.
Failures back off with jitter.

The reflector talks to its partition with the proxy's own credential, not a client's, in the
cache's format: JSON, or protobuf for a cache's protobuf twin (objects are handed to the cache
as their message bytes).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import random
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

import orjson

from proxy.cache.formats import ProtobufFormat
from proxy.cache.watch_cache import WatchCache
from proxy.clients.errors import APIExpired, PartitionMarkedDown, UpstreamError, api_error
from proxy.clients.partition import PartitionClient
from proxy.clients.watch import Backoff, WatchStream
from routing import protobuf as pb
from routing.translate import PROTOBUF

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
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to do


class RelistNeeded(Exception):
    """The partition no longer has the RV the reflector would resume from (410)."""


def _path(cache: WatchCache) -> str:
    spec = cache.spec
    base = f"/api/{spec.version}" if not spec.group else f"/apis/{spec.group}/{spec.version}"
    namespace = f"/namespaces/{spec.namespace}" if spec.namespace else ""
    return f"{base}{namespace}/{spec.resource}"


def _selectors(cache: WatchCache) -> dict[str, str]:
    query = {}
    if cache.spec.label_selector:
        query["labelSelector"] = cache.spec.label_selector
    if cache.spec.field_selector:
        query["fieldSelector"] = cache.spec.field_selector
    return query


class Reflector:
    def __init__(self, *, cache: WatchCache, client: PartitionClient) -> None:
        self.cache = cache
        self._protobuf = isinstance(cache.format, ProtobufFormat)
        self.client = client
        self.partition = client.name
        self.slot = cache.space.index(client.name)

    async def list(self) -> None:
        """LIST page by page (limit=500, as client-go's pager) into the cache, so a partition's
        objects are never all decoded at once. Raises UpstreamError (APIExpired when a later
        page's snapshot was compacted away: the caller starts again), ProtobufError."""
        started = False
        token = ""
        list_rv = 0
        while True:
            query = {**_selectors(self.cache), "limit": str(LIST_PAGE)}
            if token:
                query["continue"] = token
            kind, api_version, rv, token, items = await self._page(urlencode(query))
            if not started:
                self.cache.begin_list(self.partition, kind=kind, api_version=api_version)
                list_rv = int(rv)
                started = True
            self.cache.list_page(self.partition, items)
            del items
            if not token:
                break
        self.cache.end_list(self.partition, list_rv)
        release_freed_memory()

    async def _page(self, query: str) -> tuple[str, str, str, str, Sequence[Any]]:
        """(list kind, apiVersion, list RV, continue token, items) of one LIST page; items as
        the cache's format takes them."""
        if not self._protobuf:
            doc = await self.client.get_json(_path(self.cache), query)
            meta = doc.get("metadata") or {}
            items = doc.get("items") or []
            return doc.get("kind", ""), doc.get("apiVersion", ""), meta["resourceVersion"], meta.get("continue", ""), items
        async with self.client.request("GET", _path(self.cache), query=query, headers={"Accept": PROTOBUF}) as answer:
            body = await answer.read()
            if answer.status >= 300:
                raise api_error(self.partition, answer.status, body)
        env, list_meta, items = pb.list_items(body)
        return env.kind, env.api_version, pb.list_meta_rv(list_meta), pb.list_meta_continue(list_meta), items

    def _watch_query(self) -> str:
        return urlencode({
            **_selectors(self.cache),
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": str(self.cache.vector[self.slot]),
            "timeoutSeconds": str(random.randint(*WATCH_TIMEOUT)),
        })

    async def watch(self) -> None:
        """WATCH from the cache's position until a relist is needed (raises RelistNeeded). The
        stream reopens by itself after an end or a break."""
        accept = f"{PROTOBUF};stream=watch" if self._protobuf else "application/json"
        stream = WatchStream(self.client, _path(self.cache), query=self._watch_query,
                             headers={"Accept": accept}, backoff=BACKOFF)
        on_event = self._protobuf_event if self._protobuf else self._json_event
        try:
            async for event in stream.events():
                on_event(event)
        except APIExpired:
            raise RelistNeeded() from None
        finally:
            await stream.close()

    def _json_event(self, line: bytes) -> None:
        event = orjson.loads(line)
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise RelistNeeded()
            raise UpstreamError(self.partition, f"watch error: {obj.get('message')}")
        if kind == "BOOKMARK":
            rv = (obj.get("metadata") or {}).get("resourceVersion", "")
            if rv.isdigit():
                self.cache.bookmark(self.partition, int(rv))
            return
        self.cache.apply(self.partition, kind, obj)

    def _protobuf_event(self, frame: bytes) -> None:
        """One protobuf watch frame (routing.protobuf). Raises ProtobufError for a frame that is
        not one (a partition that answered JSON to a protobuf watch included)."""
        event = pb.decode_watch_event(frame)
        if event.type == "ERROR":
            status = pb.status_fields(event.object)
            if status.code == 410:
                raise RelistNeeded()
            raise UpstreamError(self.partition, f"watch error: {status.message}")
        if event.type == "BOOKMARK":
            rv = pb.object_rv(event.object)
            if rv.isdigit():
                self.cache.bookmark(self.partition, int(rv))
            return
        self.cache.apply(self.partition, event.type, pb.decode_envelope(event.object).raw)

    async def run(self) -> None:
        """Keep the cache in sync until cancelled."""
        failures = 0
        listed = False
        while True:
            try:
                if not listed:
                    await self.list()
                    listed = True
                    failures = 0
                await self.watch()
            except RelistNeeded:
                log.info("%s/%s: resourceVersion expired, relisting", self.cache.spec.name, self.partition)
                listed = False
            except PartitionMarkedDown as exc:
                pause = BACKOFF.after_window(exc.reopens_in)  # tried again when the window ends
                log.warning("%s/%s: %s; retrying in %.1f s", self.cache.spec.name, self.partition, exc, pause)
                await asyncio.sleep(pause)
            except (UpstreamError, ValueError, KeyError) as exc:
                if isinstance(exc, APIExpired):
                    listed = False  # a later LIST page's snapshot is gone: list again
                failures += 1
                pause = BACKOFF.pause(failures)
                log.warning("%s/%s: %s; retrying in %.1f s", self.cache.spec.name, self.partition, exc, pause)
                await asyncio.sleep(pause)
