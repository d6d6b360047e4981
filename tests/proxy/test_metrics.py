"""The per-request metrics recorder and the merge of several workers' metrics at scrape time."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import orjson
from prometheus_client import CollectorRegistry, Histogram

from proxy import metrics_workers
from proxy.app import _read_health
from proxy.metrics import Metrics

SLI = ("GET", "", "v1", "pods", "", "resource", "apiserver")


def _sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_the_recorder_buckets_as_prometheus_client_does_a_value_on_a_bound_counts_in_that_bucket() -> None:
    metrics = Metrics.create()
    registry = CollectorRegistry()
    reference = Histogram("ref", "", buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0), registry=registry)
    observed = (0.0, 0.005, 0.0051, 0.01, 0.3, 61.0)
    for elapsed in observed:
        metrics.requests.started("other")
        metrics.requests.ended("other", "get", "forward", "tp1", "200", elapsed, SLI)
        reference.observe(elapsed)
    for le, expected in (("0.005", 2), ("0.01", 4), ("0.025", 4), ("0.5", 5), ("60.0", 5), ("+Inf", 6)):
        assert registry.get_sample_value("ref_bucket", {"le": le}) == expected
        assert _sample(metrics, "partition_proxy_request_duration_seconds_bucket", verb="get", route="forward", le=le) == expected
    assert _sample(metrics, "partition_proxy_request_duration_seconds_count", verb="get", route="forward") == 6
    assert _sample(metrics, "partition_proxy_request_duration_seconds_sum", verb="get", route="forward") == sum(observed)
    assert _sample(metrics, "partition_proxy_requests_total", verb="get", route="forward", partition="tp1", code="200") == 6
    sli = dict(zip(("verb", "group", "version", "resource", "subresource", "scope", "component"), SLI))
    assert _sample(metrics, "apiserver_request_sli_duration_seconds_bucket", **sli, le="0.05") == 4
    assert _sample(metrics, "partition_proxy_inflight_requests", kind="other") == 0


def test_requests_in_flight_are_counted_until_they_end() -> None:
    metrics = Metrics.create()
    metrics.requests.started("long-running")
    metrics.requests.started("other")
    assert _sample(metrics, "partition_proxy_inflight_requests", kind="long-running") == 1
    metrics.requests.ended("long-running", "watch", "fan-out", "union", "499", 3.0, None)
    assert _sample(metrics, "partition_proxy_inflight_requests", kind="long-running") == 0
    assert _sample(metrics, "partition_proxy_inflight_requests", kind="other") == 1
    assert _sample(metrics, "apiserver_request_sli_duration_seconds_count", **dict(zip(
        ("verb", "group", "version", "resource", "subresource", "scope", "component"), SLI))) is None  # a watch is not in the SLI


def test_merging_workers_sums_counters_histograms_and_gauges_and_takes_the_highest_of_a_cache_copy() -> None:
    one, two = Metrics.create(), Metrics.create()
    for worker, n in ((one, 2), (two, 3)):
        for _ in range(n):
            worker.requests.started("other")
            worker.requests.ended("other", "list", "fan-out", "union", "200", 0.02, None)
        worker.requests.started("long-running")
        worker.cache_objects.labels("nodes").set(10 * n)  # every worker's copy of the same cache
        worker.cache_watchers.labels("nodes").set(n)  # each worker's own watchers
    merged = metrics_workers.merge([metrics_workers.families(one, []), metrics_workers.families(two, [])])
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for m in merged for s in m.samples}
    assert values[("partition_proxy_requests_total", (("code", "200"), ("partition", "union"), ("route", "fan-out"), ("verb", "list")))] == 5
    assert values[("partition_proxy_request_duration_seconds_bucket", (("le", "0.025"), ("route", "fan-out"), ("verb", "list")))] == 5
    assert values[("partition_proxy_request_duration_seconds_bucket", (("le", "0.01"), ("route", "fan-out"), ("verb", "list")))] == 0
    assert values[("partition_proxy_inflight_requests", (("kind", "long-running"),))] == 2
    assert values[("partition_proxy_watch_cache_objects", (("cache", "nodes"),))] == 30
    assert values[("partition_proxy_watch_cache_watchers", (("cache", "nodes"),))] == 5


def test_a_partition_marked_down_in_one_worker_shows_as_down_in_the_merge() -> None:
    one, two = Metrics.create(), Metrics.create()
    one.partition_available.labels("tp2").set(1)
    two.partition_available.labels("tp2").set(0)
    one.table_age.set(3)
    two.table_age.set(40)
    merged = metrics_workers.merge([metrics_workers.families(one, []), metrics_workers.families(two, [])])
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for m in merged for s in m.samples}
    assert values[("partition_proxy_partition_available", (("partition", "tp2"),))] == 0
    assert values[("partition_proxy_resource_version_table_age_seconds", ())] == 40


def test_asyncio_tasks_of_the_workers_add_up_in_the_merge() -> None:
    one, two = Metrics.create(), Metrics.create()
    one.tasks.set(120)
    two.tasks.set(80)
    merged = metrics_workers.merge([metrics_workers.families(one, []), metrics_workers.families(two, [])])
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for m in merged for s in m.samples}
    assert values[("partition_proxy_asyncio_tasks", ())] == 200


async def test_a_scrape_asks_the_other_workers_over_their_sockets_and_leaves_out_one_that_is_gone(tmp_path: Path) -> None:
    mine, other = Metrics.create(workers_dir=str(tmp_path)), Metrics.create(workers_dir=str(tmp_path))
    mine.reloads.labels("applied").inc()
    other.reloads.labels("applied").inc(2)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(orjson.dumps(metrics_workers.families(other, [])))
        await writer.drain()
        writer.close()

    own = await metrics_workers.serve(mine, list, str(tmp_path))
    peer = await asyncio.start_unix_server(answer, path=str(tmp_path / "worker-999999.sock"))
    (tmp_path / "worker-999998.sock").touch()  # a worker that died: nothing listens there
    try:
        text = (await metrics_workers.exposition(mine, [], str(tmp_path))).decode()
    finally:
        for server in (own, peer):
            server.close()
            await server.wait_closed()
    assert 'partition_proxy_partition_set_reloads_total{result="applied"} 3.0' in text


def test_a_retired_partition_leaves_partition_available_instead_of_staying_down_for_good() -> None:
    metrics = Metrics.create()
    clients = {"tp1": SimpleNamespace(is_marked_down=False, connections=3, idle_connections=2),
               "rp3": SimpleNamespace(is_marked_down=True, connections=0, idle_connections=0)}
    ctx = SimpleNamespace(clients=clients, rv=SimpleNamespace(read_at=1.0))
    _read_health(ctx, metrics)  # type: ignore[arg-type]
    assert _sample(metrics, "partition_proxy_partition_available", partition="rp3") == 0
    assert _sample(metrics, "partition_proxy_partition_available", partition="tp1") == 1
    del clients["rp3"]  # retired: proxy.app.ProxyApp.reconfigure pops its client
    _read_health(ctx, metrics)  # type: ignore[arg-type]
    assert _sample(metrics, "partition_proxy_partition_available", partition="rp3") is None
    assert _sample(metrics, "partition_proxy_partition_available", partition="tp1") == 1
    assert _sample(metrics, "partition_proxy_partition_connections", partition="rp3", state="idle") is None


def test_connections_to_each_partition_are_counted_idle_and_busy() -> None:
    metrics = Metrics.create()
    clients = {"tp1": SimpleNamespace(is_marked_down=False, connections=5, idle_connections=2)}
    _read_health(SimpleNamespace(clients=clients, rv=SimpleNamespace(read_at=1.0)), metrics)  # type: ignore[arg-type]
    assert _sample(metrics, "partition_proxy_partition_connections", partition="tp1", state="idle") == 2
    assert _sample(metrics, "partition_proxy_partition_connections", partition="tp1", state="busy") == 3
