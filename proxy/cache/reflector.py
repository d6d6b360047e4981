"""A reflector: keeps one partition's share of a watch cache up to date (client-go
`tools/cache/reflector.go`, asyncio edition).

LIST (consistent, with the cache's selectors) then WATCH from the list's RV with bookmarks.
A watch that ends normally is reopened from the last RV; an `Expired`/`Gone` answer (410, as an
HTTP status or an ERROR event) relists, and the watch cache turns the difference into synthetic
events. A stream silent for longer than the inactivity timeout is dropped and reopened (the
partition sends a bookmark about once a minute). Failures back off with jitter.

The reflector talks to its partition with the proxy's own credential, not a client's.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import random
from urllib.parse import urlencode

import aiohttp
import orjson

from proxy.cache.watch_cache import WatchCache
from proxy.streams import iter_lines
from proxy.upstream import Upstream

log = logging.getLogger("partition_proxy.reflector")

# seconds; a watch asks the partition to end it after a random time in this range, as client-go's
# reflector does (minWatchTimeout 5 min), so connections are rebalanced now and then.
WATCH_TIMEOUT = (300, 600)
# seconds; no byte at all for this long means the stream is dead: kube-apiserver sends a bookmark
# about every 60 s (cacher defaultBookmarkFrequency), so 90 s is one missed bookmark plus slack.
INACTIVITY_TIMEOUT = 90.0
# seconds; backoff after a failure: doubles from the first value up to the second, +-50 % jitter.
BACKOFF = (0.5, 30.0)


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
    def __init__(self, *, cache: WatchCache, upstream: Upstream) -> None:
        self.cache = cache
        self.upstream = upstream
        self.partition = upstream.name
        self.slot = cache.space.index(upstream.name)
        self.watches_opened = 0
        self.relists = 0

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.upstream.auth_header:
            headers["Authorization"] = self.upstream.auth_header
        return headers

    async def list(self) -> None:
        """LIST page by page (limit=500, as client-go's pager) into the cache, so a partition's
        objects are never all decoded at once. Raises aiohttp.ClientError; a 410 on a later
        page (snapshot compacted away) restarts the LIST."""
        started = False
        token = ""
        list_rv = 0
        while True:
            query = {**_selectors(self.cache), "limit": str(LIST_PAGE)}
            if token:
                query["continue"] = token
            url = self.upstream.url(_path(self.cache), urlencode(query))
            async with self.upstream.session.get(url, headers=self._headers(), timeout=self.upstream.request_timeout) as resp:
                if resp.status != 200:
                    raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status, message=(await resp.text())[:200])
                doc = orjson.loads(await resp.read())
            meta = doc.get("metadata") or {}
            if not started:
                self.cache.begin_list(self.partition, kind=doc.get("kind", ""), api_version=doc.get("apiVersion", ""))
                list_rv = int(meta["resourceVersion"])
                started = True
            self.cache.list_page(self.partition, doc.get("items") or ())
            del doc
            token = meta.get("continue", "")
            if not token:
                break
        self.cache.end_list(self.partition, list_rv)
        self.relists += 1
        release_freed_memory()

    async def watch(self) -> None:
        """WATCH from the cache's RV for this partition until the stream ends. Raises
        RelistNeeded on 410, aiohttp.ClientError / asyncio.TimeoutError on failures."""
        query = {
            **_selectors(self.cache),
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": str(self.cache.vector[self.slot]),
            "timeoutSeconds": str(random.randint(*WATCH_TIMEOUT)),
        }
        url = self.upstream.url(_path(self.cache), urlencode(query))
        async with self.upstream.session.get(url, headers=self._headers(), timeout=self.upstream.watch_timeout) as resp:
            if resp.status == 410:
                raise RelistNeeded()
            if resp.status != 200:
                raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status, message=(await resp.text())[:200])
            self.watches_opened += 1
            lines = iter_lines(resp)
            while True:
                try:
                    line = await asyncio.wait_for(anext(lines), INACTIVITY_TIMEOUT)
                except StopAsyncIteration:
                    return
                event = orjson.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise RelistNeeded()
                    raise aiohttp.ClientPayloadError(f"watch error: {obj.get('message')}")
                if kind == "BOOKMARK":
                    rv = (obj.get("metadata") or {}).get("resourceVersion", "")
                    if rv.isdigit():
                        self.cache.bookmark(self.partition, int(rv))
                    continue
                self.cache.apply(self.partition, kind, obj)

    async def run(self) -> None:
        """Keep the cache in sync until cancelled."""
        backoff = BACKOFF[0]
        listed = False
        while True:
            try:
                if not listed:
                    await self.list()
                    listed = True
                await self.watch()
                backoff = BACKOFF[0]
            except RelistNeeded:
                log.info("%s/%s: resourceVersion expired, relisting", self.cache.spec.name, self.partition)
                listed = False
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, KeyError) as exc:
                if isinstance(exc, (aiohttp.ClientConnectionError, asyncio.TimeoutError, OSError)):
                    self.upstream.rotate()  # another endpoint of the partition, if it has one
                log.warning("%s/%s: %s; retrying in %.1f s", self.cache.spec.name, self.partition, exc, backoff)
                await asyncio.sleep(backoff * random.uniform(0.5, 1.5))
                backoff = min(backoff * 2, BACKOFF[1])
