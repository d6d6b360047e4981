"""The soak's checkers (bench/soak.py): pure functions over what the recorders wrote, no I/O.

Each checker takes records (bench/soak_record.py turns the wire into them) and returns a frozen
result with counts and a few samples; `passed` says whether the soak's invariant held. Times are
seconds since the soak started (one monotonic clock); resourceVersions here are NATIVE RVs of the
object's own partition (the recorders decode proxy RVs, docs/resource-versions.md).

- `check_history`: per object, what a watcher through the proxy saw against the partition's own
  history (a watcher straight on the partition, resuming from its last RV): no event lost inside
  a continuous stream, none duplicated, none out of order, none the partition never had, and the
  last state equal. A relist (after 410 Expired) starts a new continuous stream: what changed in
  between may be collapsed into the listed state, as client-go's reflector allows.
- `check_pods`: every pod reached Running (or finished) or was deleted within a grace.
- `check_leases`: no Lease older than its leaseDurationSeconds at any sample.
- `attribute_errors`: every client-visible 5xx inside a fault window or within a slack after it.
- `check_growth`: the slope of a series (RSS, open fds, tasks) after a warm-up, as the growth
  over the measured span relative to the level at its start: least squares for memory, the
  robust Theil-Sen slope for counts that spike while a fault lasts (fds, tasks).
- `fault_report`: per fault window, what clients saw: failed requests, recovery time, relists.
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Key = tuple[str, str, str]  # (namespace, name, uid): a uid tells a re-created object apart
LISTED = "LISTED"  # the type of an Event that is an item of a LIST (a state, not a change)
DELETED = "DELETED"
# how many examples a result keeps of each kind of violation
SAMPLES = 5


@dataclass(frozen=True, slots=True)
class Event:
    """One state of one object as a watcher received it: a watch event (ADDED, MODIFIED,
    DELETED) or an item of a LIST (LISTED). `rv` is the object's native RV in `partition`;
    `phase` (pods only) is status.phase, with `deleting` when metadata.deletionTimestamp is set."""

    t: float
    type: str
    key: Key
    partition: str
    rv: int
    phase: str = ""
    deleting: bool = False


@dataclass(slots=True)
class Segment:
    """One continuous stream of a watcher: a LIST (`listed`, at position `start`), then the
    events of watches each resumed from the last RV of the one before, until a relist.
    `start` and `end` are per partition native RVs (`end`: the last position the stream
    reached, from events and bookmarks); a partition absent from `start` was not known when the
    stream began (it joined later)."""

    start: dict[str, int]
    end: dict[str, int]
    listed: list[Event] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


@dataclass(slots=True)
class WatcherLog:
    """Everything one watcher received, as segments in order."""

    name: str
    segments: list[Segment] = field(default_factory=list)


# -- per object histories -------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryResult:
    watcher: str
    events_seen: int  # watch events (not list items) the watcher received
    events_required: int  # partition events inside the watcher's continuous streams
    lost: int  # required events the watcher did not get (or a relist that missed a state)
    collapsed: int  # required events replaced by a later state in a resync window (legal)
    duplicated: int  # an event of an object at an RV it had already seen in the stream
    reordered: int  # an event of an object at an RV lower than one it had seen in the stream
    unknown: int  # an event at an RV the object never had in its partition
    unverified: int  # events in a gap of the partition's own history (its watcher relisted)
    final_mismatch: int  # objects whose last state differs from the partition's at the end
    stalled: tuple[str, ...]  # partitions whose position the watcher never reached at the end
    relists: int  # segments after the first (legal resyncs)
    samples: dict[str, list[str]]

    @property
    def passed(self) -> bool:
        return not (self.lost or self.duplicated or self.reordered or self.unknown or self.final_mismatch or self.stalled)


class _Truth:
    """The partitions' own histories, indexed: per object its states in RV order, per partition
    its change events in RV order and the RV intervals its watcher did not see (gaps between
    its segments)."""

    def __init__(self, logs: Mapping[str, WatcherLog]) -> None:
        self.states: dict[Key, list[tuple[int, str]]] = defaultdict(list)  # (rv, type) sorted
        self.events: dict[str, list[tuple[int, Key, float]]] = defaultdict(list)  # partition -> (rv, key, t)
        self.gaps: dict[str, list[tuple[int, int]]] = defaultdict(list)  # (lo, hi]: unseen
        self.first: dict[str, int] = {}  # partition -> the first position its watcher listed at
        self.last: dict[str, int] = {}  # partition -> the last position its watcher reached
        self.deleted_at: dict[Key, int] = {}
        self.partition_of: dict[Key, str] = {}
        for partition, log in logs.items():
            previous_end: int | None = None
            for seg in log.segments:
                start, end = seg.start.get(partition, 0), seg.end.get(partition, 0)
                if previous_end is not None and start > previous_end:
                    self.gaps[partition].append((previous_end, start))
                self.first.setdefault(partition, start)
                previous_end = max(end, start)
                self.last[partition] = max(self.last.get(partition, 0), previous_end)
                for e in seg.listed:
                    self.states[e.key].append((e.rv, LISTED))
                    self.partition_of[e.key] = partition
                for e in seg.events:
                    self.states[e.key].append((e.rv, e.type))
                    self.events[partition].append((e.rv, e.key, e.t))
                    self.partition_of[e.key] = partition
                    if e.type == DELETED:
                        self.deleted_at[e.key] = e.rv
        for key, states in self.states.items():
            states.sort()
            # the same state listed and received as an event is one state
            self.states[key] = [s for i, s in enumerate(states) if i == 0 or s[0] != states[i - 1][0]]
        for partition in self.events:
            self.events[partition].sort(key=lambda x: x[0])
        self._event_rvs = {p: [x[0] for x in evs] for p, evs in self.events.items()}

    def has_state(self, key: Key, rv: int) -> bool:
        states = self.states.get(key, [])
        i = bisect.bisect_left(states, (rv, ""))
        return i < len(states) and states[i][0] == rv

    def in_gap(self, partition: str, rv: int) -> bool:
        return any(lo < rv <= hi for lo, hi in self.gaps.get(partition, ()))

    def events_between(self, partition: str, lo: int, hi: int) -> list[tuple[int, Key, float]]:
        """Change events of `partition` with lo < rv <= hi."""
        rvs = self._event_rvs.get(partition, [])
        return self.events[partition][bisect.bisect_right(rvs, lo):bisect.bisect_right(rvs, hi)]

    def state_at(self, key: Key, rv: int) -> tuple[int, str] | None:
        """The object's last state at or before `rv` (None: it did not exist yet)."""
        states = self.states.get(key, [])
        i = bisect.bisect_right(states, (rv, "\uffff"))
        return states[i - 1] if i else None

    def keys_of(self, partition: str) -> Iterable[Key]:
        return (k for k, p in self.partition_of.items() if p == partition)

    def certain_at(self, partition: str, rv: int) -> bool:
        """Whether the partition's state at `rv` is known (its watcher covered it)."""
        return self.first.get(partition, rv + 1) <= rv <= self.last.get(partition, -1) and not self.in_gap(partition, rv)


