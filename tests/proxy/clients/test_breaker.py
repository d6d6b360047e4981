"""The circuit breaker of a partition, driven by a fake clock."""

from __future__ import annotations

import pytest

from proxy.clients.breaker import CircuitBreaker, Refused


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Transport(Exception):
    """Stands for a transport error in these tests."""


def breaker(failures: int = 3, open_seconds: float = 5.0) -> tuple[CircuitBreaker, Clock]:
    clock = Clock()
    return CircuitBreaker(failures, open_seconds, clock=clock), clock


def fail(b: CircuitBreaker) -> None:
    with pytest.raises(Transport), b.attempt((Transport,)):
        raise Transport()


def test_a_partition_is_marked_down_after_failures_in_a_row_and_only_then() -> None:
    b, _ = breaker(failures=3)
    fail(b)
    fail(b)
    assert b.allow() and not b.is_open
    b.success()  # a success in between starts the count again
    fail(b)
    fail(b)
    assert not b.is_open
    fail(b)
    assert b.is_open and not b.allow()


def test_an_open_breaker_refuses_without_calling_and_tells_when_to_retry() -> None:
    b, clock = breaker(failures=1, open_seconds=5.0)
    fail(b)
    with pytest.raises(Refused), b.attempt((Transport,)):
        raise AssertionError("must not be called")
    assert b.retry_after() == 5
    clock.now += 3.2
    assert b.retry_after() == 2  # whole seconds, rounded up
    clock.now += 10
    assert b.retry_after() == 1  # never 0


def test_after_the_window_one_trial_goes_through_and_its_success_closes_the_breaker() -> None:
    b, clock = breaker(failures=1, open_seconds=5.0)
    assert b.state == "closed"
    fail(b)
    assert b.state == "open"
    clock.now += 5.0
    assert b.state == "half-open" and not b.is_open
    with b.attempt((Transport,)):
        with pytest.raises(Refused), b.attempt((Transport,)):  # half-open: one trial at a time
            pass
    assert b.state == "closed"
    with b.attempt((Transport,)):
        pass  # closed: calls go through again


def test_a_failed_trial_opens_the_breaker_again_for_a_whole_window() -> None:
    b, clock = breaker(failures=2, open_seconds=5.0)
    fail(b)
    fail(b)
    clock.now += 5.0
    fail(b)  # the trial
    assert b.is_open and b.retry_after() == 5


@pytest.mark.parametrize("error", [KeyError("a bug"), GeneratorExit()])
def test_a_trial_ended_by_anything_but_a_transport_error_is_released_without_a_verdict(error: BaseException) -> None:
    b, clock = breaker(failures=1, open_seconds=5.0)
    fail(b)
    clock.now += 5.0
    with pytest.raises(type(error)), b.attempt((Transport,)):
        raise error
    assert b.consecutive == 1 and not b.trial_in_flight  # still failing, but the next call may try
    with b.attempt((Transport,)):
        pass
    assert b.consecutive == 0


def test_a_trial_cancelled_mid_call_does_not_cut_the_partition_off() -> None:
    """The defect that once cut a recovered partition off for good: a trial taken and never
    settled. Cancellation (CancelledError is a BaseException) must release it."""
    import asyncio

    b, clock = breaker(failures=1, open_seconds=5.0)
    fail(b)
    clock.now += 5.0
    with pytest.raises(asyncio.CancelledError), b.attempt((Transport,)):
        raise asyncio.CancelledError()
    assert b.allow()


def test_a_trial_that_finds_the_partition_not_ready_keeps_it_down_for_a_shorter_window() -> None:
    b, clock = breaker(failures=3, open_seconds=5.0)
    for _ in range(3):
        fail(b)
    clock.now += 5.0
    assert b.allow() and b.trial_in_flight  # the half-open trial
    b.not_ready(1.0)
    assert b.is_open and not b.trial_in_flight and b.remaining() == 1.0
    clock.now += 1.0
    assert b.state == "half-open" and b.allow()  # asked again after 1 s, not after 5
    b.success()
    assert b.state == "closed"


def test_not_ready_never_waits_longer_than_a_failures_window() -> None:
    b, clock = breaker(failures=1, open_seconds=0.5)
    fail(b)
    clock.now += 0.5
    assert b.allow()
    b.not_ready(1.0)
    assert b.remaining() == 0.5


def test_a_suspect_partition_makes_its_next_call_a_trial_without_opening() -> None:
    b, _ = breaker(failures=3)
    fail(b)
    b.suspect()  # that failure was a refused connection: the process may have restarted
    assert not b.is_open and b.state == "half-open"
    assert b.allow() and b.trial_in_flight
    assert not b.allow()  # one trial at a time
    b.success()
    assert b.state == "closed" and b.allow() and not b.trial_in_flight


def test_a_suspect_partition_still_opens_only_after_its_failures_in_a_row() -> None:
    b, _ = breaker(failures=3)
    fail(b)
    b.suspect()
    fail(b)  # the trial failed: counted, not yet three in a row
    assert not b.is_open and b.state == "half-open"
    fail(b)
    assert b.is_open
