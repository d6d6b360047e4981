"""What recording one request's metrics costs, three ways, in the same run:

- `multiprocess`: prometheus-client's instruments in multiprocess mode (every change written to a
  memory-mapped file under a lock), as the proxy recorded requests until 2026-11;
- `prometheus`: the same instruments in one process's memory;
- `recorder`: `proxy.metrics.RequestMetrics`, the proxy's recorder (dict arithmetic per request,
  families made at scrape time).

A request records what `proxy.pipeline.steps.Observe` records: in flight up and down, the
requests counter, the duration histogram and the SLI histogram. Each way runs in a process of
its own (multiprocess mode is chosen at import time), `--requests` times, best of `--repeat`;
the figure is microseconds of CPU per request (process time). For scale, the proxy spends
0.2-0.4 ms of CPU per routed request (`bench.routed_requests`).

Run: `python -m bench.metrics_cost [--requests 100000] [--repeat 5]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench.common import emit, host_info, log

NAME = "metrics_cost"
MODES = ("multiprocess", "prometheus", "recorder")
_SLI = ("GET", "", "v1", "pods", "", "resource", "apiserver")


def _run_prometheus(requests: int) -> float:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    from routing.sli import SLI_BUCKETS, SLI_LABELS

    registry = CollectorRegistry()
    total = Counter("r", "", ("verb", "route", "partition", "code"), registry=registry)
    duration = Histogram("d", "", ("verb", "route"), buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
                         registry=registry)
    sli = Histogram("s", "", SLI_LABELS, buckets=SLI_BUCKETS, registry=registry)
    inflight = Gauge("i", "", ("kind",), multiprocess_mode="livesum", registry=registry)
    start = time.process_time()
    for _ in range(requests):
        gauge = inflight.labels("other")
        gauge.inc()
        gauge.dec()
        total.labels("get", "forward", "tp1", "200").inc()
        duration.labels("get", "forward").observe(0.0012)
        sli.labels(*_SLI).observe(0.0012)
    return time.process_time() - start


def _run_recorder(requests: int) -> float:
    from proxy.metrics import Metrics

    recorder = Metrics.create().requests
    start = time.process_time()
    for _ in range(requests):
        recorder.started("other")
        recorder.ended("other", "get", "forward", "tp1", "200", 0.0012, _SLI)
    return time.process_time() - start


def _child(mode: str, requests: int, repeat: int) -> None:
    run = _run_recorder if mode == "recorder" else _run_prometheus
    best = min(run(requests) for _ in range(repeat))
    print(json.dumps({"mode": mode, "us_per_request": round(best / requests * 1e6, 3)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args.child, args.requests, args.repeat)
    results = {}
    with tempfile.TemporaryDirectory() as directory:
        for mode in MODES:
            env = {**os.environ, **({"PROMETHEUS_MULTIPROC_DIR": directory} if mode == "multiprocess" else {})}
            out = subprocess.run([sys.executable, "-m", "bench.metrics_cost", "--child", mode, "--requests", str(args.requests),
                                  "--repeat", str(args.repeat)], env=env, check=True, capture_output=True, text=True).stdout
            results[mode] = json.loads(out)["us_per_request"]
            log(f"{mode}: {results[mode]} us of CPU per request")
    emit(NAME, {
        "benchmark": NAME,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": host_info(),
        "params": {"requests": args.requests, "repeat": args.repeat},
        "peer": "prometheus-client's instruments, in multiprocess mode and in memory, recording the same figures",
        "us_per_request": results,
        "ratio_recorder_over_multiprocess": round(results["recorder"] / results["multiprocess"], 3),
    })


if __name__ == "__main__":
    main()
