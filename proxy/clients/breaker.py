"""A circuit breaker per partition, used only inside the client layer.

A partition that fails `failures` calls in a row (connection refused or reset, TLS failure, no
answer within its deadline) is marked down for `open_seconds`: calls it owns fail at once with
`PartitionMarkedDown` instead of each waiting for its own timeout. After that window one call is
let through (half-open); its success closes the breaker, its failure opens it again. The client
makes that trial ask the partition's `/readyz` first (`proxy.clients.partition`): a partition
that answers but is not ready yet stays marked down (`not_ready`) and is asked again sooner than
a failure's window. A connection refused or broken before its answer, or one the partition
closed while it waited in the pool or carried a watch, makes the partition `suspect` (its
process may have restarted): the next call is such a trial at once, even when too few calls
failed to open the breaker, or none. Calls owned by other partitions never notice.

Callers outside this layer never pair `allow()` with an outcome by hand: `attempt()` is a
context manager that records the outcome on the way out, so no early return, cancellation or
unexpected error can leave a half-open trial taken forever (which once cut a recovered partition
off for good). `PartitionClient`'s call (the hot path, where a generator-based context manager
costs a measurable share of a request) pairs them in one `try` of its own with the same three
outcomes: `success`, `failure`, `abandon`. Plain `def` methods, no awaits: every state change is atomic
on the event loop. The clock is injected, so tests drive time by hand.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class Refused(Exception):
    """The breaker is open, or its half-open trial is taken: do not call the partition."""


@dataclass(slots=True)
class CircuitBreaker:
    failures: int  # calls failing in a row that open the breaker
    open_seconds: float  # how long it stays open (seconds)
    clock: Callable[[], float] = time.monotonic
    consecutive: int = 0
    open_until: float = 0.0
    trial_in_flight: bool = False
    unverified: bool = False  # `suspect`: the next call is a trial, whatever `consecutive` says

    @property
    def state(self) -> str:
        """`closed` (calls go through), `open` (refused until the window ends) or `half-open`
        (the window ended: the next call is the trial that closes or opens it again)."""
        if self.clock() < self.open_until:
            return "open"
        return "half-open" if self.unverified or self.consecutive >= self.failures else "closed"

    @property
    def is_open(self) -> bool:
        """Open now (calls are refused until the window ends)."""
        return self.clock() < self.open_until

    def allow(self) -> bool:
        """Whether a call may go to the partition now; takes the half-open trial when it is due."""
        if self.clock() < self.open_until:
            return False
        if self.unverified or self.consecutive >= self.failures:
            if self.trial_in_flight:
                return False  # half-open: one trial at a time
            self.trial_in_flight = True
        return True

    @contextmanager
    def attempt(self, failures: tuple[type[BaseException], ...]) -> Iterator[None]:
        """One call: raises Refused when `allow()` says no. The block's outcome is recorded on the
        way out: an exception of a `failures` type is a failure (re-raised), a normal exit a
        success, anything else (cancellation, a bug) releases the trial without a verdict."""
        if not self.allow():
            raise Refused()
        try:
            yield
        except failures:
            self.failure()
            raise
        except BaseException:
            self.abandon()
            raise
        self.success()

    def remaining(self) -> float:
        """Seconds until the window ends (0 when it is not open)."""
        return max(0.0, self.open_until - self.clock())

    def retry_after(self) -> int:
        """Whole seconds until the partition may be tried again (>= 1, for Retry-After)."""
        return max(1, math.ceil(self.open_until - self.clock()))

    def success(self) -> None:
        self.consecutive = 0
        self.open_until = 0.0
        self.trial_in_flight = False
        self.unverified = False

    def suspect(self) -> None:
        """A connection was refused, broke before its answer, or was closed by the partition:
        its process may have restarted, and a restarted kube-apiserver listens before it is
        ready. The next call is a trial (one at a time) whether or not the breaker opened; a
        failure itself is counted by `failure`."""
        self.unverified = True

    def abandon(self) -> None:
        """A call ended without a verdict (cancelled, or a bug): its half-open trial is free again."""
        self.trial_in_flight = False

    def not_ready(self, retry_seconds: float) -> None:
        """The half-open trial found the partition answering but not ready (its readiness check
        failed): it stays marked down, its trial given back, and is tried again after
        `retry_seconds` (at most `open_seconds`): a kube-apiserver that listens is ready within
        seconds, and a whole failure's window would only lengthen the outage."""
        self.consecutive = max(self.consecutive, self.failures)
        self.trial_in_flight = False
        self.open_until = self.clock() + min(retry_seconds, self.open_seconds)

    def failure(self) -> None:
        self.consecutive += 1
        self.trial_in_flight = False
        if self.consecutive >= self.failures:
            self.open_until = self.clock() + self.open_seconds
