"""The pure part of `bench/fleet.py`: its parameters, the node names and their placement, the
proxy's config for N kubelets, /proc/net/tcp and /metrics parsing, and the per-kubelet figures
of a side. No federation: snapshots and /proc texts are written by hand in the shapes Linux and
kube-apiserver 1.36 produce."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import fleet
from bench.fleet import (
    PEER,
    Params,
    Refused,
    Snapshot,
    connection_figures,
    count_established,
    counts_delta,
    cpu_us_per_kubelet_second,
    fleet_node_names,
    parse_args,
    partition_figures,
    per_kubelet,
    placement,
    proxy_extra,
    request_total,
    server_figures,
    validate,
    watch_figures,
)
from hack.procs import TcpSocket, parse_proc_net_tcp

# /proc/net/tcp as Linux writes it: a header, then one line per socket (addresses little-endian
# hex IPv4 and hex port, st in hex, inode the 10th field).
PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1A0B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1A0B 0100007F:C350 01 00000000:00000000 02:000A7C6B 00000000     0        0 1002 2 0000000000000000 20 4 30 10 -1
   2: 0100007F:C350 0100007F:1A0B 01 00000000:00000000 02:000A7C6B 00000000     0        0 1003 2 0000000000000000 20 4 30 10 -1
   3: 0100007F:C351 0100007F:2710 01 00000000:00000000 02:000A7C6B 00000000     0        0 1004 2 0000000000000000 20 4 30 10 -1
   4: 0100007F:C352 0100007F:2710 06 00000000:00000000 03:00000F9B 00000000     0        0 0 3 0000000000000000
"""

METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="authorization.k8s.io",resource="subjectaccessreviews",scope="cluster",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="namespace",subresource="",verb="PUT",version="v1"} 120
apiserver_request_total{code="409",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="namespace",subresource="",verb="PUT",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="status",verb="PATCH",version="v1"} 12
"""


def snap(t: float, *, cpu: float = 0.0, rss: int = 0, apiserver_cpu: float = 0.0, apiserver_rss: int = 0,
         downstream: int = 0, upstream: dict[str, int] | None = None, watches: dict[str, dict[str, int]] | None = None,
         requests: dict[str, int] | None = None, sars: int = 0) -> Snapshot:
    """A side's snapshot with one partition, tp1 (sizes in bytes, CPU in seconds)."""
    return Snapshot(t=t, server_cpu=cpu, server_rss=rss, apiserver_cpu={"tp1": apiserver_cpu},
                    apiserver_rss={"tp1": apiserver_rss}, fleet_cpu=None, fleet_rss=None, downstream=downstream,
                    upstream=upstream or {}, watches=watches or {"tp1": {}}, requests={"tp1": requests or {}},
                    sars={"tp1": sars})


def test_proc_net_tcp_lines_are_parsed_into_ports_state_and_inode() -> None:
    sockets = parse_proc_net_tcp(PROC_NET_TCP)
    assert sockets[0] == TcpSocket(local_port=0x1A0B, remote_port=0, state=0x0A, inode=1001)
    assert sockets[2] == TcpSocket(local_port=0xC350, remote_port=0x1A0B, state=1, inode=1003)
    assert len(sockets) == 5


@pytest.mark.parametrize(("kwargs", "count"), [
    ({"local_port": 0x1A0B}, 1),               # the server's side of one connection (the listener is not ESTABLISHED)
    ({"remote_port": 0x2710}, 1),              # TIME_WAIT (06) does not count
    ({"remote_port": 0x2710, "inodes": {1004}}, 1),
    ({"remote_port": 0x2710, "inodes": {999}}, 0),  # a socket of another process
    ({}, 3),
])
def test_established_connections_are_counted_by_port_and_owner(kwargs: dict[str, object], count: int) -> None:
    assert count_established(parse_proc_net_tcp(PROC_NET_TCP), **kwargs) == count  # type: ignore[arg-type]


def test_request_totals_are_summed_per_verb_over_codes_and_filtered_by_resource() -> None:
    assert request_total(METRICS) == {"PATCH": 12, "POST": 7, "PUT": 123}
    assert request_total(METRICS, resource="subjectaccessreviews") == {"POST": 7}
    assert request_total(METRICS, resource="pods") == {}


def test_counts_delta_leaves_out_what_did_not_change() -> None:
    assert counts_delta({"pods": 5, "nodes": 2, "services": 1}, {"pods": 5, "nodes": 1, "leases": 3}) == \
        {"leases": -3, "nodes": 1, "services": 1}


