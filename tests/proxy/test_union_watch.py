"""The union watch's merge-and-write step on its own: a batch of upstream events, a recording
writer, and a resourceVersion table that publishes an epoch when asked (or never)."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.messages import Exchange
from proxy.handlers.union_watch import merge_and_write
from routing import rv as rvcodec
from routing.merge import WatchMerge
from tests.proxy.pipeline.test_steps import Writer, exchange

SPACE = ("tp1", "tp2")
FIRST = rvcodec.Epoch(1, SPACE, 8, (1000, 1000))  # natives 1000..1254 fit
SECOND = rvcodec.Epoch(2, SPACE, 8, (4900, 1000))


class Table:
    """What the union watch needs of proxy.rv_epochs.ResourceVersions: a table, and a sync that
    publishes the next epoch (`publishes`) or finds none."""

    def __init__(self, codec: rvcodec.RVCodec, *, publishes: bool) -> None:
        self.codec = codec
        self.publishes = publishes
        self.syncs = 0

    @property
    def table(self) -> rvcodec.EpochTable:
        return self.codec.table

    def request_sync(self) -> None:
        pass

    async def sync_now(self) -> None:
        self.syncs += 1
        if self.publishes:
            self.codec.set_table(rvcodec.EpochTable((FIRST, SECOND)))


class Ctx:
    def __init__(self, rv: Table) -> None:
        self.rv = rv


def event(name: str, native: int) -> bytes:
    obj = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": name, "namespace": "acme-x", "resourceVersion": str(native)}}
    return orjson.dumps({"type": "MODIFIED", "object": obj}) + b"\n"


def written(ex: Exchange) -> list[dict[str, Any]]:
    writer = ex.writer
    assert isinstance(writer, Writer)
    return [orjson.loads(line) for chunk in writer.writes for line in chunk.splitlines()]


def setup(*, publishes: bool) -> tuple[Exchange, Ctx, WatchMerge, rvcodec.RVCodec]:
    codec = rvcodec.RVCodec(SPACE, rvcodec.EpochTable((FIRST,)))
    merge = WatchMerge(codec=codec, start=(1000, 1000), initial=set(), client_initial_events=False, bookmarks=False)
    return exchange(), Ctx(Table(codec, publishes=publishes)), merge, codec


async def test_an_event_no_epoch_fits_waits_for_the_table_and_nothing_is_skipped() -> None:
    ex, ctx, merge, codec = setup(publishes=True)
    batch = [("tp1", event("a", 1100)), ("tp1", event("b", 5000)), ("tp1", event("c", 5001))]

    assert await merge_and_write(ex, ctx, merge, batch, merge.on_line, protobuf=False, hold=1.0)  # type: ignore[arg-type]

    events = written(ex)
    assert [e["object"]["metadata"]["name"] for e in events] == ["a", "b", "c"]  # b held, then delivered; none lost
    assert [codec.decode(e["object"]["metadata"]["resourceVersion"])[0] for e in events] == [1100, 5000, 5001]
    assert ctx.rv.syncs >= 1 and not merge.finished
    assert len(ex.writer.writes) == 2  # what was ready before the hold went out first  # type: ignore[attr-defined]


async def test_a_table_that_never_catches_up_ends_the_watch_with_410_expired() -> None:
    ex, ctx, merge, _ = setup(publishes=False)

    await merge_and_write(ex, ctx, merge, [("tp1", event("a", 5000))], merge.on_line, protobuf=False, hold=0.3)  # type: ignore[arg-type]

    [error] = written(ex)
    assert error["type"] == "ERROR" and error["object"]["code"] == 410 and error["object"]["reason"] == "Expired"
    assert merge.finished


async def test_an_event_kube_apiserver_would_not_send_is_skipped_and_the_stream_goes_on() -> None:
    ex, ctx, merge, _ = setup(publishes=False)

    assert await merge_and_write(ex, ctx, merge, [("tp1", b"not json\n"), ("tp1", event("a", 1100))], merge.on_line,  # type: ignore[arg-type]
                                 protobuf=False)

    assert [e["object"]["metadata"]["name"] for e in written(ex)] == ["a"]


async def test_the_shutdown_marker_ends_the_stream_after_what_came_before_it() -> None:
    ex, ctx, merge, _ = setup(publishes=False)

    assert not await merge_and_write(ex, ctx, merge, [("tp1", event("a", 1100)), ("", b""), ("tp1", event("b", 1101))],  # type: ignore[arg-type]
                                     merge.on_line, protobuf=False)

    assert [e["object"]["metadata"]["name"] for e in written(ex)] == ["a"]
