"""Union lists and union watches (routing.merge): proxy resourceVersions (docs/resource-versions.md),
KEP-3157 (initial-events-end) and KEP-5504 (comparable RVs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing import protobuf as pb
from routing import rv as rvcodec
from routing.merge import INITIAL_EVENTS_END, PartitionList, WatchMerge, merge_lists, merge_protobuf_lists, native_rv

HYPOTHESIS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TPS = ("tp1", "tp2")


def codec_for(space: tuple[str, ...]) -> rvcodec.RVCodec:
    """A codec whose one epoch starts at 0: every native below 2**(104 / len(space)) fits."""
    table = rvcodec.EpochTable((rvcodec.Epoch(1, space, rvcodec.natural_slot_bits(len(space)), (0,) * len(space)),))
    return rvcodec.RVCodec(space, table)


CODEC = codec_for(TPS)
# Owner of a namespace in these tests: tp1 owns kube-system and a*-m* tenants, tp2 the rest.
OWNER = {"kube-system": "tp1", "default": "tp1", "bravo-web": "tp1", "nova-web": "tp2", "zulu-db": "tp2"}


def keep_owned(partition: str, obj: dict[str, Any]) -> bool:
    return OWNER.get(obj.get("metadata", {}).get("namespace", ""), "tp1") == partition


def decode(rv: str) -> tuple[int, ...]:
    return CODEC.decode(rv)


def pod(name: str, namespace: str, rv: int, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv), **extra},
            "spec": {"nodeName": "rp1-n1"}}


def pod_list(list_rv: int, *pods: dict[str, Any], continue_token: str = "") -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
    if continue_token:
        meta["continue"] = continue_token
        meta["remainingItemCount"] = 7
    return orjson.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": list(pods)})


def table(list_rv: int, *pods: dict[str, Any]) -> bytes:
    rows = [{"cells": [p["metadata"]["name"], "Running"],
             "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": p["metadata"]}}
            for p in pods]
    return orjson.dumps({"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                         "metadata": {"resourceVersion": str(list_rv), "continue": "tok"},
                         "columnDefinitions": [{"name": "Name", "type": "string"}, {"name": "Status", "type": "string"}],
                         "rows": rows})


# --- union list -------------------------------------------------------------------------------


def _two_partition_lists() -> list[PartitionList]:
    return [
        PartitionList("tp1", 0, pod_list(100, pod("a", "bravo-web", 90), pod("k", "kube-system", 91),
                                         continue_token="c1")),
        PartitionList("tp2", 1, pod_list(200, pod("b", "nova-web", 150), pod("k2", "kube-system", 151),
                                         pod("c", "zulu-db", 199))),
    ]


def test_union_list_concatenates_the_kept_items_of_every_partition() -> None:
    merged = orjson.loads(merge_lists(_two_partition_lists(), codec=CODEC, keep=keep_owned))

    assert merged["kind"] == "PodList"
    assert [i["metadata"]["name"] for i in merged["items"]] == ["a", "k", "b", "c"]


def test_union_list_rv_is_the_vector_of_every_partitions_list_rv() -> None:
    merged = orjson.loads(merge_lists(_two_partition_lists(), codec=CODEC, keep=keep_owned))

    assert decode(merged["metadata"]["resourceVersion"]) == (100, 200)


def test_union_list_item_rvs_name_only_their_owners_slot() -> None:
    merged = orjson.loads(merge_lists(_two_partition_lists(), codec=CODEC, keep=keep_owned))

    got = {i["metadata"]["name"]: decode(i["metadata"]["resourceVersion"]) for i in merged["items"]}
    assert got == {"a": (90, 0), "k": (91, 0), "b": (0, 150), "c": (0, 199)}


def test_union_list_drops_continue_and_remaining_item_count() -> None:
    merged = orjson.loads(merge_lists(_two_partition_lists(), codec=CODEC, keep=keep_owned))

    assert "continue" not in merged["metadata"]
    assert "remainingItemCount" not in merged["metadata"]


def test_union_list_owner_filter_drops_items_the_partition_does_not_own() -> None:
    # tp2 has its own kube-system; the union shows only the system partition's.
    merged = orjson.loads(merge_lists(_two_partition_lists(), codec=CODEC, keep=keep_owned))

    assert "k2" not in [i["metadata"]["name"] for i in merged["items"]]


def test_union_list_without_owner_filter_keeps_every_item() -> None:
    merged = orjson.loads(merge_lists(_two_partition_lists(), codec=CODEC, keep=None))

    assert [i["metadata"]["name"] for i in merged["items"]] == ["a", "k", "b", "k2", "c"]


def test_union_list_output_is_one_compact_json_document() -> None:
    body = merge_lists(_two_partition_lists(), codec=CODEC, keep=keep_owned)

    assert b"\n" not in body
    assert orjson.dumps(orjson.loads(body)) == body


def test_union_of_tables_merges_rows_and_rewrites_row_object_rvs() -> None:
    parts = [
        PartitionList("tp1", 0, table(100, pod("a", "bravo-web", 90), pod("x", "nova-web", 95))),
        PartitionList("tp2", 1, table(200, pod("b", "nova-web", 150))),
    ]

    merged = orjson.loads(merge_lists(parts, codec=CODEC, keep=keep_owned))

    assert merged["kind"] == "Table"
    assert merged["columnDefinitions"][0]["name"] == "Name"
    assert [r["cells"][0] for r in merged["rows"]] == ["a", "b"]
    assert decode(merged["metadata"]["resourceVersion"]) == (100, 200)
    assert "continue" not in merged["metadata"]
    got = [decode(r["object"]["metadata"]["resourceVersion"]) for r in merged["rows"]]
    assert got == [(90, 0), (0, 150)]


def test_union_list_of_empty_lists_still_has_the_vector_rv() -> None:
    parts = [PartitionList("tp1", 0, pod_list(7)), PartitionList("tp2", 1, pod_list(9))]

    merged = orjson.loads(merge_lists(parts, codec=CODEC, keep=keep_owned))

    assert merged["items"] == []
    assert decode(merged["metadata"]["resourceVersion"]) == (7, 9)


def test_union_list_does_not_rewrite_rv_text_inside_string_values() -> None:
    applied = orjson.dumps({"metadata": {"resourceVersion": "3"}}).decode()
    item = pod("a", "bravo-web", 90, annotations={"kubectl.kubernetes.io/last-applied-configuration": applied})
    parts = [PartitionList("tp1", 0, pod_list(100, item)), PartitionList("tp2", 1, pod_list(200))]

    merged = orjson.loads(merge_lists(parts, codec=CODEC, keep=keep_owned))

    annotations = merged["items"][0]["metadata"]["annotations"]
    assert annotations["kubectl.kubernetes.io/last-applied-configuration"] == applied


def test_union_list_rejects_a_body_that_is_not_a_list_object() -> None:
    with pytest.raises(ValueError):
        merge_lists([PartitionList("tp1", 0, b"[1,2]")], codec=CODEC, keep=None)
    with pytest.raises(ValueError):
        merge_lists([], codec=CODEC, keep=None)


# --- union watch ------------------------------------------------------------------------------


def event(kind: str, name: str, namespace: str, rv: int) -> bytes:
    obj = {"kind": "Pod", "apiVersion": "v1",
           "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv)}}
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


def bookmark(rv: int, *, end: bool = False) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if end:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    return orjson.dumps({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": meta}}) + b"\n"


def error(code: int, reason: str, message: str) -> bytes:
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": message, "reason": reason, "code": code}
    return orjson.dumps({"type": "ERROR", "object": status}) + b"\n"


def merge(*, initial: set[str] | None = None, client_initial_events: bool = False, bookmarks: bool = True,
          start: tuple[int, ...] = (0, 0), keep: Any = None, space: tuple[str, ...] = TPS) -> WatchMerge:
    return WatchMerge(codec=codec_for(space), start=start, initial=set(initial or ()),
                      client_initial_events=client_initial_events, bookmarks=bookmarks, keep=keep)


def assert_wire_lines(lines: list[bytes]) -> list[dict[str, Any]]:
    """Every line is one JSON document terminated by exactly one newline, no embedded newline."""
    docs = []
    for line in lines:
        assert line.endswith(b"\n")
        assert line.count(b"\n") == 1
        assert b"\r" not in line
        docs.append(orjson.loads(line))
    return docs


def rv_of(line: bytes) -> str:
    return str(orjson.loads(line)["object"]["metadata"]["resourceVersion"])


def test_watch_event_rv_is_the_vector_after_the_event_with_the_owner_slot_native() -> None:
    wm = merge()

    first = wm.on_line("tp2", event("ADDED", "b", "nova-web", 7))
    second = wm.on_line("tp1", event("MODIFIED", "a", "bravo-web", 40))

    assert len(first) == len(second) == 1
    assert decode(rv_of(first[0])) == (0, 7)
    assert decode(rv_of(second[0])) == (40, 7)
    assert_wire_lines(first + second)


def test_watch_event_keeps_everything_but_the_rv() -> None:
    wm = merge()

    [line] = wm.on_line("tp1", event("DELETED", "a", "bravo-web", 40))

    doc = orjson.loads(line)
    assert doc["type"] == "DELETED"
    assert doc["object"]["kind"] == "Pod"
    assert doc["object"]["metadata"]["name"] == "a"


def test_watch_resumed_from_a_proxy_rv_continues_above_it() -> None:
    start = (100, 200)
    wm = merge(start=start)

    [line] = wm.on_line("tp1", event("MODIFIED", "a", "bravo-web", 101))

    assert decode(rv_of(line)) == (101, 200)
    assert rvcodec.compare(rv_of(line), CODEC.encode(start)) == 1


@st.composite
def _partition_streams(draw: st.DrawFn) -> tuple[int, list[tuple[str, bytes, str, int]]]:
    """Per-partition upstream streams (RVs increasing as a partition sends them; a bookmark may
    repeat the last RV), interleaved at random."""
    n = draw(st.integers(1, 3))
    space = [f"tp{i + 1}" for i in range(n)]
    streams: list[list[tuple[str, bytes, str, int]]] = []
    for p in space:
        rv = draw(st.integers(0, 1000))
        stream = []
        for _ in range(draw(st.integers(0, 12))):
            kind = draw(st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]))
            if kind == "BOOKMARK":
                rv += draw(st.integers(0, 5))
                stream.append((p, bookmark(rv), kind, rv))
            else:
                rv += draw(st.integers(1, 10**6))
                stream.append((p, event(kind, f"o{rv}", "nova-web", rv), kind, rv))
        streams.append(stream)
    order = draw(st.permutations([i for i, s in enumerate(streams) for _ in s]))
    cursors = [0] * n
    merged = []
    for i in order:
        merged.append(streams[i][cursors[i]])
        cursors[i] += 1
    return n, merged


@HYPOTHESIS
@given(streams=_partition_streams(), bookmarks=st.booleans())
def test_union_watch_rvs_strictly_increase_over_any_interleaving(
    streams: tuple[int, list[tuple[str, bytes, str, int]]], bookmarks: bool
) -> None:
    n, lines = streams
    space = tuple(f"tp{i + 1}" for i in range(n))
    wm = merge(space=space, start=(0,) * n, bookmarks=bookmarks)
    latest = [0] * n
    written: list[str] = []
    for partition, line, kind, native in lines:
        slot = space.index(partition)
        latest[slot] = native
        out = wm.on_line(partition, line)
        assert_wire_lines(out)
        if kind != "BOOKMARK":
            assert len(out) == 1
            # The event RV is the vector after the event; its owner's slot is the native RV.
            assert codec_for(space).decode(rv_of(out[0])) == tuple(latest)
        elif out:
            assert bookmarks and all(latest)
            assert orjson.loads(out[0])["type"] == "BOOKMARK"
            assert codec_for(space).decode(rv_of(out[0])) == tuple(latest)
        written.extend(rv_of(line) for line in out)
    for before, after in zip(written, written[1:]):
        assert rvcodec.compare(after, before) == 1
        assert int(after) > int(before)


def test_bookmarks_are_written_only_when_the_client_asked() -> None:
    wm = merge(bookmarks=False)

    out = wm.on_line("tp1", bookmark(5)) + wm.on_line("tp2", bookmark(6)) + wm.on_line("tp1", bookmark(9))

    assert out == []


def test_bookmark_waits_until_every_slot_is_known() -> None:
    wm = merge(bookmarks=True)

    assert wm.on_line("tp1", bookmark(5)) == []
    [line] = wm.on_line("tp2", bookmark(6))

    doc = orjson.loads(line)
    assert doc["type"] == "BOOKMARK"
    assert doc["object"]["kind"] == "Pod" and doc["object"]["apiVersion"] == "v1"
    assert decode(doc["object"]["metadata"]["resourceVersion"]) == (5, 6)
    assert "annotations" not in doc["object"]["metadata"]


def test_bookmark_is_written_only_when_the_vector_advanced() -> None:
    wm = merge(bookmarks=True, start=(5, 6))

    assert len(wm.on_line("tp1", bookmark(7))) == 1
    assert wm.on_line("tp1", bookmark(7)) == []  # same position
    assert wm.on_line("tp2", bookmark(3)) == []  # behind: the vector never goes back
    [event_line] = wm.on_line("tp2", event("ADDED", "b", "nova-web", 8))
    assert wm.on_line("tp2", bookmark(8)) == []  # the event already carried (7, 8)
    [line] = wm.on_line("tp2", bookmark(9))
    assert decode(rv_of(line)) == (7, 9)
    assert rvcodec.compare(rv_of(line), rv_of(event_line)) == 1


def _initial_events_run(client_initial_events: bool, bookmarks: bool = True) -> list[bytes]:
    wm = merge(initial={"tp1", "tp2"}, client_initial_events=client_initial_events, bookmarks=bookmarks)
    out: list[bytes] = []
    out += wm.on_line("tp1", event("ADDED", "a", "bravo-web", 10))
    out += wm.on_line("tp2", event("ADDED", "b", "nova-web", 20))
    out += wm.on_line("tp1", bookmark(12, end=True))
    out += wm.on_line("tp1", bookmark(13))  # a plain bookmark before the union's initial events end
    out += wm.on_line("tp2", event("ADDED", "c", "nova-web", 21))
    out += wm.on_line("tp2", bookmark(22, end=True))
    out += wm.on_line("tp1", event("MODIFIED", "a", "bravo-web", 30))
    out += wm.on_line("tp1", bookmark(31, end=True))  # a repeated end bookmark is only a bookmark
    return out


def _is_end_bookmark(doc: dict[str, Any]) -> bool:
    annotations = doc["object"]["metadata"].get("annotations") or {}
    return doc["type"] == "BOOKMARK" and annotations.get(INITIAL_EVENTS_END) == "true"


def test_exactly_one_initial_events_end_bookmark_after_every_partition_finished() -> None:
    docs = assert_wire_lines(_initial_events_run(client_initial_events=True))

    types = [d["type"] for d in docs]
    assert types == ["ADDED", "ADDED", "ADDED", "BOOKMARK", "MODIFIED", "BOOKMARK"]
    ends = [i for i, d in enumerate(docs) if _is_end_bookmark(d)]
    assert ends == [3]  # after tp2's end bookmark, the last partition to finish
    assert decode(docs[3]["object"]["metadata"]["resourceVersion"]) == (13, 22)
    assert not _is_end_bookmark(docs[5])


def test_no_initial_events_end_bookmark_when_the_client_did_not_allow_bookmarks() -> None:
    """The apiserver cacher sends it only to a client that asked allowWatchBookmarks=true
    (cacher.go setInitialEventsEndBookmarkIfRequested)."""
    docs = assert_wire_lines(_initial_events_run(client_initial_events=True, bookmarks=False))

    assert [d["type"] for d in docs] == ["ADDED", "ADDED", "ADDED", "MODIFIED"]


def test_partition_initial_events_end_bookmarks_are_swallowed() -> None:
    wm = merge(initial={"tp1", "tp2"}, client_initial_events=True, bookmarks=True)

    assert wm.on_line("tp2", bookmark(5, end=True)) == []
    assert len(wm.on_line("tp1", bookmark(6, end=True))) == 1


def test_no_initial_events_end_bookmark_when_the_client_did_not_ask_for_initial_events() -> None:
    docs = assert_wire_lines(_initial_events_run(client_initial_events=False))

    assert not any(_is_end_bookmark(d) for d in docs)
    assert [d["type"] for d in docs if d["type"] != "BOOKMARK"] == ["ADDED", "ADDED", "ADDED", "MODIFIED"]


def test_upstream_410_becomes_one_complete_expired_status_and_ends_the_union_watch() -> None:
    wm = merge()
    wm.on_line("tp1", event("ADDED", "a", "bravo-web", 10))

    out = wm.on_line("tp2", error(410, "Expired", "too old resource version: 5 (9)"))

    [doc] = assert_wire_lines(out)
    assert doc["type"] == "ERROR"
    status = doc["object"]
    assert status["kind"] == "Status"
    assert status["apiVersion"] == "v1"
    assert status["status"] == "Failure"
    assert status["reason"] == "Expired"
    assert status["code"] == 410
    assert isinstance(status["message"], str) and status["message"]
    assert "metadata" in status
    assert wm.finished
    assert wm.on_line("tp1", event("MODIFIED", "a", "bravo-web", 11)) == []
    assert wm.on_line("tp1", bookmark(12)) == []


def test_upstream_410_with_legacy_gone_reason_is_reported_as_expired() -> None:
    wm = merge()

    [line] = wm.on_line("tp1", error(410, "Gone", "gone"))

    assert orjson.loads(line)["object"]["reason"] == "Expired"


def test_other_upstream_errors_are_passed_on_and_end_the_union_watch() -> None:
    wm = merge()

    [doc] = assert_wire_lines(wm.on_line("tp1", error(500, "InternalError", "etcd is sad")))

    assert doc["object"]["code"] == 500 and doc["object"]["reason"] == "InternalError"
    assert wm.finished
    assert wm.on_line("tp2", event("ADDED", "b", "nova-web", 1)) == []


def test_union_watch_owner_filter_drops_events_the_partition_does_not_own() -> None:
    wm = merge(keep=keep_owned)

    assert wm.on_line("tp2", event("ADDED", "k2", "kube-system", 50)) == []
    [kept] = wm.on_line("tp2", event("ADDED", "b", "nova-web", 51))
    [system] = wm.on_line("tp1", event("ADDED", "k", "kube-system", 5))

    assert decode(rv_of(kept)) == (0, 51)
    assert decode(rv_of(system)) == (5, 51)


def test_union_watch_of_tables_stamps_the_row_object() -> None:
    wm = merge()
    row_obj = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
               "metadata": {"name": "a", "namespace": "bravo-web", "resourceVersion": "44"}}
    line = orjson.dumps({"type": "ADDED", "object": {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                                                     "metadata": {"resourceVersion": "44"},
                                                     "rows": [{"cells": ["a"], "object": row_obj}]}}) + b"\n"

    [out] = wm.on_line("tp1", line)

    doc = orjson.loads(out)
    assert decode(doc["object"]["rows"][0]["object"]["metadata"]["resourceVersion"]) == (44, 0)
    assert native_rv(orjson.loads(line)["object"]) == 44


def test_upstream_line_without_trailing_newline_gets_exactly_one() -> None:
    wm = merge()

    out = wm.on_line("tp1", event("ADDED", "a", "bravo-web", 1).rstrip(b"\n"))

    assert_wire_lines(out)


# --- any formatting, references, initial events, the epoch table ------------------------------


def test_union_list_of_indented_answers_is_merged_like_compact_ones() -> None:
    # kube-apiserver indents its JSON for ?pretty=true and curl-like user agents.
    pretty = [PartitionList(p.partition, p.slot, orjson.dumps(orjson.loads(p.body), option=orjson.OPT_INDENT_2))
              for p in _two_partition_lists()]

    assert merge_lists(pretty, codec=CODEC, keep=keep_owned) == merge_lists(_two_partition_lists(), codec=CODEC, keep=keep_owned)


def test_union_list_items_carry_object_form_rvs_of_their_partition() -> None:
    merged = orjson.loads(merge_lists(_two_partition_lists(), codec=CODEC, keep=keep_owned))

    rvs = {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in merged["items"]}
    assert rvs["a"] == rvcodec.object_rv("tp1", 90)
    assert rvs["b"] == rvcodec.object_rv("tp2", 150)
    assert all(rvcodec.is_valid_rv(rv) and int(rv) >= rvcodec.NATIVE_LIMIT for rv in rvs.values())


def test_an_events_involved_object_rv_is_translated_from_its_partition_not_stamped() -> None:
    wm = merge(start=(100, 200))
    obj = {"kind": "Event", "apiVersion": "v1",
           "metadata": {"name": "e", "namespace": "nova-web", "resourceVersion": "210"},
           "involvedObject": {"kind": "Pod", "name": "b", "namespace": "nova-web", "resourceVersion": "205"},
           "related": {"kind": "Node", "name": "rp1-n1", "resourceVersion": rvcodec.object_rv("rp1", 7)}}
    line = orjson.dumps({"type": "ADDED", "object": obj}, option=orjson.OPT_INDENT_2).replace(b"\n", b" ") + b"\n"

    [out] = wm.on_line("tp2", line)

    doc = orjson.loads(out)["object"]
    assert decode(doc["metadata"]["resourceVersion"]) == (100, 210)
    assert doc["involvedObject"]["resourceVersion"] == rvcodec.object_rv("tp2", 205)
    assert doc["related"]["resourceVersion"] == rvcodec.object_rv("rp1", 7)  # a proxy RV the client wrote: kept


def test_initial_events_carry_the_objects_own_rv_and_never_move_the_vector() -> None:
    wm = merge(initial={"tp1", "tp2"}, client_initial_events=True)

    [added] = wm.on_line("tp1", event("ADDED", "a", "bravo-web", 3))
    assert rv_of(added) == rvcodec.object_rv("tp1", 3)
    assert wm.vector == [0, 0]


def test_a_vector_no_epoch_fits_holds_the_event_until_the_table_catches_up() -> None:
    space = ("tp1", "tp2")
    first = rvcodec.Epoch(1, space, 8, (1000, 1000))  # natives 1000..1254
    codec = rvcodec.RVCodec(space, rvcodec.EpochTable((first,)))
    wm = WatchMerge(codec=codec, start=(1000, 1000), initial=set(), client_initial_events=False, bookmarks=True)
    assert wm.on_line("tp1", event("MODIFIED", "a", "bravo-web", 1100))
    late = event("MODIFIED", "a", "bravo-web", 5000)

    with pytest.raises(rvcodec.RVUnencodable):
        wm.on_line("tp1", late)
    assert wm.vector == [1100, 1000] and not wm.finished  # nothing changed: the event can be offered again
    assert wm.on_line("tp2", bookmark(1300)) == []  # an unencodable bookmark is skipped, not fatal

    codec.set_table(rvcodec.EpochTable((first, rvcodec.Epoch(2, space, 8, (4900, 1200)))))
    [line] = wm.on_line("tp1", late)
    doc = orjson.loads(line)
    assert doc["type"] == "MODIFIED" and codec.decode(doc["object"]["metadata"]["resourceVersion"]) == (5000, 1300)


def test_expire_ends_the_watch_with_410_expired_in_its_encoding() -> None:
    wm = merge()

    [line] = wm.expire("no epoch fits", protobuf=False)
    doc = orjson.loads(line)
    assert doc["type"] == "ERROR" and doc["object"]["code"] == 410 and doc["object"]["reason"] == "Expired"
    assert wm.finished and wm.on_line("tp1", event("MODIFIED", "a", "bravo-web", 11)) == []

    [frame] = merge().expire("no epoch fits", protobuf=True)
    status = pb.status_fields(pb.decode_watch_event(frame[4:]).object)
    assert (status.code, status.reason) == (410, "Expired")


# --- protobuf (real bytes from kube-apiserver v1.36.3: tests/routing/testdata/protobuf) --------

PB = Path(__file__).parent / "testdata" / "protobuf"


def test_union_of_protobuf_lists_copies_items_and_names_every_partition_in_the_list_rv() -> None:
    body = (PB / "podlist.pb").read_bytes()
    list_rv = int(pb.list_meta_rv(pb.list_items(body)[1]))

    merged = merge_protobuf_lists([PartitionList("tp1", 0, body), PartitionList("tp2", 1, body)], codec=CODEC, keep=None)

    env, meta, items = pb.list_items(merged)
    assert env.kind == "PodList"
    assert decode(pb.list_meta_rv(meta)) == (list_rv, list_rv)
    assert len(items) == 6
    natives = [int(pb.item_meta(i).resource_version) for i in pb.list_items(body)[2]]
    assert [pb.item_meta(i).resource_version for i in items] == [
        *(rvcodec.object_rv("tp1", n) for n in natives), *(rvcodec.object_rv("tp2", n) for n in natives)
    ]


def test_union_watch_in_protobuf_stamps_events_and_merges_the_initial_events_end_bookmark() -> None:
    frames = pb.FrameReader().feed((PB / "watch-pods.bin").read_bytes())
    wm = merge(initial={"tp1", "tp2"}, client_initial_events=True, bookmarks=True)
    out: list[pb.WatchEvent] = []
    for partition in ("tp1", "tp2"):  # both partitions send the same stream, tp1 first
        for frame in frames:
            for written in wm.on_frame(partition, frame):
                [payload] = pb.FrameReader().feed(written)
                out.append(pb.decode_watch_event(payload))

    ends = [e for e in out if e.type == "BOOKMARK" and pb.object_annotations(e.object).get(INITIAL_EVENTS_END) == "true"]
    assert len(ends) == 1 and decode(pb.object_rv(ends[0].object)) == (220, 212)
    first = out[0]
    assert first.type == "ADDED" and pb.object_rv(first.object) == rvcodec.object_rv("tp1", 205)
    stamped = [decode(pb.object_rv(e.object)) for e in out if e.type in ("MODIFIED", "DELETED")]
    assert stamped[0] == (213, 0) and stamped[-1] == (220, 220)
    rvs = [pb.object_rv(e.object) for e in out if e.type in ("MODIFIED", "DELETED", "BOOKMARK") and pb.object_rv(e.object) != ""]
    tail = rvs[rvs.index(pb.object_rv(ends[0].object)):]
    assert all(rvcodec.compare(b, a) == 1 for a, b in zip(tail, tail[1:]))


# --- a retired partition's objects leave a union watch as DELETED events --------------------------


def test_a_list_becomes_deleted_events_one_past_the_position_and_merges_like_upstream_events() -> None:
    from routing.merge import deleted_events

    body = orjson.dumps({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "90"},
                         "items": [{"metadata": {"name": "n1", "resourceVersion": "40"}}, {"metadata": {"name": "n2", "resourceVersion": "80"}}]})
    lines, token = deleted_events(body, 91, protobuf=False)
    assert token == ""
    events = [orjson.loads(line) for line in lines]
    assert [(e["type"], e["object"]["kind"], e["object"]["apiVersion"], e["object"]["metadata"]) for e in events] == [
        ("DELETED", "Node", "v1", {"name": "n1", "resourceVersion": "91"}), ("DELETED", "Node", "v1", {"name": "n2", "resourceVersion": "91"})]

    wm = merge(initial=set(), client_initial_events=False, bookmarks=True)
    wm.vector[:] = [90, 7]
    stamped = [orjson.loads(line) for e in deleted_events(body, 91, protobuf=False)[0] for line in wm.on_line("tp1", e)]
    assert [decode(e["object"]["metadata"]["resourceVersion"]) for e in stamped] == [(91, 7), (91, 7)]

    paged = orjson.dumps({"kind": "NodeList", "apiVersion": "v1", "metadata": {"continue": "next-page"}, "items": []})
    assert deleted_events(paged, 91, protobuf=False) == ([], "next-page")
    with pytest.raises(ValueError):
        deleted_events(orjson.dumps({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "rows": []}), 91, protobuf=False)


def test_a_protobuf_list_becomes_deleted_event_frames_of_its_items() -> None:
    from routing.merge import deleted_events

    body = (PB / "podlist.pb").read_bytes()
    _, meta, items = pb.list_items(body)
    frames, token = deleted_events(body, 500, protobuf=True)
    assert token == ""
    events = [pb.decode_watch_event(f) for f in frames]
    assert [e.type for e in events] == ["DELETED"] * len(items)
    assert [(pb.decode_envelope(e.object).api_version, pb.decode_envelope(e.object).kind) for e in events] == [("v1", "Pod")] * len(items)
    assert [pb.object_rv(e.object) for e in events] == ["500"] * len(items)
    assert [pb.object_item_meta(e.object).name for e in events] == [pb.item_meta(i).name for i in items]
    assert pb.list_meta_continue(meta) == ""
    assert pb.list_meta_continue(pb.list_items((PB / "podlist-limit2.pb").read_bytes())[1]) != ""
    assert deleted_events((PB / "podlist-limit2.pb").read_bytes(), 500, protobuf=True)[1] != ""
