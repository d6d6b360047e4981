"""The soak's checkers (bench/soak_checks.py), each with a passing and a failing input: what a
watcher through the proxy saw against a partition's own history, pods stuck, Leases expired,
5xx outside a fault window, growth after the warm-up, and the per-fault figures. Histories are
written by hand in the shapes the recorders produce (native RVs, one key per object uid)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.soak_checks import (
    DELETED,
    LISTED,
    ClientError,
    Event,
    LeaseSample,
    Segment,
    WatcherLog,
    Window,
    attribute_errors,
    attribute_increments,
    class_increments,
    check_growth,
    check_history,
    check_leases,
    check_pods,
    cumulative,
    fault_report,
    increments,
    least_squares,
    theil_sen,
)

P = "tp1"
A: tuple[str, str, str] = ("ns", "a", "uid-a")
B: tuple[str, str, str] = ("ns", "b", "uid-b")


def ev(typ: str, key: tuple[str, str, str], rv: int, t: float = 0.0, partition: str = P, **kw: object) -> Event:
    return Event(t, typ, key, partition, rv, **kw)  # type: ignore[arg-type]


def truth_log() -> dict[str, WatcherLog]:
    """A partition that listed a at rv 10, then: b added at 11, a modified at 12, b modified
    at 13, a deleted at 14; its watcher reached 20."""
    seg = Segment(start={P: 10}, end={P: 20}, listed=[ev(LISTED, A, 10)],
                  events=[ev("ADDED", B, 11, 1), ev("MODIFIED", A, 12, 2), ev("MODIFIED", B, 13, 3), ev(DELETED, A, 14, 4)])
    return {P: WatcherLog("truth", [seg])}


def observed(events: list[Event], *, start: int = 10, end: int = 20, listed: list[Event] | None = None) -> WatcherLog:
    return WatcherLog("pods@A", [Segment(start={P: start}, end={P: end}, listed=listed if listed is not None else [ev(LISTED, A, 10)],
                                         events=events)])


EVERYTHING = [ev("ADDED", B, 11), ev("MODIFIED", A, 12), ev("MODIFIED", B, 13), ev(DELETED, A, 14)]


def test_a_watcher_that_saw_every_change_passes() -> None:
    result = check_history(truth_log(), observed(list(EVERYTHING)), targets={P: 14})
    assert result.passed, result
    assert (result.events_required, result.events_seen, result.lost) == (4, 4, 0)


def test_a_change_missing_inside_a_continuous_stream_is_lost() -> None:
    result = check_history(truth_log(), observed([EVERYTHING[0], EVERYTHING[2], EVERYTHING[3]]))
    assert not result.passed
    assert result.lost == 1 and "rv 12" in result.samples["lost"][0]


def test_the_same_event_twice_is_duplicated() -> None:
    result = check_history(truth_log(), observed([*EVERYTHING[:2], EVERYTHING[1], *EVERYTHING[2:]]))
    assert not result.passed and result.duplicated == 1


def test_an_older_state_after_a_newer_one_is_reordered() -> None:
    result = check_history(truth_log(), observed([EVERYTHING[0], EVERYTHING[2], ev("MODIFIED", B, 11), EVERYTHING[1], EVERYTHING[3]]))
    assert not result.passed and result.reordered == 1


def test_an_event_at_an_rv_the_object_never_had_is_unknown() -> None:
    result = check_history(truth_log(), observed([*EVERYTHING, ev("MODIFIED", B, 15)]))
    assert not result.passed and result.unknown == 1


def test_a_relist_after_410_may_collapse_changes_into_the_listed_state() -> None:
    """The first stream stops at 11; the relist at 13 lists b at 13 (a at 12 is collapsed
    into the list too): legal, a new segment."""
    log = WatcherLog("pods@A", [
        Segment(start={P: 10}, end={P: 11}, listed=[ev(LISTED, A, 10)], events=[EVERYTHING[0]]),
        Segment(start={P: 13}, end={P: 20}, listed=[ev(LISTED, A, 12), ev(LISTED, B, 13)], events=[EVERYTHING[3]]),
    ])
    result = check_history(truth_log(), log, targets={P: 14})
    assert result.passed, result
    assert result.relists == 1 and result.lost == 0


def test_a_relist_that_misses_an_object_the_partition_held_is_a_loss() -> None:
    log = WatcherLog("pods@A", [
        Segment(start={P: 10}, end={P: 11}, listed=[ev(LISTED, A, 10)], events=[EVERYTHING[0]]),
        Segment(start={P: 13}, end={P: 20}, listed=[ev(LISTED, B, 13)], events=[EVERYTHING[3]]),
    ])
    result = check_history(truth_log(), log)
    assert not result.passed and result.lost == 1 and "not listed" in result.samples["lost"][0]


def test_a_last_state_that_differs_from_the_partition_fails() -> None:
    """The stream claims it reached 20 but never got a's deletion: lost, and a still there at
    the end."""
    result = check_history(truth_log(), observed(list(EVERYTHING[:3])))
    assert not result.passed
    assert result.lost == 1 and result.final_mismatch == 1


def test_a_watcher_that_never_reached_the_partitions_position_is_stalled() -> None:
    result = check_history(truth_log(), observed(list(EVERYTHING[:2]), end=12), targets={P: 14})
    assert not result.passed and result.stalled == (P,)
    assert result.lost == 0  # nothing was required past where it got


def test_changes_in_a_gap_of_the_partitions_own_history_are_unverified_not_unknown() -> None:
    """The partition's watcher relisted from 12 to 16 (its apiserver restarted): a state at
    15 the proxy delivered cannot be checked."""
    truth = {P: WatcherLog("truth", [
        Segment(start={P: 10}, end={P: 12}, listed=[ev(LISTED, A, 10)], events=[ev("MODIFIED", A, 12)]),
        Segment(start={P: 16}, end={P: 20}, listed=[ev(LISTED, A, 15)], events=[]),
    ])}
    result = check_history(truth, observed([ev("MODIFIED", A, 12), ev("MODIFIED", A, 14), ev("MODIFIED", A, 15)]))
    assert result.passed, result
    assert result.unverified == 1  # 14: in the gap, not listed afterwards


def test_a_deletion_stamped_with_a_resyncs_list_rv_is_its_deletion() -> None:
    result = check_history(truth_log(), observed([*EVERYTHING[:3], ev(DELETED, A, 18)]))
    assert result.passed, result


def test_a_change_collapsed_by_a_cache_relist_in_a_fault_window_is_collapsed_not_lost() -> None:
    """rv 12 (a change of a at t=2) missing, a later state of a (its deletion) seen."""
    events = [EVERYTHING[0], EVERYTHING[2], EVERYTHING[3]]
    assert check_history(truth_log(), observed(events), resync_windows=[(P, 1.5, 3.0)]).passed
    assert not check_history(truth_log(), observed(events), resync_windows=[(P, 5.0, 9.0)]).passed
    assert not check_history(truth_log(), observed(events), resync_windows=[("tp2", 1.5, 3.0)]).passed


def test_a_joined_partition_is_required_from_its_floor_and_a_retired_ones_objects_leave() -> None:
    rp3 = "rp3"
    n1, n2 = ("", "rp3-n1", "u1"), ("", "rp3-n2", "u2")
    truth = {rp3: WatcherLog("truth", [Segment(start={rp3: 5}, end={rp3: 30}, listed=[ev(LISTED, n1, 5, partition=rp3)],
                                               events=[ev("ADDED", n2, 7, partition=rp3), ev("MODIFIED", n1, 21, partition=rp3),
                                                       ev("MODIFIED", n2, 22, partition=rp3)])])}
    seen = [ev("ADDED", n1, 5, partition=rp3), ev("ADDED", n2, 7, partition=rp3), ev("MODIFIED", n1, 21, partition=rp3),
            ev("MODIFIED", n2, 22, partition=rp3)]
    joined = WatcherLog("nodes@A", [Segment(start={}, end={rp3: 30}, listed=[], events=list(seen))])
    assert check_history(truth, joined, late_floor={rp3: 20}, targets={rp3: 22}).passed
    missing = WatcherLog("nodes@A", [Segment(start={}, end={rp3: 30}, listed=[], events=seen[:3])])
    assert check_history(truth, missing, late_floor={rp3: 20}).lost == 1
    retired_ok = WatcherLog("nodes@A", [Segment(start={}, end={rp3: 31}, listed=[], events=[
        *seen, ev(DELETED, n1, 31, partition=rp3), ev(DELETED, n2, 31, partition=rp3)])])
    assert check_history(truth, retired_ok, late_floor={rp3: 20}, retired=[rp3]).passed
    retired_left = WatcherLog("nodes@A", [Segment(start={}, end={rp3: 31}, listed=[], events=[
        *seen, ev(DELETED, n1, 31, partition=rp3)])])
    result = check_history(truth, retired_left, late_floor={rp3: 20}, retired=[rp3])
    assert not result.passed and result.final_mismatch == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["keep", "drop", "dup"]), min_size=4, max_size=4))
def test_any_drop_or_repeat_of_a_required_change_fails_and_nothing_else_does(plan: list[str]) -> None:
    events: list[Event] = []
    for action, e in zip(plan, EVERYTHING):
        if action != "drop":
            events.append(e)
        if action == "dup":
            events.append(e)
    result = check_history(truth_log(), observed(events))
    assert result.lost == plan.count("drop")
    assert result.duplicated == plan.count("dup")
    assert result.passed == (plan.count("drop") == 0 and plan.count("dup") == 0)


# -- pods ------------------------------------------------------------------------------------------


def pod(key: tuple[str, str, str], t: float, typ: str = "MODIFIED", phase: str = "Pending", deleting: bool = False) -> Event:
    return Event(t, typ, key, P, int(t * 10) + 1, phase, deleting)


def test_pods_that_run_or_go_away_within_the_grace_pass() -> None:
    events = [pod(A, 0, "ADDED"), pod(A, 3, phase="Running"), pod(B, 10, "ADDED"), pod(B, 20, DELETED)]
    result = check_pods(events, end=500, grace=120)
    assert result.passed and result.reached_running == 1 and result.deleted_before_running == 1


def test_a_pod_pending_beyond_the_grace_is_stuck() -> None:
    result = check_pods([pod(A, 0, "ADDED"), pod(A, 5)], end=500, grace=120)
    assert not result.passed and result.stuck == 1
    young = check_pods([pod(A, 450, "ADDED")], end=500, grace=120)
    assert young.passed  # not judged yet: created less than the grace before the end


def test_a_pod_whose_deletion_never_ends_is_stuck_terminating() -> None:
    events = [pod(A, 0, "ADDED"), pod(A, 1, phase="Running"), pod(A, 10, phase="Running", deleting=True)]
    result = check_pods(events, end=500, grace=120)
    assert not result.passed and result.stuck_terminating == 1
    assert check_pods([*events, pod(A, 12, DELETED, phase="Running")], end=500, grace=120).passed


# -- leases -----------------------------------------------------------------------------------------


def test_leases_renewed_within_their_duration_pass_and_an_expired_one_fails() -> None:
    fresh = [LeaseSample(10, "rp1", "rp1-fleet-00000", 25.0, 40.0), LeaseSample(15, "rp1", "rp1-fleet-00000", 30.0, 40.0)]
    assert check_leases(fresh, rounds=2).passed
    result = check_leases([*fresh, LeaseSample(20, "rp2", "rp2-fleet-00001", 41.5, 40.0)], rounds=3)
    assert not result.passed and result.leases_expired == 1 and result.max_age_lease == "rp2/rp2-fleet-00001"


# -- errors ------------------------------------------------------------------------------------------


def test_5xx_inside_a_window_or_its_slack_are_attributed_others_are_not() -> None:
    windows = [Window("apiserver-kill tp2 #1", 30.0, 40.0)]
    ok = [ClientError(31.0, 503, "probe"), ClientError(42.9, 503, "probe"), ClientError(100.0, 0, "probe"),
          ClientError(100.0, 409, "churn")]
    result = attribute_errors(ok, windows, slack=3.0)
    assert result.passed and result.attributed == {"apiserver-kill tp2 #1": 2} and result.total == 2
    late = attribute_errors([*ok, ClientError(43.5, 500, "recorder pods@A watch")], windows, slack=3.0)
    assert not late.passed and late.unattributed == 1 and "43.5" in late.examples[0]


# -- growth -------------------------------------------------------------------------------------------


def test_least_squares_fits_a_line() -> None:
    slope, intercept = least_squares([(0, 1.0), (1, 3.0), (2, 5.0)])
    assert (round(slope, 9), round(intercept, 9)) == (2.0, 1.0)


def test_theil_sen_fits_a_line_and_ignores_a_spike() -> None:
    slope, intercept = theil_sen([(0, 1.0), (1, 3.0), (2, 5.0)])
    assert (round(slope, 9), round(intercept, 9)) == (2.0, 1.0)
    spiked = [(float(t), 10.0) for t in range(20)]
    spiked[15] = (15.0, 100.0)
    assert theil_sen(spiked) == (0.0, 10.0)


def test_a_fault_spike_passes_and_a_step_that_stays_fails() -> None:
    """The soak's task count: flat at 197 with a one-sample spike to 287 near the end (a
    partition restarting) is not a leak; memory that steps up by 10 % and stays is growth."""
    flat = [(float(t), 197.0) for t in range(150, 900, 5)]
    spiked = [(t, 287.0 if t == 800.0 else v) for t, v in flat]
    assert check_growth(spiked, warmup_s=150, limit=0.05, robust=True).passed
    step = [(t, 200.0 if t < 500 else 220.0) for t, _ in flat]
    for robust in (True, False):
        result = check_growth(step, warmup_s=150, limit=0.05, robust=robust)
        assert not result.passed and result.growth > 0.05, robust
    late = [(t, 200.0 if t < 750 else 220.0) for t, _ in flat]  # a step in the last fifth
    assert not check_growth(late, warmup_s=150, limit=0.05).passed


def test_a_flat_series_after_the_warmup_passes_and_a_growing_one_fails() -> None:
    warm = [(float(t), 100.0 + t) for t in range(0, 100)]  # grows during the warm-up only
    flat = [(float(t), 200.0 + (t % 3)) for t in range(100, 700, 5)]
    assert check_growth(warm + flat, warmup_s=100, limit=0.05).passed
    leak = [(float(t), 200.0 + t * 0.1) for t in range(100, 700, 5)]  # +60 over 600 s on 210: 28 %
    result = check_growth(warm + leak, warmup_s=100, limit=0.05)
    assert not result.passed and 0.2 < result.growth < 0.35


def test_a_series_too_short_after_the_warmup_is_not_judged_and_does_not_pass() -> None:
    series = [(float(t), 100.0) for t in range(0, 700, 5)]
    assert check_growth(series, warmup_s=100, limit=0.05, min_span_s=180).passed
    short = check_growth(series, warmup_s=600, limit=0.05, min_span_s=180)
    assert not short.judged and not short.passed
    assert not check_growth(series[:2], warmup_s=0, limit=0.05).passed  # two points say nothing


# -- per fault ----------------------------------------------------------------------------------------


def test_fault_report_counts_failures_recovery_and_relists() -> None:
    window = Window("reset tp1 #1", 100.0, 110.0)
    errors = [ClientError(99.0, 0, "x"), ClientError(101.0, 0, "x"), ClientError(105.0, 503, "x"), ClientError(112.5, 503, "x"),
              ClientError(200.0, 503, "x")]
    relists = cumulative([(90.0, 4.0), (105.0, 6.0), (130.0, 1.0), (150.0, 2.0)])  # a restart at 130: 6 + 1, 6 + 2
    figures = fault_report(window, errors, relists, slack=3.0, after=30.0)
    assert (figures.failed_requests, figures.server_errors, figures.recovered_s, figures.relists) == (3, 2, 2.5, 3)
    quiet = fault_report(Window("latency rp1 #1", 300.0, 320.0), errors, relists, slack=3.0, after=30.0)
    assert (quiet.failed_requests, quiet.recovered_s, quiet.relists) == (0, 0.0, 0)


def test_a_clients_failure_counter_must_rise_only_in_fault_windows() -> None:
    windows = [Window("rolling-restart B #1", 100.0, 110.0)]
    counter = [(95.0, 0.0), (96.0, 0.0), (101.0, 40.0), (112.0, 45.0), (150.0, 45.0)]
    result = attribute_increments(increments(counter), windows, slack=3.0)
    assert result.passed and result.total == 45 and result.attributed == {"rolling-restart B #1": 45}
    late = attribute_increments(increments([*counter, (160.0, 47.0)]), windows, slack=3.0)
    assert not late.passed and late.unattributed == 2 and "t=150.0" in late.examples[0]


def test_an_unattributed_failure_of_a_fleet_that_reports_classes_says_what_failed() -> None:
    windows = [Window("rolling-restart B #1", 100.0, 110.0)]
    by_class = [(95.0, {}), (101.0, {"watch pods: 500 InternalError": 40}),
                (150.0, {"watch pods: 500 InternalError": 40}),
                (151.0, {"watch pods: 500 InternalError": 41, "update leases: 503": 2})]
    incs = class_increments(by_class)
    assert incs == [(95.0, 101.0, 40, "watch pods: 500 InternalError x40"),
                    (150.0, 151.0, 3, "update leases: 503 x2, watch pods: 500 InternalError x1")]
    result = attribute_increments(incs, windows, slack=3.0)
    assert result.total == 43 and result.unattributed == 3
    assert result.examples == ["3 between t=150.0 and t=151.0: update leases: 503 x2, watch pods: 500 InternalError x1"]


def test_census_growth_names_the_type_that_grew_first() -> None:
    from bench.soak import census_growth

    def census(dicts: int, bytes_: int) -> dict:
        rows = [{"type": "builtins.dict", "count": 10, "bytes": dicts}, {"type": "builtins.bytes", "count": 5, "bytes": bytes_}]
        return {"objects": 15, "bytes": dicts + bytes_, "seconds": 1.0, "types": rows, "large": rows}

    grown = census_growth([(600.0, census(1000, 5000)), (1800.0, census(1100, 9000)), (3600.0, census(1200, 20000))], top=5)
    assert [row["type"] for row in grown["types"]] == ["builtins.bytes", "builtins.dict"]
    assert grown["types"][0]["bytes"] == [5000, 9000, 20000] and grown["t_s"] == [600.0, 1800.0, 3600.0]
    assert census_growth([(600.0, census(1, 1))], top=5) == {}
