"""The soak's fault schedule (bench/soak.py): which fault, against what, when. Pure, no I/O.

One CYCLE is every kind of fault once, in `CYCLE` order, each against a target that rotates from
cycle to cycle (apiserver kills go round the partitions, etcd restarts too, toxics move between
links). Faults never overlap: the next starts `gap_s` after the previous one healed (the runner
waits for that; the offsets planned here assume each fault takes its nominal time). A long run
repeats the cycle until no fault fits before the end (a fault must heal `tail_s` before the run
ends, so the checkers see the federation recovered).

Each partition that joins is a new one (slots are append-only and a retired partition's name is
never reused: docs/partition-set.md): cycle k joins `joining[k]` and retires it later in the
same cycle; once `joining` is exhausted, later cycles leave the join and retire out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Fault kinds, in the order of one cycle. Each is undone before the next starts.
APISERVER_KILL = "apiserver-kill"  # SIGKILL a partition's kube-apiserver, start it again
LATENCY = "latency"  # toxiproxy latency (+ jitter) on a partition link, both directions
RESET = "reset"  # toxiproxy reset_peer on a partition link: connections reset
ETCD_RESTART = "etcd-restart"  # stop a partition's etcd, start it again (same data)
SYSTEM_UNREACHABLE = "system-unreachable"  # the system partition's link down > refresh_seconds
WORKER_KILL = "worker-kill"  # SIGKILL one worker of replica B; its supervisor replaces it
ROLLING_RESTART = "rolling-restart"  # replica B: a new process ready beside it, then SIGTERM (maxSurge 1)
JOIN = "partition-join"  # a new RP joins the running proxies (config file + SIGHUP)
EPOCH_BURST = "epoch-burst"  # writes into one TP until its RV epoch rolls over
RETIRE = "partition-retire"  # the RP that joined is retired

# The epoch burst comes second: the first roll of a TP's epoch raises replica A's RSS to a level
# it then keeps (245 -> 257 -> 287 -> 301 MiB over an epoch-burst-only soak's first four bursts,
# flat over the next three; in another, with tracemalloc on, 233 -> 270 MiB by the end of the
# first burst, then within 5 % over six more, and Python's traced memory +8.7 MiB over those
# six), so in a short soak it belongs to the warm-up, before the span whose memory is judged; a
# long one repeats it every cycle.
CYCLE = (
    APISERVER_KILL, EPOCH_BURST, LATENCY, JOIN, APISERVER_KILL, RESET, ETCD_RESTART, SYSTEM_UNREACHABLE,
    WORKER_KILL, APISERVER_KILL, ROLLING_RESTART, RETIRE, APISERVER_KILL,
)
# seconds each fault takes from injection to heal, as measured on the 2-core machine (for
# planning only: the runner waits for the real heal)
NOMINAL_S = {
    APISERVER_KILL: 15.0, LATENCY: 20.0, RESET: 10.0, ETCD_RESTART: 15.0, SYSTEM_UNREACHABLE: 12.0,
    WORKER_KILL: 10.0, ROLLING_RESTART: 15.0, JOIN: 15.0, EPOCH_BURST: 45.0, RETIRE: 5.0,
}
# targets rotate per cycle (apiserver kills take four per cycle: every partition once)
KILL_TARGETS = ("tp2", "rp1", "tp1", "rp2")
ETCD_TARGETS = ("rp2", "tp2", "rp1", "tp1")
LATENCY_TARGETS = ("rp1", "tp2", "rp2", "tp1")
RESET_TARGETS = ("tp1", "rp2", "tp2", "rp1")
BURST_TARGET = "tp2"  # a TP other than the system partition


@dataclass(frozen=True, slots=True)
class PlannedFault:
    """One fault of the plan: `at_s` seconds after the soak's start (not before the previous
    fault healed and `gap_s` passed), `kind`, `target` (a partition, or the replica "B"),
    `cycle` (0-based)."""

    at_s: float
    kind: str
    target: str
    cycle: int

    @property
    def name(self) -> str:
        return f"{self.kind} {self.target} #{self.cycle + 1}"


def gap_for(duration_s: float, *, warmup_s: float, tail_s: float, min_gap_s: float = 20.0, max_gap_s: float = 90.0) -> float:
    """Seconds between two faults: one cycle spread over the usable time, at least `min_gap_s`
    (the breaker's open time, the clients' reconnects and the recorders' resync), at most
    `max_gap_s` (a long run repeats the cycle instead)."""
    usable = duration_s - warmup_s - tail_s
    busy = sum(NOMINAL_S[k] for k in CYCLE)
    gap = (usable - busy) / len(CYCLE)
    return max(min_gap_s, min(max_gap_s, gap))


def plan(duration_s: float, *, warmup_s: float, tail_s: float, gap_s: float, joining: Sequence[str] = ("rp3",),
         kinds: Sequence[str] | None = None) -> list[PlannedFault]:
    """The faults of a soak of `duration_s` seconds: the first `warmup_s` after the start, each
    `gap_s` after the nominal heal of the one before, the last healed `tail_s` before the end.
    `kinds` restricts the plan to some kinds (None: all). A RETIRE is planned only after its
    cycle's JOIN, and a JOIN only with a partition left in `joining`."""
    out: list[PlannedFault] = []
    at = warmup_s
    cycle = 0
    counts: dict[str, int] = {}
    allowed = set(kinds) if kinds is not None else set(CYCLE)
    while True:
        added = False
        joined: str | None = None
        for kind in CYCLE:
            if kind not in allowed:
                continue
            if kind == JOIN:
                if cycle >= len(joining):
                    continue
                target = joining[cycle]
            elif kind == RETIRE:
                if joined is None:
                    continue
                target = joined
            else:
                target = _target(kind, counts.get(kind, 0))
            if at + NOMINAL_S[kind] > duration_s - tail_s:
                return out
            out.append(PlannedFault(at_s=round(at, 1), kind=kind, target=target, cycle=cycle))
            counts[kind] = counts.get(kind, 0) + 1
            if kind == JOIN:
                joined = target
            at += NOMINAL_S[kind] + gap_s
            added = True
        if not added:
            return out
        cycle += 1


def _target(kind: str, n: int) -> str:
    """The target of the n-th fault of `kind` (0-based) over the whole run."""
    if kind == APISERVER_KILL:
        return KILL_TARGETS[n % len(KILL_TARGETS)]
    if kind == ETCD_RESTART:
        return ETCD_TARGETS[n % len(ETCD_TARGETS)]
    if kind == LATENCY:
        return LATENCY_TARGETS[n % len(LATENCY_TARGETS)]
    if kind == RESET:
        return RESET_TARGETS[n % len(RESET_TARGETS)]
    if kind == SYSTEM_UNREACHABLE:
        return "tp1"
    if kind == EPOCH_BURST:
        return BURST_TARGET
    return "B"  # the replica faults (WORKER_KILL, ROLLING_RESTART): replica A stays up for the leak check


def affected_partitions(kind: str, target: str, partitions: Sequence[str]) -> tuple[str, ...]:
    """The partitions whose events a fault may make the proxy's caches resync (a relist after
    410): the target of a partition fault, every partition for a replica fault (its caches
    start over), none for the rest."""
    if kind in (APISERVER_KILL, ETCD_RESTART, RESET, LATENCY, SYSTEM_UNREACHABLE):
        return (target,)
    if kind in (WORKER_KILL, ROLLING_RESTART):
        return tuple(partitions)
    return ()
