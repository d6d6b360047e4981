"""The sizing model (proxy/sizing.py): every coefficient is the figure of the committed benchmark
run it names, and the model predicts the measured points it was not fitted on within +-20 %
(docs/sizing.md, "The model")."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from proxy import sizing
from proxy.clients import transport
from proxy.cli import main

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
MIB = 1024 * 1024
TOLERANCE = 0.20  # issue 28: the model within +-20 % of every measured point it is validated on


def _result(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((RESULTS / name).read_text())
    return doc


# `bench.fleet --kubelets 500,1000,1500,2000,2500 --sides proxy --no-storm --duration 60`, twice
# on one day: one ladder fits the kubelet coefficients (proxy/sizing.py), the other validates them
FITTED_LADDER = "fleet-ladder-8aa2ea9.json"
VALIDATION_LADDER = "fleet-ladder-8aa2ea9-b.json"
# the same command with `--workers 2` (every worker caches every node; a supervisor)
TWO_WORKERS_LADDER = "fleet-ladder-2workers-0eaeb08.json"
TWO_WORKERS_LADDER_HEAVY_SUPERVISOR = "fleet-ladder-2workers-db274ce.json"
TWO_WORKERS_LADDER_AFTER_THE_LINE = "fleet-ladder-2workers-5642c78.json"  # run after the line was drawn
# `bench.fleet --kubelets 5000 --ramp 50 --sides proxy --no-storm --duration 60`, twice: the replica
# the Arktos predictions assume (its CPU is over-predicted by 36-37 %, docs/sizing.md, "The model")
FIVE_THOUSAND = ("fleet-5000-ramp50-ef9e036.json", "fleet-5000-ramp50-dcee043.json")


def _ladder_steps(name: str) -> dict[int, dict[str, Any]]:
    """Kubelets -> the proxy side's figures, for the steps the proxy served."""
    return {s["kubelets"]: s["proxy"]["server_figures"] for s in _result(name)["steps"]
            if "server_figures" in s.get("proxy", {})}


def _fleet_rss_mib(kubelets: int, workers: int = 1) -> float:
    """The model's RSS of a fleet step's replica: its kubelets' nodes cached, no pods, no
    control plane (bench.fleet runs none)."""
    return sizing.replica_memory_bytes(kubelets, 0, kubelets, workers=workers, control_plane=False) / MIB


def _density_step(name: str) -> dict[str, Any]:
    return _result(name)["steps"][0]


def test_memory_coefficients_are_the_figures_of_the_runs_they_name() -> None:
    nodes = _result("cache_memory.json")["result"]
    assert sizing.BASE_BYTES == pytest.approx(nodes["proxy_all"]["rss_before_mib"] * MIB, abs=1)
    assert sizing.NODE_BYTES == (nodes["proxy_all"]["rss_growth_per_object_bytes"]
                                 + nodes["proxy_all_protobuf_twin"]["rss_growth_per_object_bytes"])
    assert sizing.LEASE_BYTES == nodes["proxy_leases"]["rss_growth_per_object_bytes"]  # a node-leases cache has no twin
    pods = _result("cache_memory-pods.json")["result"]["pods"]
    assert sizing.POD_BYTES == pods["rss_growth_per_pod_json_and_twin_bytes"]
    control_plane = _density_step("density.json")["proxy"]["proxy_rss_mib"]["before_nodes"] * MIB - sizing.BASE_BYTES
    assert sizing.CONTROL_PLANE_BYTES == pytest.approx(control_plane, abs=1)
    assert sizing.MAX_IDLE_PER_ENDPOINT == transport.MAX_IDLE_PER_ENDPOINT


def test_kubelet_coefficients_are_read_from_every_step_of_the_ladder_they_name() -> None:
    steps = _ladder_steps(FITTED_LADDER)
    kubelets = sum(steps)
    assert kubelets >= 7500, steps.keys()  # 500 to 2,500 kubelets
    assert sizing.KUBELET_BYTES == round(sum(f["rss_growth_bytes"] for f in steps.values()) / kubelets)
    # CPU per kubelet-second = KUBELET_CPU_US_PER_S + WORKER_FLEET_CPU_US_PER_S / kubelets, least squares
    line = statistics.linear_regression([1 / n for n in steps], [f["cpu_us_per_kubelet_s"] for f in steps.values()])
    assert sizing.KUBELET_CPU_US_PER_S == pytest.approx(line.intercept, abs=0.005)
    assert sizing.WORKER_FLEET_CPU_US_PER_S == pytest.approx(line.slope, abs=0.5)
    for n, figures in steps.items():  # the line reads each step it was drawn through within 8 %
        assert sizing.kubelet_cores(n) == pytest.approx(n * figures["cpu_us_per_kubelet_s"] / 1e6, rel=0.08), n