def _add(samples: dict[str, list[str]], kind: str, text: str) -> None:
    lst = samples.setdefault(kind, [])
    if len(lst) < SAMPLES:
        lst.append(text)


def check_history(
    truth: Mapping[str, WatcherLog],
    observed: WatcherLog,
    *,
    late_floor: Mapping[str, int] | None = None,
    retired: Iterable[str] = (),
    resync_windows: Sequence[tuple[str, float, float]] = (),
    targets: Mapping[str, int] | None = None,
) -> HistoryResult:
    """Compare one watcher's log (`observed`, through the proxy) with the partitions' own
    (`truth`: partition -> the log of a watcher straight on it).

    - Inside a segment, every change a partition made between the segment's start and end
      position (per partition) must arrive, once, in RV order per object; a partition the
      segment did not know at its start (it joined) is required from `late_floor[partition]`
      on (the partition's position when the soak started writing to it after the join).
    - A LIST must show every object the partition held at the list's position, at its RV.
    - An event's RV must be one the object had; a DELETED may carry a later RV (a resync's
      deletion at the list RV); an object of a `retired` partition leaves as DELETED at any RV.
    - A required event whose partition event time lies in a `resync_windows` entry
      (partition, t0, t1: a fault that made the proxy's cache relist) is `collapsed`, not lost,
      when the watcher saw a later state of the object in the same segment.
    - The last segment's state at each partition's last common position equals the
      partition's; `targets` (partition -> native RV) are positions the watcher must have
      reached at the end.
    Raises nothing; every violation is counted and sampled."""
    t = _Truth(truth)
    retired = frozenset(retired)
    floor = dict(late_floor or {})
    samples: dict[str, list[str]] = {}
    lost = collapsed = duplicated = reordered = unknown = unverified = required = seen = 0

    def verify(e: Event) -> bool:
        """Whether the object had this state in its partition (counts what it cannot verify)."""
        nonlocal unknown, unverified
        if t.has_state(e.key, e.rv):
            return True
        if e.type == DELETED and (e.partition in retired or (e.key in t.deleted_at and t.deleted_at[e.key] <= e.rv)):
            return True
        if t.in_gap(e.partition, e.rv) or e.rv > t.last.get(e.partition, 0) or e.rv <= t.first.get(e.partition, 0):
            unverified += 1  # the partition's own watcher did not see that stretch
            return True
        unknown += 1
        _add(samples, "unknown", f"{e.type} {e.key} rv {e.rv} at t={e.t:.1f}")
        return False

    for index, seg in enumerate(observed.segments):
        last: dict[Key, int] = {}
        for e in seg.listed:
            verify(e)
            last[e.key] = e.rv
        # a LIST shows every object its partitions held at its position
        for partition, at in seg.start.items():
            if partition in retired or not t.certain_at(partition, at):
                continue
            listed = {e.key: e.rv for e in seg.listed if e.partition == partition}
            for key in t.keys_of(partition):
                state = t.state_at(key, at)
                if state is None or state[1] == DELETED:
                    continue
                if listed.get(key) != state[0]:
                    lost += 1
                    _add(samples, "lost", f"{key} not listed at rv {state[0]} by the LIST at {partition}={at} (segment {index})")
        got: dict[Key, set[int]] = defaultdict(set)
        deletes: dict[Key, int] = {}
        for e in seg.events:
            seen += 1
            verify(e)
            prev = last.get(e.key)
            if prev is not None and e.rv == prev:
                duplicated += 1
                _add(samples, "duplicated", f"{e.type} {e.key} rv {e.rv} again at t={e.t:.1f} (segment {index})")
            elif prev is not None and e.rv < prev:
                reordered += 1
                _add(samples, "reordered", f"{e.type} {e.key} rv {e.rv} after rv {prev} at t={e.t:.1f} (segment {index})")
            last[e.key] = max(e.rv, prev or 0)
            got[e.key].add(e.rv)
            if e.type == DELETED:
                deletes[e.key] = max(deletes.get(e.key, 0), e.rv)
        # every change inside the continuous stream arrived
        for partition, hi in seg.end.items():
            lo = seg.start.get(partition) or floor.get(partition)
            if not lo:
                continue
            hi = min(hi, t.last.get(partition, 0))
            for rv, key, when in t.events_between(partition, lo, hi):
                if t.in_gap(partition, rv):
                    continue
                required += 1
                if rv in got.get(key, ()):
                    continue
                if key in deletes and t.deleted_at.get(key) == rv and deletes[key] >= rv:
                    continue  # its deletion, stamped with a resync's list RV
                later = any(r > rv for r in got.get(key, ()))
                if later and any(p == partition and t0 <= when <= t1 for p, t0, t1 in resync_windows):
                    collapsed += 1
                    continue
                lost += 1
                _add(samples, "lost", f"{key} rv {rv} ({partition}, t={when:.1f}) not received in segment {index}")

    final_mismatch, stalled = _final_state(t, observed, retired, targets or {}, samples)
    return HistoryResult(
        watcher=observed.name, events_seen=seen, events_required=required, lost=lost, collapsed=collapsed,
        duplicated=duplicated, reordered=reordered, unknown=unknown, unverified=unverified,
        final_mismatch=final_mismatch, stalled=stalled, relists=max(0, len(observed.segments) - 1), samples=samples,
    )


