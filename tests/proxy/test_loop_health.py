"""proxy.loop_health: the loop-lag probe sees a blocked loop; GC pauses are timed per generation."""

from __future__ import annotations

import asyncio
import gc
import time

from prometheus_client import CollectorRegistry, Histogram

from proxy.loop_health import GcPauses, probe_loop_lag, sweep_frozen


def _histogram(*labels: str) -> tuple[CollectorRegistry, Histogram]:
    registry = CollectorRegistry()
    return registry, Histogram("lag_seconds", "test", labels, buckets=(0.01, 0.1, 1.0), registry=registry)


async def test_loop_lag_probe_observes_a_blocked_loop() -> None:
    registry, histogram = _histogram()
    probe = asyncio.create_task(probe_loop_lag(histogram, interval=0.01))
    try:
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # a callback that holds the loop, as a stall would
        await asyncio.sleep(0.05)
    finally:
        probe.cancel()
    over_100ms = registry.get_sample_value("lag_seconds_count") - registry.get_sample_value("lag_seconds_bucket", {"le": "0.1"})
    assert over_100ms == 1
    assert registry.get_sample_value("lag_seconds_sum") >= 0.25


def test_gc_pauses_are_observed_per_generation_and_close_uninstalls() -> None:
    registry, histogram = _histogram("generation")
    pauses = GcPauses(histogram)
    try:
        gc.collect(2)
        # Timed in the callback, observed only by drain (never from inside the collector).
        assert registry.get_sample_value("lag_seconds_count", {"generation": "2"}) == 0
        pauses.drain()
        assert registry.get_sample_value("lag_seconds_count", {"generation": "2"}) >= 1
    finally:
        pauses.close()
        gc.unfreeze()
    assert pauses._on_gc not in gc.callbacks
    before = registry.get_sample_value("lag_seconds_count", {"generation": "2"})
    gc.collect(2)
    pauses.drain()
    assert registry.get_sample_value("lag_seconds_count", {"generation": "2"}) == before


async def test_full_collections_freeze_their_survivors_until_the_sweep() -> None:
    registry, histogram = _histogram("generation")
    pauses = GcPauses(histogram)
    try:
        gc.unfreeze()
        gc.collect(1)
        assert gc.get_freeze_count() == 0  # younger collections freeze nothing
        gc.collect(2)
        assert gc.get_freeze_count() > 0
        sweep = asyncio.create_task(sweep_frozen(interval=0.01))
        await asyncio.sleep(0.05)
        sweep.cancel()
        assert gc.get_freeze_count() == 0
    finally:
        pauses.close()
        gc.unfreeze()