def test_workers_share_the_kubelets_and_each_pays_the_fixed_part() -> None:
    assert sizing.kubelet_cores(0) == 0
    assert sizing.kubelet_cores(1000, workers=2) == pytest.approx(
        2 * sizing.kubelet_cores(500), abs=1e-9)
    assert sizing.kubelet_cores(1, workers=4) == sizing.kubelet_cores(1)  # idle workers pay nothing


def test_cache_event_coefficients_are_the_proxys_cpu_while_writes_went_straight_to_the_partition() -> None:
    def per_write_us(name: str, op: str) -> float:
        cases = {c["op"]: c for c in _result(name)["cases"]}
        idle_ms = cases["get"]["proxy_while_direct"]["cpu_per_direct_request_ms"]
        return float((cases[op]["proxy_while_direct"]["cpu_per_direct_request_ms"] - idle_ms) * 1000)

    # node-leases without a protobuf twin (as `size --node-leases-cache` counts it), pods with one
    assert sizing.LEASE_EVENT_CPU_US == pytest.approx(per_write_us("routed_requests-twins-e0038e0.json", "renew-lease"), abs=0.5)
    assert sizing.STATUS_EVENT_CPU_US == pytest.approx(per_write_us("routed_requests-twins-e0038e0.json", "patch-status"), abs=0.5)


def test_every_worker_pays_every_other_nodes_events() -> None:
    assert sizing.cache_event_cores(nodes=1000, kubelets=1000) == 0  # one worker serving every kubelet: in the fitted figure
    one = sizing.cache_event_cores(nodes=50_000, kubelets=5000)
    assert one == pytest.approx(45_000 * sizing.STATUS_EVENT_CPU_US / 60 / 1e6)
    with_leases = sizing.cache_event_cores(nodes=50_000, kubelets=5000, node_leases_cache=True)
    assert with_leases == pytest.approx(45_000 * (sizing.LEASE_EVENT_CPU_US / 10 + sizing.STATUS_EVENT_CPU_US / 60) / 1e6)
    assert sizing.cache_event_cores(nodes=50_000, kubelets=5000, workers=2) > 2 * one  # a second worker pays them all
    for leases in (False, True):
        big = sizing.estimate(sizing.Federation(nodes=50_000, pods=0, tenant_partitions=5, resource_partitions=5,
                                                pods_started_per_second=0, node_leases_cache=leases))
        small = sizing.estimate(sizing.Federation(nodes=10_000, pods=0, tenant_partitions=5, resource_partitions=5,
                                                  pods_started_per_second=0, node_leases_cache=leases))
        assert big.kubelets_per_replica == small.kubelets_per_replica == 5000
        assert big.cores_per_replica - small.cores_per_replica == pytest.approx(
            sizing.cache_event_cores(50_000, 5000, node_leases_cache=leases)
            - sizing.cache_event_cores(10_000, 5000, node_leases_cache=leases), abs=0.002)
        assert not any("other nodes'" in w for w in small.warnings)
        # a node-leases cache costs every worker half a core at 50,000 nodes; status updates alone do not
        assert any("other nodes' Lease renewals" in w for w in big.warnings) is leases


def test_a_node_leases_cache_adds_its_leases_and_a_watch_per_worker_on_each_resource_partition() -> None:
    without = sizing.estimate(sizing.Federation(nodes=50_000, pods=0, tenant_partitions=5, resource_partitions=5))
    with_ = sizing.estimate(sizing.Federation(nodes=50_000, pods=0, tenant_partitions=5, resource_partitions=5,
                                              node_leases_cache=True))
    assert with_.memory_per_replica_mib - without.memory_per_replica_mib == pytest.approx(
        50_000 * sizing.LEASE_BYTES / MIB, abs=0.2)
    assert with_.upstream_watches_per_resource_partition - without.upstream_watches_per_resource_partition == with_.replicas
    assert with_.cores_per_replica > without.cores_per_replica


def test_pod_start_cpu_solves_the_two_density_runs() -> None:
    for name in ("density.json", "density-5000.json"):
        step = _density_step(name)
        proxy = step["proxy"]
        modelled = (step["nodes"] * proxy["leases"]["window_s"] * sizing.KWOK_NODE_CPU_US_PER_S / 1e6
                    + proxy["startup"]["pods"] * sizing.POD_START_CPU_S)
        assert modelled == pytest.approx(proxy["cpu_during_pods"]["proxy"]["cpu_s"], rel=0.01), name


@pytest.mark.parametrize("name", ["density.json", "density-5000.json", "density-10000.json"])
def test_memory_of_nodes_cached_predicts_the_density_runs(name: str) -> None:
    """Not fitted on: the proxy's RSS once the nodes and their Leases are cached (those runs had a
    node-leases cache, a default until 2026-11-28)."""
    step = _density_step(name)
    predicted = sizing.replica_memory_bytes(step["nodes"], 0, 0, node_leases_cache=True) / MIB  # the default then
    measured = step["proxy"]["proxy_rss_mib"]["after_nodes"]
    assert abs(predicted / measured - 1) <= TOLERANCE, (predicted, measured)


