"""The soak's plot (bench/soak.py): one PNG, four panels over the run's time, every fault window
shaded and named: each replica's RSS (and replica A's heap, in use and free); requests in flight (long-running and other) per replica;
client-visible errors per bucket (5xx, and requests with no answer); the probes' latency
(median and largest per bucket of successful GETs through the replicas)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(doc: dict[str, Any], series: dict[str, Any], path: Path) -> Path:
    """Write the PNG to `path` (matplotlib, Agg) and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a_rss, a_inflight, a_err, a_lat) = plt.subplots(4, 1, figsize=(13, 11), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (replica, points) in enumerate(sorted(series["rss_mib"].items())):
        if points:
            a_rss.plot([t for t, _ in points], [v for _, v in points], color=colors[i], label=f"replica {replica} RSS")
    heap = series.get("heap_mib", {}).get("A") or []
    if heap:  # what replica A's C allocator holds in use and free (a share of its RSS)
        a_rss.plot([p[0] for p in heap], [p[1] for p in heap], color=colors[0], ls="--", lw=0.8, label="A heap in use")
        a_rss.plot([p[0] for p in heap], [p[2] for p in heap], color=colors[0], ls=":", lw=0.8, label="A heap free")
    a_rss.set_ylabel("RSS (MiB)")
    for i, (replica, points) in enumerate(sorted(series["inflight"].items())):
        if points:
            a_inflight.plot([p[0] for p in points], [p[1] for p in points], color=colors[i], label=f"{replica} long-running")
            a_inflight.plot([p[0] for p in points], [p[2] for p in points], color=colors[i], ls=":", label=f"{replica} other")
    a_inflight.set_ylabel("requests in flight")
    errors = series["errors"]
    width = series["bucket_s"] * 0.9
    if errors:
        a_err.bar([e[0] for e in errors], [e[1] for e in errors], width=width, align="edge", color=colors[3], label="5xx")
        a_err.bar([e[0] for e in errors], [e[2] for e in errors], width=width, align="edge", bottom=[e[1] for e in errors],
                  color=colors[7 % len(colors)], alpha=0.6, label="no answer (refused, reset, timeout)")
    a_err.set_ylabel(f"failed requests per {series['bucket_s']:g} s")
    lat = series["latency_ms"]
    if lat:
        a_lat.plot([p[0] for p in lat], [p[1] for p in lat], color=colors[2], label="probe median")
        a_lat.plot([p[0] for p in lat], [p[2] for p in lat], color=colors[1], lw=0.8, label="probe max")
        a_lat.set_yscale("log")
    a_lat.set_ylabel("probe latency (ms)")
    a_lat.set_xlabel("seconds since the soak started")
    for name, start, end in series["windows"]:
        for ax in (a_rss, a_inflight, a_err, a_lat):
            ax.axvspan(start, max(end, start + 1), color="orange", alpha=0.18, lw=0)
        a_rss.annotate(name, (start, 0.98), xycoords=a_rss.get_xaxis_transform(), fontsize=6, rotation=90, va="top", ha="right")
    for ax in (a_rss, a_inflight, a_err, a_lat):
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=7)
    verdict = "passed" if doc.get("passed") else "FAILED"
    fig.suptitle(f"Soak: {doc['params']['minutes']:g} min, {doc['params']['kubelets']:,} kubelets, "
                 f"{len(doc.get('faults', []))} faults (shaded) - checkers {verdict}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