def _final_state(t: _Truth, observed: WatcherLog, retired: frozenset[str], targets: Mapping[str, int],
                 samples: dict[str, list[str]]) -> tuple[int, tuple[str, ...]]:
    """Objects whose state in the watcher's last segment differs from the partition's at the
    last position both reached; partitions whose target the watcher did not reach."""
    if not observed.segments:
        return 0, tuple(sorted(targets))
    seg = observed.segments[-1]
    stalled = tuple(sorted(p for p, want in targets.items() if p not in retired and seg.end.get(p, 0) < want))
    for p in stalled:
        _add(samples, "stalled", f"{p}: reached {seg.end.get(p, 0)}, the partition was at {targets[p]}")
    states: dict[Key, list[tuple[int, str]]] = defaultdict(list)
    for e in [*seg.listed, *seg.events]:
        states[e.key].append((e.rv, e.type))
    for lst in states.values():
        lst.sort()
    mismatch = 0
    partitions = set(seg.end) | set(seg.start) | {e.partition for e in seg.listed}
    for partition in sorted(partitions):
        if partition in retired:
            left = [k for k, lst in states.items() if t.partition_of.get(k) == partition and lst[-1][1] != DELETED]
            mismatch += len(left)
            for k in left[:SAMPLES]:
                _add(samples, "final_mismatch", f"{k}: still there after {partition} retired")
            continue
        cut = min(seg.end.get(partition, 0), t.last.get(partition, 0))
        if not cut or not t.certain_at(partition, cut):
            continue
        keys = set(t.keys_of(partition)) | {k for k in states if t.partition_of.get(k, partition) == partition}
        for key in keys:
            want = t.state_at(key, cut)
            want_rv = None if want is None or want[1] == DELETED else want[0]
            lst = states.get(key, [])
            i = bisect.bisect_right(lst, (cut, "\uffff"))
            have = lst[i - 1] if i else None
            have_rv = None if have is None or have[1] == DELETED else have[0]
            if want_rv != have_rv:
                mismatch += 1
                _add(samples, "final_mismatch", f"{key} at {partition}={cut}: watcher rv {have_rv}, partition rv {want_rv}")
    return mismatch, stalled


