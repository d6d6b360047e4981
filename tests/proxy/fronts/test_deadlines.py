"""Deadlines in one-second buckets (proxy.fronts.deadlines): never early, at most a bucket late,
one loop timer per bucket however many deadlines fall in it, and what is discarded never runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.fronts import deadlines
from proxy.fronts.deadlines import Deadlines

RESOLUTION = 0.05  # seconds: a short bucket, so the test waits for a few of them only
SLACK = 0.1  # seconds a loop on a shared machine may take to run a due timer


@pytest.fixture(autouse=True)
def short_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadlines, "DEADLINE_RESOLUTION", RESOLUTION)


async def test_each_callback_runs_once_after_its_time_and_at_most_a_bucket_late() -> None:
    loop = asyncio.get_running_loop()
    due = Deadlines()
    ran: dict[str, list[float]] = {}
    start = loop.time()
    wanted = {"a": start + 0.02, "b": start + 0.07, "c": start + 0.071, "d": start + 0.2, "past": start - 1}
    for name, when in wanted.items():
        due.add(when, lambda name=name: ran.setdefault(name, []).append(loop.time()))  # type: ignore[misc]
    assert len(due) == 5
    await asyncio.sleep(0.2 + RESOLUTION + SLACK)
    assert sorted(ran) == sorted(wanted) and all(len(times) == 1 for times in ran.values())
    for name, (at,) in ran.items():
        assert at >= wanted[name], name  # never early
        assert at <= max(wanted[name], start) + RESOLUTION + SLACK, name
    assert len(due) == 0


async def test_a_bucket_has_one_timer_however_many_deadlines_it_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    timers: list[float] = []
    call_at = loop.call_at

    due = Deadlines()

    def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        if callback == due._expire:  # the loop's own timers (asyncio.sleep) are not counted
            timers.append(when)
        return call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting)
    now = loop.time()
    ran: list[int] = []
    for i in range(100):
        due.add(now + 0.1 + (i % 2) * RESOLUTION, lambda i=i: ran.append(i))  # type: ignore[misc]
    assert len(timers) == 2  # 100 deadlines in two buckets
    await asyncio.sleep(0.1 + 2 * RESOLUTION + SLACK)
    assert sorted(ran) == list(range(100))


async def test_a_discarded_callback_never_runs_and_the_others_of_its_bucket_do() -> None:
    loop = asyncio.get_running_loop()
    due = Deadlines()
    ran: list[str] = []

    def keep() -> None:
        ran.append("kept")

    def drop() -> None:
        ran.append("dropped")

    when = loop.time() + 0.05
    due.add(when, keep)
    bucket = due.add(when, drop)
    due.discard(bucket, drop)
    due.discard(bucket, drop)  # twice: ignored
    due.discard(bucket + 1000, keep)  # a bucket it is not in: ignored
    assert len(due) == 1
    await asyncio.sleep(0.05 + RESOLUTION + SLACK)
    assert ran == ["kept"]


async def test_a_callback_that_raises_does_not_keep_the_rest_of_its_bucket_from_running(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    due = Deadlines()
    ran: list[str] = []

    def fails() -> None:
        raise RuntimeError("a broken stream")

    when = loop.time() + 0.02
    due.add(when, fails)
    due.add(when, lambda: ran.append("after"))
    await asyncio.sleep(0.02 + RESOLUTION + SLACK)
    assert ran == ["after"]
    assert "a deadline's callback failed" in caplog.text
