"""Overload protection: bounded in-flight requests per class and per identity.

Classes follow kube-apiserver's max-in-flight filter (k8s.io/apiserver/pkg/server/filters/
maxinflight.go): mutating, read-only, and long-running (watches, log follows) which are bounded
separately. A request beyond a bound is refused at once with 429 and an integer Retry-After,
which client-go retries by itself (k8s.io/client-go/rest/with_retry.go). Nothing queues, so the
latency of admitted requests does not grow with the overload; `inflight` exports the
concurrency an autoscaler follows (Knative's autoscaler: observed concurrency, 60 s stable / 6 s panic windows).
"""

from __future__ import annotations


from config.models import FailureConfig

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Overloaded(Exception):
    """Refused: `reason` is `class` (the class is full) or `identity` (this identity is)."""

    def __init__(self, request_class: str, reason: str) -> None:
        super().__init__(f"{request_class} requests at their in-flight limit ({reason})")
        self.request_class = request_class
        self.reason = reason


def request_class(method: str, long_running: bool) -> str:
    if long_running:
        return "long-running"
    return "mutating" if method.upper() in MUTATING else "read-only"


class InflightLimiter:
    def __init__(self, config: FailureConfig) -> None:
        self.limits = {
            "mutating": config.max_inflight_mutating,
            "read-only": config.max_inflight_readonly,
            "long-running": config.max_inflight_long_running,
        }
        self.per_identity = config.max_inflight_per_identity
        # plain dicts, not Counters: these are read and written twice per request
        self.inflight: dict[str, int] = dict.fromkeys(self.limits, 0)
        self.by_identity: dict[str, int] = {}

    def acquire(self, klass: str, user: str) -> None:
        """Take a slot of `klass` (and of `user`, outside long-running) until `release`. Raises
        Overloaded when either is full (plain def: atomic)."""
        inflight = self.inflight[klass]
        if inflight >= self.limits[klass]:
            raise Overloaded(klass, "class")
        if klass == "long-running":
            self.inflight[klass] = inflight + 1
            return
        mine = self.by_identity.get(user, 0)
        if mine >= self.per_identity:
            raise Overloaded(klass, "identity")
        self.inflight[klass] = inflight + 1
        self.by_identity[user] = mine + 1

    def release(self, klass: str, user: str) -> None:
        """Give back what `acquire` took."""
        self.inflight[klass] -= 1
        if klass != "long-running":
            left = self.by_identity[user] - 1
            if left <= 0:
                del self.by_identity[user]
            else:
                self.by_identity[user] = left
