"""The soak's fault schedule (bench/soak_schedule.py): every kind once per cycle, targets rotating,
no overlap, nothing planned past the tail, a joined partition retired in its own cycle and never
reused."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bench import soak_schedule as s


def test_an_hour_repeats_the_cycle_and_kills_every_partitions_apiserver() -> None:
    gap = s.gap_for(3600, warmup_s=120, tail_s=45)
    faults = s.plan(3600, warmup_s=120, tail_s=45, gap_s=gap, joining=("rp3", "rp4", "rp5", "rp6"))
    kinds = {f.kind for f in faults}
    assert kinds == set(s.CYCLE)
    assert max(f.cycle for f in faults) >= 2  # the cycle repeats in an hour
    kills = [f.target for f in faults if f.kind == s.APISERVER_KILL]
    assert set(kills[:4]) == {"tp1", "tp2", "rp1", "rp2"}
    assert {f.target for f in faults if f.kind == s.ETCD_RESTART} <= {"tp1", "tp2", "rp1", "rp2"}
    assert all(f.target == "B" for f in faults if f.kind in (s.WORKER_KILL, s.ROLLING_RESTART))


def test_ten_minutes_hold_one_cycle_of_every_kind() -> None:
    gap = s.gap_for(600, warmup_s=50, tail_s=45)
    faults = s.plan(600, warmup_s=50, tail_s=45, gap_s=gap)
    assert {f.kind for f in faults} == set(s.CYCLE), [f.name for f in faults]
    assert 20.0 <= gap < 30.0  # ten minutes are tight


def test_a_joined_partition_retires_in_its_cycle_and_names_are_never_reused() -> None:
    faults = s.plan(7200, warmup_s=60, tail_s=45, gap_s=60, joining=("rp3", "rp4"))
    joins = [f for f in faults if f.kind == s.JOIN]
    retires = [f for f in faults if f.kind == s.RETIRE]
    assert [f.target for f in joins] == ["rp3", "rp4"]
    assert [f.target for f in retires] == ["rp3", "rp4"]
    for j, r in zip(joins, retires):
        assert j.cycle == r.cycle and j.at_s < r.at_s
    assert not [f for f in faults if f.kind in (s.JOIN, s.RETIRE) and f.cycle >= 2]


def test_restricting_kinds_and_no_partitions_to_join() -> None:
    faults = s.plan(600, warmup_s=30, tail_s=45, gap_s=20, joining=(), kinds=[s.APISERVER_KILL, s.RETIRE])
    assert faults and all(f.kind == s.APISERVER_KILL for f in faults)


@settings(max_examples=100, deadline=None)
@given(duration=st.floats(120, 7200), warmup=st.floats(10, 120), tail=st.floats(10, 90), gap=st.floats(5, 120))
def test_faults_never_overlap_and_heal_before_the_tail(duration: float, warmup: float, tail: float, gap: float) -> None:
    faults = s.plan(duration, warmup_s=warmup, tail_s=tail, gap_s=gap, joining=("rp3",))
    for before, after in zip(faults, faults[1:]):
        assert after.at_s >= before.at_s + s.NOMINAL_S[before.kind] + gap - 0.2
    for f in faults:
        assert f.at_s >= warmup - 0.1
        assert f.at_s + s.NOMINAL_S[f.kind] <= duration - tail + 0.1


def test_affected_partitions() -> None:
    assert s.affected_partitions(s.APISERVER_KILL, "tp2", ["tp1", "tp2"]) == ("tp2",)
    assert s.affected_partitions(s.ROLLING_RESTART, "B", ["tp1", "rp1"]) == ("tp1", "rp1")
    assert s.affected_partitions(s.EPOCH_BURST, "tp2", ["tp1", "tp2"]) == ()