# -- pods --------------------------------------------------------------------------------------

DONE_PHASES = frozenset({"Running", "Succeeded", "Failed"})


@dataclass(frozen=True)
class PodResult:
    pods: int
    reached_running: int
    deleted_before_running: int
    stuck: int  # neither Running (or finished) nor deleted within the grace of being created
    stuck_terminating: int  # deletion started, not gone within the grace
    samples: list[str]

    @property
    def passed(self) -> bool:
        return not (self.stuck or self.stuck_terminating)


def check_pods(events: Iterable[Event], *, end: float, grace: float) -> PodResult:
    """Every pod (by uid) seen by the partitions' own pod watchers reached a done phase
    (Running, Succeeded, Failed) or was deleted within `grace` seconds of its first
    appearance; a pod whose deletion began was gone within `grace`. Pods first seen less than
    `grace` before `end` are judged only on what already happened."""
    first: dict[Key, float] = {}
    running: dict[Key, float] = {}
    deleting: dict[Key, float] = {}
    gone: dict[Key, float] = {}
    for e in events:
        first.setdefault(e.key, e.t)
        if e.phase in DONE_PHASES:
            running.setdefault(e.key, e.t)
        if e.deleting:
            deleting.setdefault(e.key, e.t)
        if e.type == DELETED:
            gone.setdefault(e.key, e.t)
    stuck = terminating = reached = deleted_first = 0
    samples: list[str] = []
    for key, t0 in first.items():
        done = min(running.get(key, float("inf")), gone.get(key, float("inf")))
        if key in running and running[key] <= gone.get(key, float("inf")):
            reached += 1
        elif key in gone:
            deleted_first += 1
        if done - t0 > grace and (done != float("inf") or end - t0 > grace):
            stuck += 1
            if len(samples) < SAMPLES:
                samples.append(f"{key[0]}/{key[1]} seen at t={t0:.1f}, not Running nor deleted within {grace:g} s")
        if key in deleting:
            t_del = deleting[key]
            end_del = gone.get(key, float("inf"))
            if end_del - t_del > grace and (end_del != float("inf") or end - t_del > grace):
                terminating += 1
                if len(samples) < SAMPLES:
                    samples.append(f"{key[0]}/{key[1]} deleting since t={t_del:.1f}, still there after {grace:g} s")
    return PodResult(pods=len(first), reached_running=reached, deleted_before_running=deleted_first, stuck=stuck,
                     stuck_terminating=terminating, samples=samples)


