"""Overload protection: bounded in-flight requests per class and partition, and per identity.

Classes follow kube-apiserver's max-in-flight filter (k8s.io/apiserver/pkg/server/filters/
maxinflight.go): mutating, read-only, and long-running (watches, log follows) which are bounded
separately. Mutating and read-only requests are bounded per partition, as each partition's own
kube-apiserver bounds them: a partition that stalls (its etcd restarting, its kube-apiserver
slow) holds the requests sent to it until their clients give up, and with one budget for all
partitions those filled it and every other partition's requests were refused too (the soak: one
replica refused 687 Lease renewals with 429, whichever partition they were for, in the 35 s
after rp2's etcd restart; 3,888 in an earlier hour while rp1 answered slowly). A request that
goes to several partitions (a union list) counts in a budget of its own (`FAN_OUT`).
Long-running requests are bounded for the whole process: they cost the proxy memory, not the
partitions work.

A request beyond a bound is refused at once with 429 and an integer Retry-After,
which client-go retries by itself (k8s.io/client-go/rest/with_retry.go). Nothing queues, so the
latency of admitted requests does not grow with the overload; `inflight` exports the
concurrency an autoscaler follows (Knative's autoscaler: observed concurrency, 60 s stable / 6 s panic windows).
"""

from __future__ import annotations


from config.models import FailureConfig

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# the budget of requests that go to several partitions at once (union lists), and of long-running ones
FAN_OUT = ""


class Overloaded(Exception):
    """Refused: `reason` is `class` (the class is full, for the request's partition) or
    `identity` (this identity is)."""

    def __init__(self, request_class: str, reason: str, partition: str = FAN_OUT) -> None:
        where = f" to {partition}" if partition and reason == "class" else ""
        super().__init__(f"{request_class} requests{where} at their in-flight limit ({reason})")
        self.request_class = request_class
        self.reason = reason


def request_class(method: str, long_running: bool) -> str:
    if long_running:
        return "long-running"
    return "mutating" if method.upper() in MUTATING else "read-only"


class InflightLimiter:
    """The bounds of the module docstring: `limits` per class (per partition for mutating and
    read-only requests), `per_identity` for every non-long-running request of one identity."""

    def __init__(self, config: FailureConfig) -> None:
        self.limits = {
            "mutating": config.max_inflight_mutating,
            "read-only": config.max_inflight_readonly,
            "long-running": config.max_inflight_long_running,
        }
        self.per_identity = config.max_inflight_per_identity
        # class -> partition (FAN_OUT for several, and for long-running) -> requests in flight;
        # plain dicts, not Counters: these are read and written twice per request
        self.inflight: dict[str, dict[str, int]] = {klass: {} for klass in self.limits}
        self.by_identity: dict[str, int] = {}

    def acquire(self, klass: str, user: str, partition: str = FAN_OUT) -> None:
        """Take a slot of `klass` for `partition` (and of `user`, outside long-running) until
        `release` with the same arguments. Raises Overloaded when either is full (plain def:
        atomic)."""
        if klass == "long-running":
            partition = FAN_OUT
        counts = self.inflight[klass]
        inflight = counts.get(partition, 0)
        if inflight >= self.limits[klass]:
            raise Overloaded(klass, "class", partition)
        if klass == "long-running":
            counts[partition] = inflight + 1
            return
        mine = self.by_identity.get(user, 0)
        if mine >= self.per_identity:
            raise Overloaded(klass, "identity")
        counts[partition] = inflight + 1
        self.by_identity[user] = mine + 1

    def release(self, klass: str, user: str, partition: str = FAN_OUT) -> None:
        """Give back what `acquire` took."""
        if klass == "long-running":
            partition = FAN_OUT
        counts = self.inflight[klass]
        left = counts[partition] - 1
        if left <= 0:
            del counts[partition]  # a retired partition leaves no key behind
        else:
            counts[partition] = left
        if klass != "long-running":
            left = self.by_identity[user] - 1
            if left <= 0:
                del self.by_identity[user]
            else:
                self.by_identity[user] = left
