"""Per-partition health: a circuit breaker per partition (DESIGN §8).

A partition that fails `failures` requests in a row (connection refused or reset, TLS failure,
no answer within its deadline) is marked down for `open_seconds`: requests it owns are answered
at once with 503 and an integer Retry-After instead of each waiting for its own timeout. After
that window one request is let through (half-open); its success closes the breaker, its failure
opens it again. Requests owned by other partitions never notice.

Plain `def` methods, no awaits: each state change is atomic on the event loop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


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
