"""Event-loop lag and garbage-collector pauses: the two ways one Python process stalls every
stream it serves at once, measured so they can be seen in /metrics instead of guessed.

    probe_loop_lag(histogram)   a background task: sleeps LAG_PROBE_INTERVAL seconds and observes
                                how much later than asked it woke (seconds), the time a callback
                                ready to run waited for the loop
    GcPauses(histogram)         times every collection (seconds) per generation through
                                gc.callbacks (`drain` observes them into the histogram, outside
                                the collector), and keeps full collections short: after
                                each one, its survivors are frozen (gc.freeze) so the next walks
                                only what was allocated since; `close()` removes the callback
    sweep_frozen()              a background task: every FROZEN_SWEEP_SECONDS unfreezes them,
                                so that the next full collection walks (and frees) everything

Why: a full collection walks every object the collector tracks, and a proxy holding 10,000 or
50,000 watches tracks millions (streams, watchers, their buffers): bench/watch_fanout_h2.py
measured full collections of 0.1-2.5 s, each a stall of every stream (delivery p99 309 ms vs
8 ms direct at 50,000 watches). CPython 3.11 starts one whenever the objects promoted since the
last exceed 25 % of the long-lived ones, so a heap that grows (watches opening) or churns
(watches renewed every 5-10 minutes) pays one every few minutes. Frozen objects are still freed
by reference counting when they die; only garbage held in reference cycles waits for the next
sweep (at most FROZEN_SWEEP_SECONDS), and that sweep is the one long collection left. So what a
request, watch or connection allocates must not form cycles: answered HTTP/2 streams, ended
cache-served watches and closed upstream connections once did, held for up to 10 minutes, a
30-60 MiB sawtooth in the soak's RSS (docs/benchmarks.md, "Cyclic garbage";
tests/proxy/fronts/test_http2_front.py and tests/proxy/clients/test_transport_cycles.py check
that they leave none).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import Histogram

# seconds between two unfreezes of the survivors of full collections: cyclic garbage among them
# lives at most this long; one long collection per period instead of one per heap growth of 25 %.
FROZEN_SWEEP_SECONDS = 600.0

# seconds between two loop-lag probes: 20 probes a second cost nothing measurable and catch any
# stall longer than the probe interval at least once.
LAG_PROBE_INTERVAL = 0.05


async def probe_loop_lag(histogram: Histogram, interval: float = LAG_PROBE_INTERVAL,
                         on_tick: Callable[[], None] | None = None) -> None:
    """Observe the event loop's lag into `histogram` until cancelled; call `on_tick` (e.g.
    GcPauses.drain) after each probe."""
    loop = asyncio.get_running_loop()
    while True:
        asked = loop.time() + interval
        await asyncio.sleep(interval)
        histogram.observe(max(0.0, loop.time() - asked))
        if on_tick is not None:
            on_tick()


class GcPauses:
    """Time every garbage collection and freeze the survivors of every full collection (see the
    module docstring). The durations are kept in a list and moved into `histogram` (labels:
    generation) by `drain`, outside the collector: a collection can start inside any allocation,
    including one made while prometheus-client holds its (non-reentrant) value lock, and
    observing from the callback then deadlocks the process (seen with multiprocess metrics)."""

    def __init__(self, histogram: Histogram) -> None:
        self._children = [histogram.labels(str(g)) for g in range(3)]
        self._started = 0.0
        self._pending: list[tuple[int, float]] = []  # (generation, seconds) not yet observed
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        self._pending.append((generation, time.perf_counter() - self._started))
        if generation == 2:
            gc.freeze()  # the survivors of this walk are not walked again until sweep_frozen

    def drain(self) -> None:
        """Observe the collections timed since the last drain."""
        pending, self._pending = self._pending, []
        for generation, seconds in pending:
            self._children[generation].observe(seconds)

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self.drain()


async def sweep_frozen(interval: float = FROZEN_SWEEP_SECONDS) -> None:
    """Every `interval` seconds, unfreeze the objects GcPauses froze, so the next full
    collection frees the cyclic garbage among them. Runs until cancelled."""
    while True:
        await asyncio.sleep(interval)
        gc.unfreeze()