@pytest.mark.parametrize(("cpu_s", "window_s", "kubelets", "us"), [
    (0.2, 10.0, 1000, 20.0),     # 20 ms/s over 1,000 kubelets: 20 us per kubelet-second
    (1.0, 20.0, 100, 500.0),
    (1.0, 0.0, 100, None),
    (1.0, 10.0, 0, None),
])
def test_cpu_per_kubelet_second_is_in_microseconds(cpu_s: float, window_s: float, kubelets: int, us: float | None) -> None:
    assert cpu_us_per_kubelet_second(cpu_s, window_s, kubelets) == us


def test_per_kubelet_without_kubelets_is_none() -> None:
    assert per_kubelet(1000, 0) is None
    assert per_kubelet(1001, 2, 0) == 500.0


def test_node_names_alternate_between_the_resource_partitions_and_the_peer_holds_all() -> None:
    names = fleet_node_names(5)
    assert names == ["rp1-fleet-00000", "rp2-fleet-00001", "rp1-fleet-00002", "rp2-fleet-00003", "rp1-fleet-00004"]
    where = placement(names)
    assert where["rp1"] == names[0::2] and where["rp2"] == names[1::2]
    assert where[PEER] == names


@pytest.mark.parametrize(("kubelets", "cap"), [(100, 50_000), (5000, 50_000), (10_000, 100_000), (50_000, 500_000)])
def test_the_proxys_cap_of_long_running_requests_fits_every_kubelets_watches_twice(kubelets: int, cap: int) -> None:
    assert proxy_extra(kubelets) == {"failure": {"max_inflight_long_running": cap, "shutdown_drain_seconds": 0}}
    assert cap >= 2 * fleet.WATCHES_PER_KUBELET * kubelets


def test_the_command_line_gives_the_ladder_and_the_sides() -> None:
    p = parse_args(["--kubelets", "1000,5000", "--sides", "proxy", "--duration", "30", "--no-storm"])
    assert p.steps == (1000, 5000) and p.sides == ("proxy",) and p.duration == 30 and not p.storm
    assert p.lease_interval == 10 and p.status_interval == 60 and p.ramp == 200


@pytest.mark.parametrize(("argv", "message"), [
    (["--kubelets", "ten"], "counts separated by commas"),
    (["--kubelets", "0"], "positive counts"),
    (["--sides", "proxy,proxy"], "each once"),
    (["--sides", "peer"], "proxy and/or direct"),
    (["--duration", "0"], "must be positive"),
    (["--status-interval", "-1"], "not negative"),
    (["--workers", "0"], "at least 1"),
    (["--workers", "2"], "add --no-storm"),
    (["--workers", "2", "--no-storm", "--trace-memory"], "read one process"),
])
def test_impossible_parameters_are_refused_in_one_line(argv: list[str], message: str) -> None:
    with pytest.raises(Refused, match=message):
        parse_args(argv)


def test_several_workers_are_measured_in_the_steady_state_and_each_is_reached_by_new_connections() -> None:
    assert parse_args(["--workers", "2", "--no-storm"]).workers == 2
    assert parse_args([]).workers == 1
    assert fleet.answers_per_worker_set(1) == 1  # one worker: any answer is its own
    # 16 new connections: a given one of 2 workers misses them all with a chance of 2 ** -16
    assert fleet.answers_per_worker_set(2) == 2 * fleet.CONNECTIONS_PER_WORKER == 16


def test_a_status_interval_of_zero_turns_the_patches_off_and_is_accepted() -> None:
    validate(Params(steps=(10,), sides=("direct",), duration=1, ramp=1, status_interval=0, lease_interval=10, storm=False,
                    content_type="protobuf", keep=False))


def test_server_figures_are_per_kubelet_and_net_of_the_idle_servers_cpu() -> None:
    base = snap(0.0, cpu=0.0, rss=100 * 2**20)
    s0, s1 = snap(20.0, cpu=10.0), snap(30.0, cpu=12.5, rss=100 * 2**20 + 64 * 1024 * 1000)
    out = server_figures(1000, base, s0, s1, {"server": 0.05})
    assert out["rss_per_kubelet_bytes"] == 64 * 1024
    # 2.5 s of CPU over 10 s, 0.5 s of which the idle server spends anyway: 200 us per kubelet-second
    assert out["cpu_us_per_kubelet_s"] == 200.0
    assert out["cpu_us_per_kubelet_s_gross"] == 250.0