def test_the_other_ladders_memory_is_predicted_within_the_tolerance() -> None:
    """The proxy's RSS serving each step's kubelets, their nodes cached too."""
    steps = _ladder_steps(VALIDATION_LADDER)
    assert len(steps) == 5, steps.keys()
    for kubelets, figures in steps.items():
        predicted = _fleet_rss_mib(kubelets)
        assert abs(predicted / figures["rss_after_mib"] - 1) <= TOLERANCE, (kubelets, predicted, figures)


def test_the_other_ladders_cpu_is_predicted_within_the_tolerance() -> None:
    steps = _ladder_steps(VALIDATION_LADDER)
    assert len(steps) == 5, steps.keys()
    for kubelets, figures in steps.items():
        predicted = sizing.replica_cores(kubelets, 0)
        measured = kubelets * figures["cpu_us_per_kubelet_s"] / 1e6
        assert abs(predicted / measured - 1) <= TOLERANCE, (kubelets, predicted, measured)


@pytest.mark.parametrize("name", FIVE_THOUSAND)
def test_the_memory_of_a_replica_serving_5000_kubelets_is_predicted_within_the_tolerance(name: str) -> None:
    [(kubelets, figures)] = _ladder_steps(name).items()
    assert kubelets == 5000
    predicted = _fleet_rss_mib(kubelets)
    assert abs(predicted / figures["rss_after_mib"] - 1) <= TOLERANCE, (predicted, figures)


def test_the_supervisor_coefficient_is_the_figure_of_the_run_it_names() -> None:
    [step] = [s for s in _result(TWO_WORKERS_LADDER)["steps"] if s["kubelets"] == 1000]
    assert sizing.SUPERVISOR_BYTES == round(step["proxy"]["server_figures"]["rss_by_process_mib"][0] * MIB)


@pytest.mark.parametrize("name", [TWO_WORKERS_LADDER, TWO_WORKERS_LADDER_HEAVY_SUPERVISOR, TWO_WORKERS_LADDER_AFTER_THE_LINE])
def test_a_two_worker_replica_is_predicted_within_the_tolerance(name: str) -> None:
    """Not fitted on, but for the supervisor's own RSS: each worker's copy of the caches, the
    supervisor and the kubelets; each worker's CPU for its half of the kubelets and for the other
    half's node events. The earlier run's supervisor imported the whole proxy (92 MiB, before
    bedcfc1), so its memory is not judged."""
    steps = _ladder_steps(name)
    assert len(steps) == 2, steps.keys()
    for kubelets, figures in steps.items():
        if name != TWO_WORKERS_LADDER_HEAVY_SUPERVISOR:
            memory = _fleet_rss_mib(kubelets, workers=2)
            assert abs(memory / figures["rss_after_mib"] - 1) <= TOLERANCE, (kubelets, memory, figures)
        cores = sizing.replica_cores(kubelets, 0, workers=2)
        measured = kubelets * figures["cpu_us_per_kubelet_s"] / 1e6
        assert abs(cores / measured - 1) <= TOLERANCE, (kubelets, cores, measured)


def test_upstream_watches_do_not_grow_with_kubelets_and_replicas_do() -> None:
    few = sizing.estimate(sizing.Federation(nodes=10_000, pods=300_000, tenant_partitions=2, resource_partitions=2))
    many = sizing.estimate(sizing.Federation(nodes=100_000, pods=3_000_000, tenant_partitions=2, resource_partitions=2))
    assert few.replicas == 2 and many.replicas == 20
    assert few.kubelets_per_replica == many.kubelets_per_replica == 5000
    per_replica = few.upstream_watches_per_tenant_partition / few.replicas
    assert many.upstream_watches_per_tenant_partition / many.replicas == per_replica
    assert many.memory_per_replica_mib > few.memory_per_replica_mib  # every replica caches every pod


def test_more_partitions_than_one_rv_space_holds_and_a_busy_replica_are_reported() -> None:
    wide = sizing.estimate(sizing.Federation(nodes=100_000, pods=0, tenant_partitions=10, resource_partitions=10))
    assert sum("resourceVersion space" in w for w in wide.warnings) == 2
    busy = sizing.estimate(sizing.Federation(nodes=100_000, pods=0, tenant_partitions=2, resource_partitions=2,
                                             kubelets_per_replica=50_000))
    assert any("raise workers" in w for w in busy.warnings)
    with pytest.raises(ValueError):
        sizing.estimate(sizing.Federation(nodes=1, pods=0, tenant_partitions=0, resource_partitions=1))


def test_the_size_command_prints_the_estimate_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["size", "--nodes", "50000", "--pods", "1500000", "--tenant-partitions", "5", "--resource-partitions", "5"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == sizing.estimate(sizing.Federation(50_000, 1_500_000, 5, 5)).as_dict()