# -- leases ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaseSample:
    """One Lease read straight from its partition at `t`: seconds since its renewTime."""

    t: float
    partition: str
    name: str
    age_s: float
    duration_s: float


@dataclass(frozen=True)
class LeaseResult:
    samples: int  # sampling rounds
    leases_expired: int  # distinct Leases seen older than their duration
    expirations: int  # (round, Lease) pairs seen expired
    max_age_s: float
    max_age_lease: str
    examples: list[str]

    @property
    def passed(self) -> bool:
        return self.leases_expired == 0


def check_leases(samples: Iterable[LeaseSample], *, rounds: int) -> LeaseResult:
    """No Lease older than its leaseDurationSeconds at any sample (`rounds`: sampling rounds
    taken, for the report)."""
    expired: set[str] = set()
    expirations = 0
    max_age, max_name = 0.0, ""
    examples: list[str] = []
    for s in samples:
        if s.age_s > max_age:
            max_age, max_name = s.age_s, f"{s.partition}/{s.name}"
        if s.age_s > s.duration_s:
            expirations += 1
            expired.add(f"{s.partition}/{s.name}")
            if len(examples) < SAMPLES:
                examples.append(f"{s.partition}/{s.name} {s.age_s:.1f} s old at t={s.t:.1f} (duration {s.duration_s:g} s)")
    return LeaseResult(samples=rounds, leases_expired=len(expired), expirations=expirations, max_age_s=round(max_age, 2),
                       max_age_lease=max_name, examples=examples)


# -- client-visible errors ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientError:
    """A failed request of one of the soak's clients through the proxy: `status` is the HTTP
    status (an ERROR event's code for a watch), 0 when no answer came (connection refused,
    reset, timeout)."""

    t: float
    status: int
    source: str  # which client and request, e.g. "recorder pods@A watch"
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Window:
    """A fault: injected at `start`, healed at `end` (seconds since the soak started)."""

    name: str
    start: float
    end: float


@dataclass(frozen=True)
class Attribution:
    """Failures set against the fault windows: every one must fall in a window (or its slack)."""

    total: int  # failures counted (5xx answers, or a counter's increments)
    attributed: dict[str, int]  # per window name
    unattributed: int
    examples: list[str]

    @property
    def passed(self) -> bool:
        return self.unattributed == 0


def window_of(t: float, windows: Sequence[Window], slack: float) -> Window | None:
    """The first window that holds `t` in [start, end + slack]."""
    for w in windows:
        if w.start <= t <= w.end + slack:
            return w
    return None