def test_connection_figures_count_what_the_fleet_added_per_partition() -> None:
    base = snap(0.0, downstream=1, upstream={"tp1": 4, "rp1": 4})
    s1 = snap(30.0, downstream=201, upstream={"tp1": 404, "rp1": 6})
    out = connection_figures(200, "proxy", base, s1)
    assert out["downstream_added_per_kubelet"] == 1.0
    assert out["upstream_added"] == {"tp1": 400, "rp1": 2}
    assert out["upstream_added_per_kubelet"] == {"tp1": 2.0, "rp1": 0.01}
    assert out["upstream_added_total_per_kubelet"] == 2.01
    assert "upstream" not in connection_figures(200, "direct", base, s1)


def test_watch_figures_count_the_watches_added_by_resource() -> None:
    base = snap(0.0, watches={"tp1": {"pods": 3, "configmaps": 1}})
    s1 = snap(30.0, watches={"tp1": {"pods": 3, "configmaps": 1, "csidrivers.storage.k8s.io": 100,
                                     "runtimeclasses.node.k8s.io": 100}})
    out = watch_figures(100, base, s1)
    assert out["added_by_resource"] == {"tp1": {"csidrivers.storage.k8s.io": 100, "runtimeclasses.node.k8s.io": 100}}
    assert out["added_per_kubelet"] == {"tp1": 2.0}
    assert out["per_partition"] == {"tp1": 204}


def test_partition_figures_give_requests_per_second_and_subjectaccessreviews_over_the_window() -> None:
    base = snap(0.0, apiserver_rss=200 * 2**20)
    s0 = snap(10.0, apiserver_cpu=5.0, requests={"PUT": 100, "GET": 10}, sars=3)
    s1 = snap(20.0, apiserver_cpu=6.0, apiserver_rss=210 * 2**20, requests={"PUT": 200, "GET": 10}, sars=5)
    out = partition_figures(100, base, s0, s1, {"tp1": 0.02})["tp1"]
    assert out["requests_per_s"] == {"PUT": 10.0}
    assert out["subjectaccessreviews_window"] == 2
    assert out["rss_growth_mib"] == 10.0
    assert out["cpu_us_per_kubelet_s"] == 800.0  # (1.0 - 0.2) s / 10 s / 100 kubelets


def test_memory_growth_is_per_kubelet_and_lists_the_sites_that_grew_most() -> None:
    before = {"rss_bytes": 100_000, "traced_bytes": 50_000,
              "sites": [{"site": "a.py:1", "bytes": 10_000, "count": 1}, {"site": "b.py:2", "bytes": 5_000, "count": 1}]}
    after = {"rss_bytes": 300_000, "traced_bytes": 150_000,
             "sites": [{"site": "b.py:2", "bytes": 85_000, "count": 9}, {"site": "c.py:3", "bytes": 20_000, "count": 4},
                       {"site": "a.py:1", "bytes": 10_000, "count": 1}]}
    got = fleet.memory_growth(10, before, after)
    assert got["rss_bytes"] == 20_000 and got["traced_bytes"] == 10_000 and got["untraced_bytes"] == 10_000
    assert got["sites"] == [{"site": "b.py:2", "bytes": 8_000}, {"site": "c.py:3", "bytes": 2_000}, {"site": "a.py:1", "bytes": 0}]


def test_a_profile_splits_the_gross_cpu_per_kubelet_second_over_the_busy_samples(tmp_path: Path) -> None:
    raw = tmp_path / "proxy-10.raw"
    raw.write_text(
        "process 1;Runner.run (asyncio/runners.py:118);Reflector._on_event (proxy/cache/reflector.py:190) 30\n"
        "process 1;Runner.run (asyncio/runners.py:118);SSL_read (libssl.so.3) 10\n"
        "process 1;Runner.run (asyncio/runners.py:118);epoll_wait (libc.so.6) 60\n"
    )
    parts = fleet.profile_parts(raw, 80.0)
    assert parts["us_per_kubelet_s"] == {"watch caches and reflectors": 60.0, "TLS": 20.0}
    assert parts["samples"]["idle (epoll)"] == 60


def test_profiling_without_py_spy_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(fleet, "PY_SPY", tmp_path / "py-spy")
    with pytest.raises(Refused, match="--profile needs py-spy"):
        parse_args(["--profile"])
