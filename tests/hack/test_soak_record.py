"""The pure helpers of the soak's recorders (bench/soak_record.py): decoding the proxy RVs a
recorder wrote with every epoch ever seen, turning recorders into checker logs, reading /metrics
samples. No federation: RVs are made with routing.rv as the proxy makes them."""

from __future__ import annotations

from typing import Any

from bench.soak_checks import LISTED
from bench.soak_record import Clock, Decoder, RawSegment, Recorder, metrics_sample, native_log, parse_time, proxy_log
from routing import rv as rvcodec

SPACE = ("rp1", "rp2")
OLD = rvcodec.Epoch(1, SPACE, 13, (100, 200))
NEW = rvcodec.Epoch(2, SPACE, 13, (2148, 200))  # rp1 moved on by half a field


def recorder(segments: list[RawSegment]) -> Recorder:
    rec = Recorder(name="nodes@A", base="", path="", http=None, clock=Clock(), errors=None,  # type: ignore[arg-type]
                   owner=lambda ns, n: n.split("-", 1)[0], list_rv="0")
    rec.segments = segments
    return rec


def test_vector_and_object_form_rvs_decode_with_every_epoch_seen_even_one_the_table_dropped() -> None:
    table_then = rvcodec.EpochTable((OLD,))
    old_rv = table_then.encode(SPACE, (150, 250))
    new_rv = rvcodec.EpochTable((OLD, NEW)).encode(SPACE, (4000, 260))
    decoder = Decoder({1: OLD, 2: NEW}, ["tp1", "rp1", "rp2"])
    assert decoder.vector(old_rv) == {"rp1": 150, "rp2": 250}
    assert decoder.vector(new_rv) == {"rp1": 4000, "rp2": 260}
    codec = rvcodec.RVCodec(SPACE, table_then)
    assert decoder.vector(codec.object_rv(1, 77)) == {"rp2": 77}
    assert Decoder({2: NEW}, SPACE).vector(old_rv) == {}  # an epoch never archived: counted, not guessed
    assert decoder.undecodable == 0


def test_a_recorder_through_the_proxy_becomes_a_log_of_native_rvs_per_owner() -> None:
    table = rvcodec.EpochTable((OLD,))
    codec = rvcodec.RVCodec(SPACE, table)
    seg = RawSegment(start_rv=table.encode(SPACE, (150, 250)), end_rv=table.encode(SPACE, (160, 250)), t_start=1.0)
    seg.listed = [(1.0, LISTED, ("", "rp1-n1", "u1"), "rp1", codec.object_rv(0, 140), "", False)]
    seg.events = [(2.0, "MODIFIED", ("", "rp1-n1", "u1"), "rp1", table.encode(SPACE, (155, 250)), "", False),
                  (3.0, "MODIFIED", ("", "rp2-n2", "u2"), "rp2", table.encode(SPACE, (155, 251)), "", False)]
    log = proxy_log(recorder([seg]), Decoder({1: OLD}, SPACE))
    (out,) = log.segments
    assert out.start == {"rp1": 150, "rp2": 250} and out.end == {"rp1": 160, "rp2": 250}
    assert [(e.key[1], e.partition, e.rv) for e in out.listed] == [("rp1-n1", "rp1", 140)]
    assert [(e.key[1], e.partition, e.rv) for e in out.events] == [("rp1-n1", "rp1", 155), ("rp2-n2", "rp2", 251)]


def test_a_recorder_straight_on_a_partition_keeps_its_native_rvs() -> None:
    seg = RawSegment(start_rv="10", end_rv="12", t_start=0.0)
    seg.events = [(1.0, "ADDED", ("ns", "p", "u"), "tp1", "11", "Pending", False)]
    (out,) = native_log(recorder([seg]), "tp1").segments
    assert (out.start, out.end, out.events[0].rv, out.events[0].phase) == ({"tp1": 10}, {"tp1": 12}, 11, "Pending")


