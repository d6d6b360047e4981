"""The partitions' API Priority and Fairness samples as the proxy's /metrics carries them."""

from __future__ import annotations

from typing import Any

from proxy.flowcontrol_metrics import (
    FLOWCONTROL_METRICS_SECONDS,
    FRESH_SECONDS,
    FRESH_WINDOW_SECONDS,
    FlowcontrolMetrics,
    flowcontrol_families,
)

EXPOSITION = b"""# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",verb="GET"} 12
# HELP apiserver_flowcontrol_nominal_limit_seats [BETA] Nominal number of execution seats configured for each priority level
# TYPE apiserver_flowcontrol_nominal_limit_seats gauge
apiserver_flowcontrol_nominal_limit_seats{priority_level="catch-all"} 13
apiserver_flowcontrol_nominal_limit_seats{priority_level="e2e-pl"} 7
# HELP apiserver_flowcontrol_request_concurrency_limit x
# TYPE apiserver_flowcontrol_request_concurrency_limit gauge
apiserver_flowcontrol_request_concurrency_limit 3
# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 400
"""


def test_only_the_flowcontrol_families_are_kept_each_sample_labelled_with_its_partition() -> None:
    families = flowcontrol_families(EXPOSITION, "tp2")

    assert list(families) == [b"apiserver_flowcontrol_nominal_limit_seats", b"apiserver_flowcontrol_request_concurrency_limit"]
    assert families[b"apiserver_flowcontrol_nominal_limit_seats"][2:] == [
        b'apiserver_flowcontrol_nominal_limit_seats{partition="tp2",priority_level="catch-all"} 13',
        b'apiserver_flowcontrol_nominal_limit_seats{partition="tp2",priority_level="e2e-pl"} 7',
    ]
    assert families[b"apiserver_flowcontrol_request_concurrency_limit"][0].startswith(b"# HELP ")
    assert families[b"apiserver_flowcontrol_request_concurrency_limit"][2] == (
        b'apiserver_flowcontrol_request_concurrency_limit{partition="tp2"} 3')


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Partition:
    """Stands for a PartitionClient: answers /metrics with EXPOSITION and counts the reads."""

    def __init__(self) -> None:
        self.reads = 0

    def request(self, method: str, path: str, *, headers: dict[str, str]) -> "Partition":
        assert (method, path) == ("GET", "/metrics")
        self.reads += 1
        return self

    async def __aenter__(self) -> "Partition":
        self.status = 200
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self) -> bytes:
        return EXPOSITION


async def test_samples_are_reused_for_half_a_minute_and_for_seconds_only_after_a_flowcontrol_write() -> None:
    clock, tp1 = Clock(), Partition()
    samples = FlowcontrolMetrics(clock)
    clients: Any = {"tp1": tp1}
    text = await samples.text(clients)
    assert b'apiserver_flowcontrol_nominal_limit_seats{partition="tp1",priority_level="e2e-pl"} 7' in text
    clock.now += FRESH_SECONDS
    assert await samples.text(clients) == text and tp1.reads == 1  # reused: no write was seen
    clock.now += FLOWCONTROL_METRICS_SECONDS - FRESH_SECONDS
    await samples.text(clients)
    assert tp1.reads == 2
    samples.changed()  # a FlowSchema written through this worker: read again at once...
    await samples.text(clients)
    assert tp1.reads == 3
    clock.now += FRESH_SECONDS  # ... and every few seconds for a while
    await samples.text(clients)
    assert tp1.reads == 4
    clock.now += FRESH_WINDOW_SECONDS
    await samples.text(clients)
    clock.now += FRESH_SECONDS
    await samples.text(clients)
    assert tp1.reads == 5  # the window is over: reused again