def attribute_errors(errors: Iterable[ClientError], windows: Sequence[Window], *, slack: float) -> Attribution:
    """Every 5xx must fall in a fault window or end within `slack` seconds (the circuit
    breaker's open time plus 2 s) after it."""
    attributed: dict[str, int] = {}
    unattributed = total = 0
    examples: list[str] = []
    for e in errors:
        if e.status < 500:
            continue
        total += 1
        w = window_of(e.t, windows, slack)
        if w is None:
            unattributed += 1
            if len(examples) < SAMPLES:
                examples.append(f"{e.status} at t={e.t:.1f} {e.source} {e.detail[:160]}")
        else:
            attributed[w.name] = attributed.get(w.name, 0) + 1
    return Attribution(total=total, attributed=attributed, unattributed=unattributed, examples=examples)


def attribute_increments(increments: Iterable[tuple[float, float, int] | tuple[float, float, int, str]],
                         windows: Sequence[Window], *, slack: float) -> Attribution:
    """A client's failure counter sampled over time (the fleet's `errors`): each increment
    (t_before, t_after, n[, what failed]) must overlap a fault window [start, end + slack]; when
    two samples bracket it, it happened somewhere between them. An example of an unattributed
    increment names what failed when the increment says it."""
    attributed: dict[str, int] = {}
    total = unattributed = 0
    examples: list[str] = []
    for t0, t1, n, *what in increments:
        if n <= 0:
            continue
        total += n
        w = next((w for w in windows if t0 <= w.end + slack and t1 >= w.start), None)
        if w is None:
            unattributed += n
            if len(examples) < SAMPLES:
                examples.append(f"{n} between t={t0:.1f} and t={t1:.1f}" + (f": {what[0]}" if what and what[0] else ""))
        else:
            attributed[w.name] = attributed.get(w.name, 0) + n
    return Attribution(total=total, attributed=attributed, unattributed=unattributed, examples=examples)


def increments(samples: Sequence[tuple[float, float]]) -> list[tuple[float, float, int]]:
    """A counter's (t, value) samples as (t_before, t_after, increase) for each rise."""
    return [(a[0], b[0], int(b[1] - a[1])) for a, b in zip(samples, samples[1:]) if b[1] > a[1]]


def class_increments(samples: Sequence[tuple[float, Mapping[str, int]]]) -> list[tuple[float, float, int, str]]:
    """Counters by class (the fleet's `errors_by_class`), sampled as (t, {class: count}), as
    (t_before, t_after, increase, "class xN, ...") for each rise of their sum, the classes that
    rose most first: which failures fell between two samples."""
    out = []
    for (t0, before), (t1, after) in zip(samples, samples[1:]):
        rises = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
        if rises:
            what = ", ".join(f"{k} x{v}" for k, v in sorted(rises.items(), key=lambda kv: -kv[1]))
            out.append((t0, t1, sum(rises.values()), what))
    return out


# -- growth ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Growth:
    points: int
    span_s: float
    start_value: float  # the fit's value at the start of the measured span
    slope_per_s: float
    growth: float  # slope x span / start_value: the relative growth over the span
    limit: float
    min_span_s: float = 0.0  # a shorter span is not judged (and does not pass)

    @property
    def judged(self) -> bool:
        return self.points >= 3 and self.span_s >= self.min_span_s

    @property
    def passed(self) -> bool:
        return self.judged and self.growth <= self.limit


