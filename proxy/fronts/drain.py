"""The shutdown's gradual drain: client connections are let go one by one over a few seconds,
not all at once, so the replica that takes them over (the new pod of a rolling update, the
other replicas behind the Service) gets its reconnect storm as a stream.

Why: a kubelet that loses its connection reconnects at once and opens its whole watch set again
(a TLS handshake per request in flight, a SubjectAccessReview per cached read, each watch's
initial events). A replica's kubelets all doing that in the same second is the storm measured
in docs/benchmarks.md ("The reconnect storm"): on 2 shared cores it left Lease renewals
unanswered for 10-20 s on the replica that took them. Envoy drains the same way
(`--drain-strategy gradual`: the share of connections told to go rises linearly over the drain
time); kube-apiserver instead keeps serving for `--shutdown-delay-duration` while the endpoints
change, then ends everything at once.

Per connection, in order: its open streams end cleanly (`OpenStreams.end_connection`: a watch
gets its end, and client-go re-watches from its last resourceVersion without a relist), then
HTTP/2 gets GOAWAY and its requests in flight `grace` seconds; HTTP/1.1 closes once its request
in flight is answered. `drain_offsets` is the pacing, pure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

# connections per second per worker that a drain lets go at least, however long
# `failure.shutdown_drain_seconds` is: a handful of connections (a test, a control plane's)
# drains in a blink. 25 is half of what one worker took back in the storm measurement
# (bench.fleet, 1,000 kubelets back in 16.6-19.9 s on one worker: 50-60 per second,
# docs/benchmarks.md "The reconnect storm"), so the workers taking over keep room for heartbeats.
DRAIN_MIN_PER_SECOND = 25.0


def drain_offsets(count: int, *, seconds: float, min_per_second: float = DRAIN_MIN_PER_SECOND) -> list[float]:
    """Seconds after the drain's start at which each of `count` connections is let go: evenly
    spaced so the last goes before `seconds`, and no slower than `min_per_second` connections
    per second. The first goes at once; `seconds` 0 lets every connection go at once.
    Raises ValueError on a negative count or seconds, or a rate that is not positive."""
    if count < 0 or seconds < 0 or min_per_second <= 0:
        raise ValueError(f"drain_offsets: count {count}, seconds {seconds}, min_per_second {min_per_second}")
    if count == 0:
        return []
    step = min(seconds / count, 1.0 / min_per_second)
    return [i * step for i in range(count)]


async def drain(connections: Sequence[T], let_go: Callable[[T], None], *, seconds: float,
                min_per_second: float = DRAIN_MIN_PER_SECOND) -> None:
    """Call `let_go(connection)` for each of `connections` at its `drain_offsets` time (loop
    clock). Returns when the last was let go, about `seconds` at most."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for connection, offset in zip(connections, drain_offsets(len(connections), seconds=seconds, min_per_second=min_per_second),
                                  strict=True):
        delay = start + offset - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        let_go(connection)
