"""Union WATCH over several partitions (route kind `fan-out`, verb watch): where a watch is merged.

One upstream watch per partition (`proxy.clients.watch.WatchStream`, always with bookmarks).
A client starting from "" or "0" is served by upstream streaming lists (sendInitialEvents=true,
KEP-3157), so each partition's initial-events-end bookmark tells the proxy that partition's
position and every later RV names all of them. An upstream stream that ends or breaks is
reopened from that partition's last RV, invisibly to the client, while the other partitions keep
flowing; a reopen refused with a Status (a 410) ends the union watch with that Status as an
ERROR event (`Expired` for 410) so the client relists. A partition that is unavailable when the
watch opens does not refuse it (policy `failure.union_policy: partial`, the default): the others
are served at once with a Warning header, and that partition's events follow, from the client's
position in it, once it answers again (as union lists serve the partitions that answer). When
the partition set changes, a partition that joins is watched from its beginning (its objects
arrive as ADDED) and one that retires leaves as DELETED events of its objects (`_retirement`).
`routing.merge.WatchMerge` decides what is written; every event already queued is merged and
written in one chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable

import orjson
from multidict import CIMultiDict

from proxy import answers
from proxy.clients.errors import APIError, PartitionUnavailable, StreamBroken
from proxy.clients.partition import PartitionClient
from proxy.clients.watch import Backoff, WatchStream
from proxy.context import ProxyContext
from proxy.handlers.query_rv import RefusedRV, union_start
from proxy.headers import downstream_response_headers, union_accept, upstream_request_headers
from proxy.messages import Answer, Exchange
from routing import protobuf as pb
from routing import rv as rvcodec
from routing.decide import route_keep
from routing.merge import WatchMerge, deleted_events
from routing.query import is_malformed_rv, refused_watch_options, translated_query, watch_lifetime
from routing.status import expired, status, watch_error_event

# events; each partition's reader may run this far ahead of the downstream writer before it
# waits (TCP backpressure then holds the partition). 64 covers a burst of one event per pod of a
# kubelet's node without letting one slow client buffer a partition's whole stream.
_EVENT_QUEUE_DEPTH = 64
# seconds; pauses before reopening an upstream watch: after it ended normally, and after
# failures (doubled per failure up to the last value), so a partition that closes streams at
# once is not hammered and a recovered one is resumed within seconds.
_REOPEN = Backoff(after_end=0.2, first=0.2, most=5.0)
# seconds; how long a union watch holds an event no epoch can encode yet while the replicas
# publish a new one (a sync takes a table read, a probe of every partition and maybe a write:
# tens of ms; two refresh rounds of slack) before it ends the watch with 410.
_TABLE_HOLD_SECONDS = 10.0
# new epochs one event may wait for: a watch lagging more than an epoch's quarter range behind the
# partitions may not fit even the newest epoch; it relists rather than waiting forever.
_TABLE_HOLDS = 3

_TRUE = {"true", "1"}
# items per page of the list that tells a union watch what a retired partition held; kube-apiserver's
# own default page for informers' lists (client-go pager: 500)
_RETIRE_PAGE = 500
# queued after a retired partition's last event (compared by identity): its DELETED events go here
_RETIRED = bytes(b"retired")


async def union_watch(ex: Exchange, ctx: ProxyContext) -> None:
    """Merge one watch per partition into one stream (module docstring). The stream is in
    protobuf when the client accepts it (kube-apiserver's choice from the client's Accept),
    else JSON."""
    assert ex.route is not None
    ex.target = "union"
    query = ex.request.query
    client_rv = query.get("resourceVersion", "")
    if is_malformed_rv(client_rv):
        return await ex.respond(answers.invalid_rv(client_rv, "not a decimal integer"))
    codec = ctx.rv.codec(ex.route.rv_space)
    try:
        start = await union_start(ctx.rv, codec, client_rv)
    except RefusedRV as refused:
        return await ex.respond(refused.answer)
    gone = [p for i, p in enumerate(codec.space) if start is not None and start[i] and p in codec.retired]
    if gone:
        # The client holds objects of a partition that left: a union watch cannot tell it they
        # are gone one by one (it keeps no state); a relist can.
        return await ex.respond(answers.expired_answer(f"too old resource version: {client_rv} (partition {gone[0]} left the partition set)"))
    accept = union_accept(ex.request.headers.get("Accept", ""))
    if accept is None:
        return await ex.respond(answers.not_acceptable())
    watch = UnionWatch(ex, ctx, _merge_of(ex, ctx, codec, start, client_rv), accept=accept, client_rv=client_rv,
                       streaming_start=start is None and client_rv in {"", "0"})
    try:
        await watch.serve()
    finally:
        await watch.close()


def _merge_of(ex: Exchange, ctx: ProxyContext, codec: rvcodec.RVCodec, start: tuple[int, ...] | None, client_rv: str) -> WatchMerge:
    """The merge of a union watch starting at `start` (None: from the partitions' lists)."""
    route, query = ex.route, ex.request.query
    assert route is not None
    client_sie = query.get("sendInitialEvents", "").lower() in _TRUE
    lists = client_sie or (start is None and client_rv in {"", "0"})  # every partition streams its initial events
    # partitions the client's RV has seen nothing of (they joined after it was issued)
    unseen = {p for p in route.partitions if start is not None and not start[route.slot(p)]}
    return WatchMerge(
        codec=codec,
        start=start or (0,) * len(route.rv_space),
        initial=set(route.partitions) if lists else set(unseen),
        client_initial_events=client_sie,
        bookmarks=query.get("allowWatchBookmarks", "").lower() in _TRUE,
        keep=route_keep(ex.info, route, lambda: ctx.routing),
        joining=set() if lists else set(unseen),
    )


class UnionWatch:
    """One client's union watch (module docstring): a `WatchStream` per partition, each pumped
    into one bounded queue by a task of its own; what is queued is merged (`merge`) and written
    in one piece. Partitions join and retire while it runs (`on_partition_set`)."""

    def __init__(self, ex: Exchange, ctx: ProxyContext, merge: WatchMerge, *, accept: str, client_rv: str, streaming_start: bool) -> None:
        """`streaming_start`: the client gave no position ("" or "0"): every partition starts
        with a streaming list of its initial events."""
        assert ex.route is not None
        self.ex, self.ctx, self.merge = ex, ctx, merge
        self.client_rv = client_rv
        self.client_sie = ex.request.query.get("sendInitialEvents", "").lower() in _TRUE
        self.refused_options = refused_watch_options(ex.request.query)
        self.streaming_start = streaming_start
        self.headers = upstream_request_headers(ex.request.headers)  # what every partition's watch sends
        self.headers["Accept"] = accept
        self.headers.pop("Accept-Encoding", None)
        self.streams: dict[str, WatchStream] = {}
        for p in ex.route.partitions:
            self.streams[p] = self._stream_of(p)
        self.queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue(maxsize=_EVENT_QUEUE_DEPTH)
        self.pumps: dict[str, asyncio.Task[None]] = {}
        self.helpers: list[asyncio.Task[None]] = []  # retirements under way
        self.retiring: dict[str, PartitionClient | None] = {}  # a retired partition's client, until its objects are listed
        self.protobuf = False

    def _upstream_query(self, partition: str) -> str:
        """The partition's query at each (re)open: from its last RV, still streaming its initial
        events if it had not finished them."""
        merge = self.merge
        native = merge.vector[merge.space.index(partition)]
        joining = partition in merge.joining
        replace: dict[str, str | None] = {"timeoutSeconds": None, "watch": "true", "allowWatchBookmarks": "true",
                                          "resourceVersion": str(native) if native else ("" if joining else self.client_rv)}
        first = self.streams[partition].opened == 0
        if first and self.refused_options:
            # the client's own options, which kube-apiserver refuses: each partition answers
            # its 422 Invalid (after its authorization, as kube-apiserver orders them)
            replace |= {"sendInitialEvents": self.ex.request.query.get("sendInitialEvents"),
                        "resourceVersionMatch": self.ex.request.query.get("resourceVersionMatch")}
        elif ((first or partition in merge.initial) and (self.client_sie or self.streaming_start)) or (joining and not native):
            replace |= {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
        else:
            replace |= {"sendInitialEvents": None, "resourceVersionMatch": None}
        return translated_query(self.ex.request.query_string, replace=replace)

    def _stream_of(self, partition: str) -> WatchStream:
        return WatchStream(self.ctx.clients[partition], self.ex.info.upstream_path, query=functools.partial(self._upstream_query, partition),
                           headers=self.headers, identity=self.ex.identity, backoff=_REOPEN)

    async def serve(self) -> None:
        """Open every partition's watch, then stream (or answer with the refusal instead)."""
        ex, ctx, streams = self.ex, self.ctx, self.streams
        refused, down = await _open_all(streams, partial=ctx.config.failure.union_policy == "partial")
        if refused is not None:
            return await ex.respond(refused)
        for partition in down:
            ctx.metrics.degraded.labels(partition, "partial").inc()
        first = next(s for p, s in streams.items() if p not in down)
        if len({s.protobuf for p, s in streams.items() if p not in down}) > 1:
            return await ex.respond(answers.bad_gateway("partitions answered the watch in different media types"))
        self.protobuf = first.protobuf
        headers = CIMultiDict({"Content-Type": first.content_type or "application/json"})
        for p in down:
            headers.add("Warning", f'299 - "partition {p} is unavailable: its events follow when it is back"')
        await ex.writer.start(200, headers)
        await self._run()

    async def _run(self) -> None:
        """Pump every stream and write merged batches until the watch's lifetime ends, the client
        goes, the merge finishes (an ERROR event) or the proxy shuts down."""
        ex, ctx, merge, queue = self.ex, self.ctx, self.merge, self.queue
        deadline = asyncio.get_running_loop().time() + watch_lifetime(ex.request.query)
        self.pumps = {p: asyncio.create_task(self._pump(p, s), name=f"union-watch:{p}") for p, s in self.streams.items()}
        try:
            with ctx.stream(self._finish, ex.writer.connection), ctx.partition_set_listener(self.on_partition_set), contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    while not merge.finished:
                        batch = [await queue.get()]
                        while not queue.empty():
                            batch.append(queue.get_nowait())
                        if not await self._write(batch):
                            break
        finally:
            tasks = [*self.pumps.values(), *self.helpers]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await ex.writer.end()

    async def _pump(self, partition: str, stream: WatchStream) -> None:
        try:
            async for event in stream.events():
                await self.queue.put((partition, event))
        except APIError as exc:  # a reopen refused: the union watch ends with its Status
            await self.queue.put((partition, _status_event(exc.code, exc.body, protobuf=self.protobuf)))

    def _finish(self) -> None:
        """Shutdown: the marker ("", b"") ends the stream."""
        while self.queue.full():
            self.queue.get_nowait()
        self.queue.put_nowait(("", b""))

    def on_partition_set(self) -> None:
        """The partition set changed (plain def: runs atomically). A partition that joined
        the role is watched from its beginning, its objects reach the client as ADDED events.
        One that retired stops being watched; once its last queued event is merged, its
        objects leave as DELETED events (`_retirement`)."""
        codec = self.ctx.rv.codec_extending(self.merge.space)
        if codec is None or codec is self.merge.codec:
            return
        gone = sorted(p for p in self.streams if p in codec.retired)
        for p in self.merge.rebase(codec):
            self.streams[p] = self._stream_of(p)
            self.pumps[p] = asyncio.create_task(self._pump(p, self.streams[p]), name=f"union-watch:{p}")
        for p in gone:
            self.retiring[p] = self.ctx.clients.get(p)  # taken now: the proxy closes a retired partition's client soon
            task = asyncio.create_task(self._stop_then_mark(p, self.streams.pop(p), self.pumps.pop(p)), name=f"union-watch-retire:{p}")
            self.helpers.append(task)

    async def _stop_then_mark(self, partition: str, stream: WatchStream, pumping: asyncio.Task[None]) -> None:
        """Stop a retired partition's stream; then queue the marker behind its last event."""
        pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pumping
        await stream.close()
        await self.queue.put((partition, _RETIRED))

    async def _write(self, batch: list[tuple[str, bytes]]) -> bool:
        """merge_and_write, with each retirement marker replaced by that partition's DELETED
        events, computed once everything before it is merged (the position they are at)."""
        ex, ctx, merge, protobuf = self.ex, self.ctx, self.merge, self.protobuf
        on_event = merge.on_frame if protobuf else merge.on_line
        done = 0
        for i, (partition, event) in enumerate(batch):
            if event is not _RETIRED:
                continue
            if not await merge_and_write(ex, ctx, merge, batch[done:i], on_event, protobuf=protobuf):
                return False
            events = await _retirement(ex, merge, partition, self.retiring.pop(partition, None), headers=self.headers, protobuf=protobuf)
            if not await merge_and_write(ex, ctx, merge, [(partition, e) for e in events], on_event, protobuf=protobuf):
                return False
            done = i + 1
        return await merge_and_write(ex, ctx, merge, batch[done:], on_event, protobuf=protobuf)

    async def close(self) -> None:
        for stream in self.streams.values():
            await stream.close()


async def _open_all(streams: dict[str, WatchStream], *, partial: bool) -> tuple[Answer | None, list[str]]:
    """Open every partition's watch at once. Returns the answer to give instead of a stream
    (a partition's own refusal as it came; 503 when a partition is unavailable and `partial` is
    off, or when none is available), else None, and the partitions that are unavailable: with
    `partial` the watch is served without them and their streams keep trying to open (each
    `WatchStream` reopens with backoff), from the client's position in them."""
    opened = await asyncio.gather(*(s.open() for s in streams.values()), return_exceptions=True)
    down: list[str] = []
    unavailable: PartitionUnavailable | None = None
    for partition, result in zip(streams, opened):
        if isinstance(result, PartitionUnavailable):
            down.append(partition)
            unavailable = result
            continue
        if isinstance(result, BaseException):
            raise result
        if result.status != 200:
            return Answer(result.status, await result.read(), downstream_response_headers(result.headers, keep_length=False),
                          content_type=None), down
    if unavailable is not None and (not partial or len(down) == len(streams)):
        return answers.partition_unavailable(unavailable), down
    return None, down


async def _retirement(ex: Exchange, merge: WatchMerge, partition: str, client: PartitionClient | None, *,
                      headers: CIMultiDict[str], protobuf: bool) -> list[bytes]:
    """The events that tell the client a retired partition's objects are gone: its objects
    matching the watch at the watch's position in it (a LIST with resourceVersionMatch=Exact,
    as the client's identity, paged), as DELETED events one past that position (the synthetic
    position `WatchCache.retire` uses too). When that cannot be done (nothing seen of it yet,
    its initial events unfinished, the list refused or failed, a Table watch), a 410 ERROR
    event instead: the client relists, as after any expired watch."""
    native = merge.vector[merge.space.index(partition)]
    events: list[bytes] = []
    problem = ""
    if not native:
        problem = "nothing was seen of it yet"
    elif partition in merge.initial:
        problem = "its initial events were not over"
    elif client is None:
        problem = "its client is closed"
    else:
        replace: dict[str, str | None] = {"watch": None, "allowWatchBookmarks": None, "sendInitialEvents": None, "timeoutSeconds": None,
                                          "resourceVersion": str(native), "resourceVersionMatch": "Exact", "limit": str(_RETIRE_PAGE)}
        try:
            while True:
                whole = await client.read_whole("GET", ex.info.upstream_path, query=translated_query(ex.request.query_string, replace=replace),
                                                headers=headers, identity=ex.identity)
                if whole.status != 200:
                    problem = f"its list answered {whole.status}"
                    break
                page, token = deleted_events(whole.body, native + 1, protobuf=protobuf)
                events += page
                if not token:
                    break
                replace |= {"resourceVersion": None, "resourceVersionMatch": None, "continue": token}
        except (PartitionUnavailable, StreamBroken, ValueError, RuntimeError) as exc:  # RuntimeError: its client closed
            problem = f"its objects could not be listed: {exc}"
    if problem:
        message = f"partition {partition} left the partition set and {problem}: relist"
        return [_status_event(410, orjson.dumps(expired(message)), protobuf=protobuf)]
    return events


async def merge_and_write(ex: Exchange, ctx: ProxyContext, merge: WatchMerge, batch: list[tuple[str, bytes]],
                          on_event: Callable[[str, bytes], list[bytes]], *, protobuf: bool,
                          hold: float = _TABLE_HOLD_SECONDS) -> bool:
    """Merge a batch of upstream events and write what results in one piece. An event no epoch
    fits yet holds the stream (what is ready is written first) until the table catches up, at
    most `_TABLE_HOLDS` new epochs of `hold` seconds each, then ends it with 410. False when the
    stream must end (the shutdown marker)."""
    out: list[bytes] = []
    i = holds = 0
    ended = False
    while i < len(batch) and not merge.finished:
        partition, event = batch[i]
        if not partition:
            ended = True  # the shutdown marker
            break
        try:
            out += on_event(partition, event)
        except rvcodec.RVUnencodable as exc:  # first: it is a ValueError too
            # The partitions ran past the newest epoch: write what is ready, hold the stream
            # until the table catches up, then offer the same event again.
            if out:
                await ex.writer.write(b"".join(out))
                out = []
            holds += 1
            if holds > _TABLE_HOLDS or not await _table_caught_up(ctx, hold=hold):
                out += merge.expire(str(exc), protobuf=protobuf)
            continue
        except (ValueError, pb.ProtobufError):
            pass  # an event kube-apiserver would not send: skipped, the stream goes on
        holds = 0
        i += 1
    if out:
        await ex.writer.write(b"".join(out))
    return not ended


async def _table_caught_up(ctx: ProxyContext, *, hold: float = _TABLE_HOLD_SECONDS) -> bool:
    """Wait (at most `hold` seconds) for the shared table to get a new epoch, asking for a sync
    now; False when the time is over. The caller retries its encoding after each True."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + hold
    published = ctx.rv.table.newest_number
    while loop.time() < deadline:
        ctx.rv.request_sync()
        await ctx.rv.sync_now()
        if ctx.rv.table.newest_number != published:
            return True
        await asyncio.sleep(0.2)
    return False


def _status_event(code: int, raw: bytes, *, protobuf: bool) -> bytes:
    """An ERROR event for an upstream watch that could not be reopened (a JSON line, or a
    protobuf frame payload for a protobuf stream)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict) or obj.get("kind") != "Status":
        obj = expired("watch could not be resumed") if code == 410 else status(code, "InternalError", "watch could not be resumed")
    if protobuf:
        reason = "Expired" if code == 410 else str(obj.get("reason", "InternalError"))
        return pb.encode_watch_event("ERROR", pb.status_object(code=code, reason=reason, message=str(obj.get("message", ""))))
    return watch_error_event(obj)