def least_squares(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through `points` (x, y); (0, mean) for
    fewer than two distinct x."""
    n = len(points)
    if n == 0:
        return 0.0, 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0, my
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return slope, my - slope * mx


def theil_sen(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(slope, intercept) of the Theil-Sen line through `points` (x, y): the median of the
    slopes between every two points, and the median of y - slope * x (Sen, 1968). A leak
    (steady growth) moves it as it moves a least-squares fit; a fault's short spike does not:
    the asyncio tasks of replica A jump from ~197 to 287 for one 5 s sample while a partition's
    kube-apiserver restarts, which tilted a least-squares line by +5.2 % over a flat series in
    a 15-minute soak (Theil-Sen: +0.9 %). Blind to a step in the last third of the span (too
    few pairs straddle it), which is why memory keeps least squares. (0, median) for fewer
    than two distinct x."""
    if not points:
        return 0.0, 0.0
    slopes = [(y1 - y0) / (x1 - x0) for i, (x0, y0) in enumerate(points) for x1, y1 in points[i + 1:] if x1 != x0]
    if not slopes:
        return 0.0, statistics.median(y for _, y in points)
    slope = statistics.median(slopes)
    return slope, statistics.median(y - slope * x for x, y in points)


def check_growth(series: Sequence[tuple[float, float]], *, warmup_s: float, limit: float, min_span_s: float = 0.0,
                 robust: bool = False) -> Growth:
    """The series (t seconds, value) after `warmup_s`: its growth over the span along the
    fitted line (least squares; with `robust`, Theil-Sen), relative to the line's value at the
    span's start, must be <= `limit` (0.05: 5 %). Fewer
    than 3 points, or a span shorter than `min_span_s`, is not judged: it does not pass."""
    pts = [(t, v) for t, v in series if t >= warmup_s]
    if len(pts) < 2:
        return Growth(points=len(pts), span_s=0.0, start_value=pts[0][1] if pts else 0.0, slope_per_s=0.0, growth=0.0, limit=limit,
                      min_span_s=min_span_s)
    slope, intercept = (theil_sen if robust else least_squares)(pts)
    t0, t1 = pts[0][0], pts[-1][0]
    start = slope * t0 + intercept
    growth = slope * (t1 - t0) / start if start > 0 else 0.0
    return Growth(points=len(pts), span_s=round(t1 - t0, 1), start_value=round(start, 1), slope_per_s=slope,
                  growth=round(growth, 4), limit=limit, min_span_s=min_span_s)


# -- per fault ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultFigures:
    name: str
    start: float
    end: float
    duration_s: float
    failed_requests: int  # the soak's clients' failures in [start, end + slack]
    server_errors: int  # of which 5xx
    recovered_s: float  # from the heal to the last failure of the window (0: none after it)
    relists: int  # the proxy caches' relists counted in [start, end + after]


def fault_report(window: Window, errors: Sequence[ClientError], relists: Sequence[tuple[float, float]], *,
                 slack: float, after: float) -> FaultFigures:
    """What the soak's clients saw of one fault: their failures from its start to `slack`
    seconds after its heal, the time from the heal to the last of them, and the proxy caches'
    relists (`relists`: (t, cumulative count) samples) from its start to `after` seconds past
    its heal."""
    mine = [e for e in errors if window.start <= e.t <= window.end + slack]
    last = max((e.t for e in mine), default=window.end)
    before = _at(relists, window.start)
    end = _at(relists, window.end + after)
    return FaultFigures(
        name=window.name, start=round(window.start, 1), end=round(window.end, 1), duration_s=round(window.end - window.start, 2),
        failed_requests=len(mine), server_errors=sum(1 for e in mine if e.status >= 500),
        recovered_s=round(max(0.0, last - window.end), 2), relists=int(max(0.0, end - before)),
    )


def _at(series: Sequence[tuple[float, float]], t: float) -> float:
    """The last value of a (t, value) series at or before `t` (0 before the first)."""
    value = 0.0
    for ts, v in series:
        if ts > t:
            break
        value = v
    return value


def cumulative(samples: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """A counter sampled over time, made monotonic across resets (a restarted process starts
    from 0 again): each drop adds the value before it."""
    out: list[tuple[float, float]] = []
    offset = 0.0
    prev = 0.0
    for t, v in samples:
        if v < prev:
            offset += prev
        prev = v
        out.append((t, v + offset))
    return out