def test_metrics_sample_reads_in_flight_5xx_relists_and_tasks() -> None:
    text = """\
# HELP partition_proxy_inflight_requests Requests being served now.
partition_proxy_inflight_requests{kind="long-running"} 664.0
partition_proxy_inflight_requests{kind="other"} 2.0
partition_proxy_requests_total{code="200",partition="tp1",route="forward",verb="get"} 10.0
partition_proxy_requests_total{code="503",partition="tp2",route="forward",verb="patch"} 3.0
partition_proxy_watch_cache_relists{cache="nodes",partition="rp1"} 2.0
partition_proxy_watch_cache_relists{cache="node-leases",partition="rp1"} 1.0
partition_proxy_asyncio_tasks 190.0
process_open_fds 512.0
partition_proxy_partition_connections{partition="rp1",state="idle"} 40.0
partition_proxy_partition_connections{partition="rp1",state="busy"} 9.0
partition_proxy_partition_connections{partition="tp1",state="idle"} 3.0
"""
    m = metrics_sample(5.0, "A", text)
    assert (m.inflight_long_running, m.inflight_other, m.server_errors, m.requests, m.relists, m.tasks, m.open_fds,
            m.idle_partition_connections) == (664.0, 2.0, 3.0, 13.0, 3.0, 190.0, 512.0, 43.0)
    assert metrics_sample(5.0, "A", "process_open_fds 1.0\n").tasks is None


def test_parse_time_reads_kubernetes_micro_time() -> None:
    assert parse_time("2026-11-26T05:00:00.500000Z") == parse_time("2026-11-26T05:00:00Z") + 0.5


def test_the_open_files_judged_leave_out_the_idle_pool_but_not_a_leak() -> None:
    from types import SimpleNamespace

    from bench.soak import fds_less_idle_pool
    from bench.soak_checks import check_growth

    def sample(t: float, fds: float, idle: float) -> Any:
        return SimpleNamespace(t=t, replica="A", open_fds=fds, idle_partition_connections=idle)

    procs = [SimpleNamespace(t=float(t)) for t in range(0, 901, 5)]
    def idle(t: float) -> float:  # after each fault on an RP the kubelets renew in phase: the pool steps up
        return 10 + sum(step for at, step in ((350, 20), (460, 15), (800, 20)) if t > at)

    pool = [sample(t, 490 + idle(t), idle(t)) for t in range(0, 901, 5)]
    leak = [sample(t, 500 + t / 10, 10) for t in range(0, 901, 5)]  # 1 fd every 10 s, the pool flat
    others = [SimpleNamespace(t=5.0, replica="B", open_fds=9999.0, idle_partition_connections=0.0)]
    assert check_growth([(s.t, s.open_fds) for s in pool], warmup_s=150, limit=0.05, robust=True).passed is False
    assert check_growth(fds_less_idle_pool([*pool, *others], procs), warmup_s=150, limit=0.05, robust=True).passed
    assert not check_growth(fds_less_idle_pool(leak, procs), warmup_s=150, limit=0.05, robust=True).passed
    assert fds_less_idle_pool(pool, procs[:10])[-1][0] == 45.0  # only while the longest-lived process ran


def test_the_heap_of_a_replica_reads_its_allocator_and_sums_up_the_judged_span() -> None:
    from bench.soak import heap_summary
    from bench.soak_record import HeapSample, heap_sample

    def doc(rss: int, in_use: int, free: int) -> dict[str, Any]:
        return {"rss_bytes": rss * 2**20, "tracing": False, "partition_connections": {"open": 40, "objects": 40 + rss // 10},
                "malloc": {"heap_bytes": (in_use + free) * 2**20, "in_use_bytes": in_use * 2**20, "free_bytes": free * 2**20,
                           "mmapped_bytes": 50 * 2**20}}

    assert heap_sample(1.0, "A", {"rss_bytes": 1, "malloc": None, "tracing": False}) is None  # off glibc
    samples = [heap_sample(float(t), "A", doc(200 + t // 60, 80 + (t // 120), 5 + (t // 600))) for t in range(0, 3601, 60)]
    assert all(s is not None for s in samples)
    summary = heap_summary([s for s in samples if s is not None], since=600.0, until=3000.0)
    assert summary["samples"] == 41
    assert summary["first"] == {"t_s": 600.0, "rss": 210.0, "in_use": 85.0, "free": 6.0, "mmapped": 50.0}
    assert summary["change_mib"] == {"rss": 40.0, "in_use": 20.0, "free": 4.0, "mmapped": 0.0}
    assert summary["partition_connections"] == {"first": [40, 61], "last": [40, 65]}
    assert heap_sample(1.0, "A", {"rss_bytes": 1, "malloc": doc(1, 1, 1)["malloc"]}) == HeapSample(1.0, "A", 1, 2**20, 2**20, 50 * 2**20)
    assert "error" in heap_summary([s for s in samples if s is not None], since=3590.0, until=3600.0)
