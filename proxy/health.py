"""Per-partition health: a circuit breaker per partition (DESIGN §8).

A partition that fails `failures` requests in a row (connection refused or reset, TLS failure,
no answer within its deadline) is marked down for `open_seconds`: requests it owns are answered
at once with 503 and an integer Retry-After instead of each waiting for its own timeout. After
that window one request is let through (half-open); its success closes the breaker, its failure
opens it again. Requests owned by other partitions never notice.

Plain `def` methods, no awaits: each state change is atomic on the event loop. Callers do not
pair `allow()` with an outcome by hand: `attempt()` does it by construction, so no early return,
cancellation or unexpected error can leave a half-open trial taken forever (which once cut a
recovered partition off for good).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import aiohttp

# What counts as the partition failing: it could not be reached, broke the connection, or did
# not answer within the deadline. Any HTTP answer, even a 5xx, means it is up.
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


class PartitionMarkedDown(Exception):
    """The partition's breaker is open (or its half-open trial is taken): do not call it."""


@dataclass(slots=True)
class CircuitBreaker:
    partition: str
    failures: int
    open_seconds: float
    clock: Callable[[], float] = time.monotonic
    consecutive: int = 0
    open_until: float = 0.0
    trial_in_flight: bool = field(default=False)

    @property
    def is_open(self) -> bool:
        return self.clock() < self.open_until

    def allow(self) -> bool:
        """Whether a request may go to the partition now."""
        now = self.clock()
        if now < self.open_until:
            return False
        if self.consecutive >= self.failures:
            if self.trial_in_flight:
                return False  # half-open: one trial at a time
            self.trial_in_flight = True
        return True

    @contextmanager
    def attempt(self) -> Iterator[None]:
        """One call to the partition: raises PartitionMarkedDown when `allow()` says no; the
        block's outcome is recorded on the way out: a transport error (TRANSPORT_ERRORS) is a
        failure, normal exit a success, anything else (cancellation, a bug) releases the trial
        without a verdict. Wrap only the part that waits for the partition's answer headers."""
        if not self.allow():
            raise PartitionMarkedDown(self.partition)
        try:
            yield
        except TRANSPORT_ERRORS:
            self.failure()
            raise
        except BaseException:
            self.trial_in_flight = False
            raise
        self.success()

    def retry_after(self) -> int:
        """Seconds until the partition may be tried again (an integer >= 1, for Retry-After)."""
        return max(1, math.ceil(self.open_until - self.clock()))

    def success(self) -> None:
        self.consecutive = 0
        self.open_until = 0.0
        self.trial_in_flight = False

    def failure(self) -> None:
        self.consecutive += 1
        self.trial_in_flight = False
        if self.consecutive >= self.failures:
            self.open_until = self.clock() + self.open_seconds
