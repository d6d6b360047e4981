"""Markdown tables from the benchmarks' JSON files (.local/bench/*.json).

Run: `python -m bench.report [FILE.json ...] [--out report.md]` (default: every JSON file in
.local/bench). Unknown documents are listed, not rendered.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.common import OUT_DIR

SLI_NAME = "apiserver_request_sli_duration_seconds"


def _f(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _x(value: Any) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _table(header: list[str], rows: Iterable[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _heading(doc: dict[str, Any], path: Path | None = None) -> str:
    host = doc.get("host", {})
    git = host.get("git", {})
    dirty = f", {len(git.get('uncommitted_source_files', []))} uncommitted source files" if git.get("uncommitted_source_files") else ""
    return (
        f"### {doc['benchmark']}{f' — {path.name}' if path else ''} ({doc.get('started', '')}, {host.get('cpus')} CPUs, "
        f"commit {git.get('commit', '?')}{dirty}, load {_f(host.get('loadavg_at_start'), 2)} at start, {doc.get('total_seconds', '?')} s)\n\n"
        f"Peer: {doc.get('peer', '')}\n"
    )


def render_list_nodes(doc: dict[str, Any], path: Path | None = None) -> str:
    rows = []
    for c in doc["cases"]:
        p, d = c["proxy"], c["direct"]
        rows.append([
            c["case"],
            "yes" if c["same_names"] else "**NO**",
            f"{p['body_bytes'] / 2**20:.1f} / {d['body_bytes'] / 2**20:.1f}",
            f"{_f(p['latency']['median_ms'])} / {_f(d['latency']['median_ms'])}",
            _x(c["ratio_median_proxy_over_direct"]),
            f"{_f(p['latency']['p99_ms'])} / {_f(d['latency']['p99_ms'])}",
            _x(c["ratio_p99_proxy_over_direct"]),
            f"{_f(p['per_list_cpu_s'], 3)} / {_f(d['per_list_cpu_s'], 3)}",
            _x(c["ratio_cpu_per_list_proxy_over_direct"]),
            f"{_f(p['concurrent']['rss_peak_growth_mib'])} / {_f(d['concurrent']['rss_peak_growth_mib'])}",
            f"{_f(p['concurrent']['lists_per_s'])} / {_f(d['concurrent']['lists_per_s'])}",
        ])
    header = [
        "case", "same names", "body MiB (proxy / direct)", "median ms", "ratio", "p99 ms", "ratio",
        "CPU s per LIST", "ratio", f"peak RSS growth MiB ({doc['params'].get('concurrency', 8)} concurrent)",
        "LISTs/s concurrent",
    ]
    sizes = doc.get("node_sizes", {})
    size_line = "; ".join(
        f"{k}: built {v['built_bytes']:,} B, in apiserver {v['apiserver_bytes']:,} B, cached by the proxy {v['proxy_cached_bytes']:,} B"
        for k, v in sizes.items()
    )
    return _heading(doc, path) + f"\nNode compact JSON sizes: {size_line}\n\n" + _table(header, rows) + "\n"


def render_watch_fanout(doc: dict[str, Any], path: Path | None = None) -> str:
    rows = []
    for c in doc["cases"]:
        p, d = c["proxy"], c["direct"]
        rows.append([
            _f(c["watchers"]),
            f"{_f(p['watchers_opened'])} / {_f(d['watchers_opened'])}",
            f"{_f(p['memory_per_watcher_bytes'])} / {_f(d['memory_per_watcher_bytes'])}",
            _x(c["ratio_memory_per_watcher_proxy_over_direct"]),
            f"{_f(p['open_cpu_per_watcher_ms'], 2)} / {_f(d['open_cpu_per_watcher_ms'], 2)}",
            f"{_f(p['delivery_p50_ms'])} / {_f(d['delivery_p50_ms'])}",
            _x(c["ratio_delivery_p50_proxy_over_direct"]),
            f"{_f(p['delivery'].get('p99_ms'))} / {_f(d['delivery'].get('p99_ms'))}",
            _x(c["ratio_delivery_p99_proxy_over_direct"]),
            f"{_f(p['patch_round_trip'].get('median_ms'))} / {_f(d['patch_round_trip'].get('median_ms'))}",
            f"{_f(p['deliveries_received'])}/{_f(p['deliveries_expected'])} / {_f(d['deliveries_received'])}/{_f(d['deliveries_expected'])}",
            c.get("note", ""),
        ])
    header = [
        "watchers", "opened (proxy / direct)", "bytes per idle watcher", "ratio", "open CPU ms per watcher",
        "delivery p50 ms", "ratio", "delivery p99 ms", "ratio", "PATCH round trip p50 ms (not through the proxy)",
        "deliveries", "note",
    ]
    return _heading(doc, path) + "\n" + _table(header, rows) + "\n" + _stalls(doc["cases"], "watchers")


def _stalls(cases: list[dict[str, Any]], key: str) -> str:
    """One line on the proxy's loop lag and full collections per case (when recorded): over the
    whole side, and over the delivery window alone when the benchmark scraped it."""
    lines = []
    for field, what in (("proxy_stalls", "whole side"), ("proxy_stalls_delivery", "delivery window")):
        parts = []
        for c in cases:
            st = c["proxy"].get(field)
            if not st:
                continue
            lag, gc2 = st.get("loop_lag") or {}, st.get("gc_pause_gen2") or {}
            parts.append(f"{c[key]:,} {key}: loop lag p99 <= {lag.get('p99_le_s')} s, {lag.get('over_50ms')} of {lag.get('count')} "
                         f"probes over 50 ms; {gc2.get('count')} full collections, {gc2.get('over_50ms')} over 50 ms "
                         f"(p99 <= {gc2.get('p99_le_s')} s)")
        if parts:
            lines.append(f"\nProxy stalls ({what}): " + "; ".join(parts) + "\n")
    return "".join(lines)


def render_cache_memory(doc: dict[str, Any], path: Path | None = None) -> str:
    r = doc["result"]
    def cache_row(label: str, p: dict[str, Any]) -> list[str]:  # bench.cache_memory.cache_figures
        return [label, _f(p["objects"]), _f(p["cache_bytes_per_object"]), _f(p["rss_growth_mib"]),
                _f(p["rss_growth_per_object_bytes"]), _f(p["rss_growth_per_cache_byte"], 2), _f(p["rss_peak_hwm_mib"])]

    rows = [cache_row("proxy, all nodes", r["proxy_all"]), cache_row("proxy, `bench-keep=yes` (1 in 10)", r["proxy_selected"])]
    if twin := r.get("proxy_all_protobuf_twin"):
        rows.append(cache_row("proxy, all nodes: their protobuf twin (on top of the row above)", twin))
    if leases := r.get("proxy_leases"):
        rows.append(cache_row("proxy, node Leases (one per node)", leases))
        rows.append(cache_row("proxy, node Leases: their protobuf twin", leases["protobuf_twin"]))
    late = r["proxy_all_started_after"]
    rows.append([
        "proxy, all nodes, started after they exist", _f(late["objects"]), "", _f(late["rss_growth_vs_empty_baseline_mib"]),
        _f(late["rss_growth_per_object_bytes"]), "", _f(late["rss_peak_hwm_mib"]),
    ])
    a = r["direct_apiserver"]
    heap = a.get("go_heap_inuse_growth_per_object_bytes")
    rows.append([
        f"direct kube-apiserver ({a['partition']})", _f(a["objects"]), "", _f(a["rss_growth_mib"]),
        f"{_f(a['rss_growth_per_object_bytes'])} (Go heap in use: {_f(heap)})", "", "",
    ])
    if leases:
        rows.append([f"direct kube-apiserver ({a['partition']}), node Leases", _f(leases["objects"]), "", "",
                     _f(leases["peer_rss_growth_per_object_bytes"]), "", ""])
    header = ["holder", "objects", "cached bytes per object", "RSS growth MiB", "RSS growth per object (bytes)",
              "RSS growth per cached byte", "peak RSS MiB (VmHWM)"]
    return (
        _heading(doc, path)
        + f"\n{r['nodes']:,} {r['node_kind']} nodes; proxy/direct per-object ratio: "
        + f"{_x(r['ratio_rss_growth_per_object_proxy_all_over_direct'])}; selected/all growth: {_x(r['ratio_rss_growth_selected_over_all'])}\n\n"
        + _table(header, rows)
        + "\n"
    )


def _pair(a: Any, b: Any, digits: int = 1) -> str:
    return f"{_f(a, digits)} / {_f(b, digits)}"


def render_union_watch(doc: dict[str, Any], path: Path | None = None) -> str:
    rows, cpu_rows = [], []
    for c in doc["cases"]:
        p, d, w, hop = c["proxy"], c["direct"], c["writer"], c.get("lag_breakdown", {})
        hop = hop.get("proxy_receive_after_direct_receive", {})
        use = c.get("cpu", {})
        rows.append([
            c["encoding"],
            f"{_f(c['rate'])} / {_f(w.get('achieved_per_s'))}",
            f"{_f(p['delivered'])} / {_f(d['delivered'])} of {_f(p['expected'])}",
            _pair(p["events_per_s"], d["events_per_s"]),
            _x(c["ratio_events_per_s_proxy_over_direct"]),
            _pair(p["lag_p50_ms"], d["lag_p50_ms"]),
            _x(c["ratio_lag_p50_proxy_over_direct"]),
            _pair(p["lag_p99_ms"], d["lag_p99_ms"]),
            _x(c["ratio_lag_p99_proxy_over_direct"]),
            _pair(p["lag_max_ms"], d["lag_max_ms"]),
            _pair(hop.get("p50_ms"), hop.get("p99_ms")),
            _f(p.get("proxy_cpu_ms_per_event"), 3),
            _pair(use.get("proxy", {}).get("mean_cores"), use.get("proxy", {}).get("max_cores"), 2),
            c.get("note", ""),
        ])

        def cpu(*names: str) -> str:
            return _f(round(sum(use.get(n, {}).get("cpu_s") or 0 for n in names), 2), 2)

        def wait(*names: str) -> str:
            return _f(round(sum(use.get(n, {}).get("runqueue_wait_s") or 0 for n in names), 2), 2)

        pw = use.get("proxy", {})
        cpu_rows.append([
            c["run"],
            _f(use.get("machine", {}).get("mean_cores"), 2),
            cpu("proxy"), cpu("tp1_apiserver", "tp2_apiserver"), cpu("tp1_etcd", "tp2_etcd"), cpu("writer"),
            cpu("watcher_proxy", "watcher_direct"), cpu("other_processes"),
            f"{wait('proxy')} ({_f(pw.get('runqueue_wait_per_timeslice_ms'), 3)})",
            wait("tp1_apiserver", "tp2_apiserver"),
            _pair((w.get("patch_round_trip_ms") or {}).get("p50_ms"), (w.get("patch_round_trip_ms") or {}).get("p99_ms")),
        ])
    header = [
        "encoding", "writes/s asked / done", "delivered (proxy / direct)", "events/s (proxy / direct)", "ratio",
        "lag p50 ms", "ratio", "lag p99 ms", "ratio", "lag max ms", "proxy hop p50 / p99 ms",
        "proxy CPU ms per event", "proxy cores mean / busiest s", "note",
    ]
    cpu_header = [
        "step", "machine busy cores", "CPU s: proxy", "apiservers tp1+tp2", "etcd tp1+tp2", "writer", "watchers",
        "other processes", "run-queue wait s: proxy (ms per timeslice)", "apiservers", "PATCH answered ms p50 / p99",
    ]
    targets = "; ".join(
        f"{t['encoding']}: proxy {_f(t['proxy_p99_ms'])} ms / direct {_f(t['direct_p99_ms'])} ms at "
        f"{_f(t['achieved_write_rate'])} writes/s done — {'**met**' if t['met'] else '**not met**'}"
        for t in doc.get("targets", [])
    )
    cost = doc.get("rewrite_cost", {})
    cost_rows = [
        [r["encoding"], r["path"], f"`{r['what']}`", _f(r["us_per_event"], 2), _f(r["baseline_us_per_event"], 2),
         _x(r["ratio_over_baseline"]), _f(r["cores_at_1000_per_s"], 3)]
        for r in cost.get("rows", [])
    ]
    cost_header = ["encoding", "path", "rewrite", "µs per event", "bare read µs (decode only)", "ratio", "cores at 1,000 events/s"]
    capture = doc.get("capture", {})
    sizes = ", ".join(f"{k} {v['events']} × {v['mean_bytes']:,} B" for k, v in capture.items() if isinstance(v, dict))
    return (
        _heading(doc, path)
        + "\nLag = receive time - the write's send time (wall clock, ns, in an annotation). Proxy hop = the proxy watch's "
        + "receive - the direct watch's receive of the same write. Target (issue): union watch lag p99 <= 50 ms at "
        + f"1,000 events/s: {targets or '–'}\n\n"
        + _table(header, rows)
        + "\n\nWhere the CPU went during each step (sampled from /proc; run-queue wait = runnable but not on a CPU):\n\n"
        + _table(cpu_header, cpu_rows)
        + f"\n\nPer-event cost of the rewrite in-process (timeit, min of {doc['params'].get('timeit_repeat')}), "
        + f"{cost.get('source', '')}{f' ({sizes})' if sizes else ''}:\n\n"
        + _table(cost_header, cost_rows)
        + "\n"
    )


def _s(value: Any, digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _ms_bucketed(row: dict[str, Any] | None, q: str) -> str:
    """A latency from the SLI histogram: "< 50" when it falls in the first bucket (0-50 ms)."""
    if not row or row.get(f"{q}_ms") is None:
        return "–"
    if row.get(f"{q}_bucket_le_ms") == 50:
        return "< 50"
    return _f(row[f"{q}_ms"], 0)


def render_density(doc: dict[str, Any], path: Path | None = None) -> str:
    steps = [s for s in doc["steps"] if "proxy" in s and "direct" in s]
    rows, hop_rows, res_rows, api_parts = [], [], [], []
    for s in steps:
        p, d = s["proxy"], s["direct"]
        ps, ds = p["startup"], d["startup"]
        pc, dc = ps["create_to_running"], ds["create_to_running"]
        where = f"{s['nodes']:,} / {s['pods']:,} / {s['rate']:g}"
        rows.append([
            where,
            f"{_f(ps['running'])} / {_f(ds['running'])}",
            f"{_f(ps['failed'])} / {_f(ds['failed'])}",
            _pair(pc.get("p50_s"), dc.get("p50_s"), 2),
            _pair(pc.get("p90_s"), dc.get("p90_s"), 2),
            _pair(pc.get("p99_s"), dc.get("p99_s"), 2),
            _x(s["comparison"].get("create_to_running_p99_ratio")),
            _pair(ps["create_to_scheduled"].get("p99_s"), ds["create_to_scheduled"].get("p99_s"), 2),
            _pair(ps["scheduled_to_running"].get("p99_s"), ds["scheduled_to_running"].get("p99_s"), 2),
            _pair(ps["pods_per_s"], ds["pods_per_s"], 1),
            f"{_f(p['leases']['renewed_during_window'])}/{_f(p['leases']['expected'])} / "
            f"{_f(d['leases']['renewed_during_window'])}/{_f(d['leases']['expected'])}",
            _pair(p["leases"]["max_renew_age_s"], d["leases"]["max_renew_age_s"], 1),
        ])
        for side, x in (("proxy", p), ("direct", d)):
            h = x["hops"]

            def hop(k: str, h: dict[str, Any] = h) -> str:
                return _pair(h[k].get("p50_s"), h[k].get("p99_s"), 3)

            hop_rows.append([where, side, hop("create_answered"), hop("create_to_added_in_partition"),
                             hop("added_to_bound_in_partition"), hop("bound_to_running_in_partition"),
                             hop("running_in_partition_to_client_watch") if side == "proxy" else "(same watch)",
                             _pair(x["startup"]["create_to_running"].get("p50_s"), x["startup"]["create_to_running"].get("p99_s"), 3)])
        cpu = p.get("cpu_during_pods", {})
        dcpu = d.get("cpu_during_pods", {})
        peer_cpu = dcpu.get("direct:rp3-apiserver", {})
        uw, dw = p["upstream_watches"], d["upstream_watches"]
        res_rows.append([
            where,
            f"{_s(cpu.get('proxy', {}).get('mean_cores'))} / {_s(cpu.get('proxy', {}).get('max_cores'))}",
            _pair(cpu.get("machine", {}).get("mean_cores"), dcpu.get("machine", {}).get("mean_cores"), 2),
            _s(peer_cpu.get("mean_cores")),
            f"{_f(p['proxy_rss_mib']['before_nodes'])} / {_f(p['proxy_rss_mib']['after_nodes'])} / {_f(p.get('proxy_peak_rss_mib'))}",
            _f(round(p["proxy_memory_per_node_bytes"] / 1024, 1)) if p.get("proxy_memory_per_node_bytes") is not None else "–",
            _f(round(p["proxy_memory_per_hollow_kubelet_bytes"] / 1024)) if p.get("proxy_memory_per_hollow_kubelet_bytes") is not None else "–",
            f"{_f(uw['added_by_control_plane_total'])} / {_f(dw['added_by_control_plane_total'])}",
            ", ".join(f"{k} {v}" for k, v in uw["added_by_control_plane_per_partition"].items()),
            _f(p.get("proxy_downstream_watches", {}).get("long_running_requests")),
        ])
        pa, da = p.get("api_latency", {}), d.get("api_latency", {})
        keys = sorted(set(pa) | set(da), key=lambda k: -max(pa.get(k, {}).get("count", 0), da.get(k, {}).get("count", 0)))
        api_rows = []
        for k in keys:
            a, b = pa.get(k), da.get(k)
            if max((a or {}).get("count", 0), (b or {}).get("count", 0)) < 5 and not any(
                    r and r.get("slo_met") is False for r in (a, b)):
                continue
            slo = (a or b or {}).get("slo_s")
            met = [r.get("slo_met") for r in (a, b) if r]
            api_rows.append([
                f"`{k}`", f"{_f((a or {}).get('count'))} / {_f((b or {}).get('count'))}",
                f"{_ms_bucketed(a, 'p50')} / {_ms_bucketed(b, 'p50')}",
                f"{_ms_bucketed(a, 'p99')} / {_ms_bucketed(b, 'p99')}",
                "–" if slo is None else f"{slo:g} s",
                "yes" if all(m is not False for m in met) else "**NO**",
            ])
        api_parts.append(f"\nAPI call latency, {where} (`{SLI_NAME}` diffed over the pod phase; proxy / direct; "
                         "the histogram's first bucket ends at 50 ms):\n\n"
                         + _table(["call", "count", "p50 ms", "p99 ms", "SLO (p99)", "met"], api_rows) + "\n")
    header = ["nodes / pods / pods/s", "Running (proxy / direct)", "failed", "create→Running p50 s", "p90 s", "p99 s",
              "p99 ratio", "create→scheduled p99 s", "scheduled→Running p99 s", "pods/s", "node Leases renewed",
              "max Lease age s"]
    hop_header = ["nodes / pods / pods/s", "side", "create answered", "create → in the partition's watch",
                  "scheduler: in partition → bound", "kwok: bound → Running", "partition → client's watch",
                  "create → Running (client's watch)"]
    res_header = ["nodes / pods / pods/s", "proxy cores mean / busiest s", "machine busy cores (proxy / direct side)",
                  "peer kube-apiserver cores", "proxy RSS MiB before nodes / after / peak", "proxy KiB per node",
                  "proxy KiB per hollow kubelet", "upstream watches added by the control plane (proxy / direct)",
                  "per partition (proxy side)", "watches open at the proxy"]
    targets = "\n".join(
        f"- {t['target']} ({t['where']}{', the target size' if t.get('at_target_size') else ''}): "
        + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in t.items() if k not in ("target", "where", "met", "at_target_size"))
        + f" — {'**met**' if t['met'] else '**not met**'}"
        for t in doc.get("targets", [])
    )
    figures = ", ".join(f"`{f}`" for f in doc.get("figures", []))
    return (
        _heading(doc, path)
        + "\nPod startup latency = create sent (client clock) → the pod seen Running by a watch (client-go informer) of "
        + "the side's own client (through the proxy: a union watch). Per cell: proxy / direct.\n\n"
        + _table(header, rows)
        + "\n\nWhere the time goes, p50 / p99 s per hop (the proxy side's hops in the partition are seen by a second "
        + "watcher straight on the TPs):\n\n"
        + _table(hop_header, hop_rows)
        + "\n\nResources during the pod phase:\n\n"
        + _table(res_header, res_rows)
        + "\n"
        + "".join(api_parts)
        + (f"\nTargets:\n{targets}\n" if targets else "")
        + (f"\nFigures: {figures}\n" if figures else "")
    )


def render_watch_fanout_h2(doc: dict[str, Any], path: Path | None = None) -> str:
    rows = []
    for c in doc["cases"]:
        p, d = c["proxy"], c["direct"]
        lp, ld = p.get("delivery_lag_ms") or {}, d.get("delivery_lag_ms") or {}
        rp, rd = (p.get("ping") or {}).get("rtt_ms") or {}, (d.get("ping") or {}).get("rtt_ms") or {}
        rows.append([
            _f(c["watches"]),
            f"{_f(p['tcp_connections_dialed'])} / {_f(d['tcp_connections_dialed'])}",
            f"{_f(p['memory_per_watch_bytes'])} / {_f(d['memory_per_watch_bytes'])}",
            _x(c["ratio_memory_per_watch_proxy_over_direct"]),
            f"{_f(p['open_seconds'])} / {_f(d['open_seconds'])}",
            f"{_f(lp.get('p50_ms'))} / {_f(ld.get('p50_ms'))}",
            f"{_f(lp.get('p99_ms'))} / {_f(ld.get('p99_ms'))}",
            _x(c["ratio_delivery_p99_proxy_over_direct"]),
            ", ".join(_x(r) for r in c.get("ratio_delivery_p99_by_round") or []) or "–",
            f"{_f(rp.get('p99_ms'), 2)} / {_f(rd.get('p99_ms'), 2)}",
            f"{_f(rp.get('max_ms'), 2)} / {_f(rd.get('max_ms'), 2)}",
            f"{_f(p['deliveries_received'])}/{_f(p['deliveries_expected'])} / {_f(d['deliveries_received'])}/{_f(d['deliveries_expected'])}",
            c.get("note", ""),
        ])
    header = [
        "watches", "TCP connections (proxy / direct)", "bytes per idle watch", "ratio", "open s", "delivery p50 ms",
        "delivery p99 ms", "ratio", "p99 ratio per round (alternating)", "PING p99 ms during delivery", "PING max ms",
        "deliveries", "note",
    ]
    return _heading(doc, path) + "\n" + _table(header, rows) + "\n" + _lag_split(doc["cases"]) + _stalls(doc["cases"], "watches")


def _lag_split(cases: list[dict[str, Any]]) -> str:
    """watch_fanout_h2's delivery lag split at a watch straight on the partition (older runs
    have no split: empty)."""
    parts = []
    for c in cases:
        sp, sd = (c["proxy"].get("where_the_lag_goes") or {}), (c["direct"].get("where_the_lag_goes") or {})
        if not sp or not sd:
            continue
        (wp, ap), (wd, ad) = ((x.get("partition_watch_ms") or {}, x.get("after_partition_watch_ms") or {}) for x in (sp, sd))
        parts.append(
            f"{_f(c['watches'])} watches: the partition's own watch p50 / p99 {_f(wp.get('median_ms'))} / {_f(wp.get('p99_ms'))} ms "
            f"(rp1, rp2, proxy side) vs {_f(wd.get('median_ms'))} / {_f(wd.get('p99_ms'))} ms (rp3); after it, "
            f"the proxy's hop p50 / p99 / max {_f(ap.get('median_ms'))} / {_f(ap.get('p99_ms'))} / {_f(ap.get('max_ms'))} ms vs "
            f"rp3's fan-out to its other watches {_f(ad.get('median_ms'))} / {_f(ad.get('p99_ms'))} / {_f(ad.get('max_ms'))} ms "
            f"({_f(sp.get('matched'))} and {_f(sd.get('matched'))} deliveries matched to their patch)")
    if not parts:
        return ""
    return "\nWhere the lag goes (a watch straight on the partitions that hold the nodes sees each patch too): " + "; ".join(parts) + "\n"


def render_routed_requests(doc: dict[str, Any], path: Path | None = None) -> str:
    rows = []
    for c in doc["cases"]:
        p, d, lean = c["proxy"], c.get("direct"), c.get("lean")
        rows.append([
            c.get("client_protocol", "h2"),
            c["op"],
            _f(c["concurrency"]) + (f" at {c['qps']:g}/s" if c.get("qps") else ""),
            f"{_f(p['requests_per_second'], 0)} / {_f(d['requests_per_second'], 0) if d else '–'} / "
            f"{_f(lean['requests_per_second'], 0) if lean else '–'}",
            _x(c.get("ratio_throughput_proxy_over_direct")),
            _x(c.get("ratio_throughput_proxy_over_lean")),
            f"{_f(p['p50_ms'], 2)} / {_f(d['p50_ms'], 2) if d else '–'}",
            f"{c['added_p50_ms']:+.2f}" if "added_p50_ms" in c else "–",
            f"{_f(p['cpu_per_request_ms'], 3)} / {_f(lean['cpu_per_request_ms'], 3) if lean else '–'}"
            + (f" / {_f(c['aiohttp']['cpu_per_request_ms'], 3)}" if "aiohttp" in c else ""),
            _x(c.get("ratio_cpu_proxy_over_lean")) + (f" ({_x(c['ratio_cpu_net_proxy_over_lean'])})" if "ratio_cpu_net_proxy_over_lean" in c else ""),
            f"{p['failed']} / {d['failed'] if d else '–'}",
        ])
    header = ["client", "request", "concurrency (at a paced rate)", "requests/s (proxy / direct / lean peer)", "vs direct", "vs lean",
              "p50 ms (proxy / direct)", "added p50 ms", "CPU ms per request (proxy / lean" + (" / aiohttp)" if any("aiohttp" in c for c in doc["cases"]) else ")"),
              "CPU vs lean (net of idle)", "failed"]
    params = doc.get("params", {})
    setup = (f"proxy workers and peer processes: {params.get('proxy_workers', params.get('workers') or 'default')}, "
             f"event loop: {params.get('proxy_event_loop', params.get('event_loop') or 'default')}, "
             f"connections: {params.get('connections', 'one')} (one per concurrent client, or one for all), "
             f"pinned: {'yes (proxy and peers on one CPU, the rest on the other)' if params.get('pin') else 'no'}")
    return _heading(doc, path) + f"\n{setup}\n\n" + _table(header, rows) + "\n"


def render_transport_cpu(doc: dict[str, Any], path: Path | None = None) -> str:
    ratios = doc.get("ratio_to_floor") or {}
    rows = [[name, _f(r["cpu_us_per_request"], 1), _x(ratios.get(name)), _f(r["requests_per_second"], 0)]
            for name, r in doc["candidates"].items()]
    return _heading(doc, path) + "\n" + _table(["transport", "CPU us per GET", "vs the floor", "GETs/s"], rows) + "\n"


def render_where_cpu_goes(doc: dict[str, Any], path: Path | None = None) -> str:
    sides = doc["sides"]
    rows = [[r["part"], _f(r["proxy_us"], 1), _f(r["lean_us"], 1), f"{r['added_us']:+.1f}"] for r in doc["parts"]]
    rows.append(["**CPU per request**", _f(sides["proxy"]["cpu_us_per_request"], 1), _f(sides["lean"]["cpu_us_per_request"], 1),
                 f"{sides['proxy']['cpu_us_per_request'] - sides['lean']['cpu_us_per_request']:+.1f}"])
    params = doc.get("params", {})
    setup = (f"{params.get('op')} at concurrency 16 over {params.get('client_protocol')}"
             + (f", paced at {params['qps']:g}/s" if params.get("qps") else "") + "; "
             f"{_f(sides['proxy']['requests_per_second'], 0)} / {_f(sides['lean']['requests_per_second'], 0)} requests/s")
    return (_heading(doc, path) + f"\n{setup}\n\n"
            + _table(["part", "proxy us per request", "lean peer us per request", "added by the proxy"], rows) + "\n")


def render_metrics_cost(doc: dict[str, Any], path: Path | None = None) -> str:
    rows = [[mode, _f(us, 2)] for mode, us in doc["us_per_request"].items()]
    return _heading(doc, path) + "\n" + _table(["recording one request's metrics", "CPU us per request"], rows) + "\n"


RENDERERS: dict[str, Callable[[dict[str, Any], Path | None], str]] = {
    "list_nodes": render_list_nodes,
    "watch_fanout": render_watch_fanout,
    "watch_fanout_h2": render_watch_fanout_h2,
    "routed_requests": render_routed_requests,
    "transport_cpu": render_transport_cpu,
    "metrics_cost": render_metrics_cost,
    "where_cpu_goes": render_where_cpu_goes,
    "cache_memory": render_cache_memory,
    "union_watch": render_union_watch,
    "density": render_density,
}


def render(paths: Iterable[Path]) -> str:
    """One markdown section per JSON document, in benchmark order."""
    docs = []
    for path in sorted(paths):
        try:
            docs.append((path, json.loads(path.read_text())))
        except (OSError, json.JSONDecodeError) as exc:
            docs.append((path, {"benchmark": f"unreadable: {exc}"}))
    order = list(RENDERERS)
    docs.sort(key=lambda pd: order.index(pd[1].get("benchmark")) if pd[1].get("benchmark") in order else len(order))
    parts = ["## partition-proxy benchmarks\n"]
    for path, doc in docs:
        renderer = RENDERERS.get(doc.get("benchmark", ""))
        if renderer is None:
            parts.append(f"- {path.name}: not a known benchmark document\n")
            continue
        try:
            parts.append(renderer(doc, path))
        except (KeyError, TypeError) as exc:
            parts.append(f"- {path.name}: incomplete document ({exc!r})\n")
    return "\n".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, help="also write the markdown here")
    args = ap.parse_args()
    text = render(args.files or OUT_DIR.glob("*.json"))
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
