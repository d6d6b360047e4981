"""Sustained events through a union watch: the proxy vs direct watches on the partitions, same
writes, same run; plus the per-event cost of the resourceVersion rewrite.

Set-up: `Federation(root, tenant_partitions=2, resource_partitions=1)` (tp1, tp2, rp1) and one
proxy in front of all three (`hack.proxy_process.ProxyProcess`, default config). `--objects`
ConfigMaps are created straight on the partitions before any watch opens: even indices in
namespace `acme-bench` on tp1, odd in `zulu-bench` on tp2 (tenants a..m live in tp1, n..z in tp2).

Per encoding (JSON, then protobuf) and per rate K (100, 500, 1,000 writes/s), one step:
- watchers, opened before the writes and in the step's encoding, each a Go process
  (`rvcheck watch`, client-go's REST client):
  * proxy: ONE cluster-wide union watch `GET {proxy}/api/v1/configmaps?watch=1&
    allowWatchBookmarks=true&resourceVersion=<list RV>` (the LIST through the proxy too);
  * direct (the peer): ONE process with two streams, the same watch straight to tp1 and to tp2
    (each from its own LIST RV), merged client side. Both watchers see the same writes at the
    same time, so every difference between them is the proxy's hop.
- the writer (`rvcheck write`, Go, `--clients` workers, each with its own connection per
  partition) sends K merge-patches per second for `--step-seconds`, straight to tp1 and tp2
  (write i goes to object i mod N: half to each partition), each stamping the wall clock of its
  send (ns), its number and the step's run tag in annotations.
- per watcher: events delivered / written, delivered events/s (first to last delivery), delivery
  lag = receive time - send time (p50/p99/max, and p99 per second of the step), duplicates, RV
  order, the Content-Type the watch answered with. Ratios proxy/direct.
- CPU: the proxy's CPU seconds over the step (before the writes to the watchers' end) per
  delivered event, its core utilisation (mean and busiest second, sampled every second), the
  partitions' kube-apiservers, the Go clients (their own rusage) and the whole machine.

Then a capture: raw watch bytes of tp1 and tp2 (JSON lines and protobuf frames of the same
kind of writes) are read with aiohttp, and, with everything stopped, the per-event cost of the
rewrite is timed in this process (timeit, min of `--timeit-repeat`) on those bytes:
`WatchMerge.on_line` / `on_frame` (union watch: decode, keep filter, natives to object form,
vector stamp), `StreamTranslator.feed` (single-partition forward), against the bare cost of
reading the same bytes (orjson.loads of a line; FrameReader + decode_watch_event of a frame).

Target (the issue): union watch delivery lag p99 <= 50 ms at 1,000 events/s, direct as the
peer. Bounded: each watcher by `--step-seconds` + `--drain-seconds`, the writer by its own
deadline, every process stopped in a finally (SIGTERM too).

Run: `python -m bench.union_watch [--rates 100,500,1000] [--step-seconds 20]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.common import (
    REPO,
    WORK_DIR,
    apiserver_pid,
    client_ssl,
    cpu_seconds,
    emit,
    host_info,
    install_sigterm,
    log,
    new_session,
    percentile,
    ratio,
)
from config.load import load_config
from hack.federation import PROXY_ADMINS_GROUP, Federation
from hack.procs import stop_process
from hack.proxy_process import ProxyProcess
from routing import protobuf as pb
from routing import rv as rvcodec
from routing.decide import object_meta
from routing.merge import WatchMerge
from routing.translate import object_translator
from routing.placement import Placement
from routing.translate import StreamTranslator

NAME = "union_watch"
RVCHECK = REPO / ".local" / "bin" / "rvcheck"
TENANT_NAMESPACES = {"tp1": "acme-bench", "tp2": "zulu-bench"}
TPS = ("tp1", "tp2")
WATCH_PATH = "/api/v1/configmaps"
PROTOBUF = "application/vnd.kubernetes.protobuf"
# The issue's target: union watch delivery lag p99 (ms) at this rate (events/s).
TARGET_P99_MS = 50.0
TARGET_RATE = 1000
# seconds; bounds of the set-up steps (each takes well under a second when the machine is free)
READY_TIMEOUT = 60.0
CREATE_TIMEOUT = 120.0
CAPTURE_TIMEOUT = 30.0


# -- processes ------------------------------------------------------------------------------


class GoProcs:
    """The Go clients this benchmark started; `stop_all()` (from a finally) ends every one."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, args: Sequence[str]) -> tuple[subprocess.Popen[bytes], Path]:
        """Start `rvcheck ARGS` with stdout to <directory>/<name>.json (its report), stderr
        (progress) to ours."""
        out = self.directory / f"{name}.json"
        with out.open("wb") as f:
            proc = subprocess.Popen([str(RVCHECK), *args], stdout=f, stderr=sys.stderr, start_new_session=True)
        self.procs.append(proc)
        return proc, out

    @staticmethod
    def report(proc: subprocess.Popen[bytes], out: Path, timeout: float) -> dict[str, Any]:
        """Wait (seconds) for `proc` and parse its report. Raises RuntimeError when it exits
        without one, subprocess.TimeoutExpired past `timeout`."""
        rc = proc.wait(timeout)
        text = out.read_bytes()
        if not text.strip():
            raise RuntimeError(f"{proc.args!r} exited {rc} without a report")
        doc: dict[str, Any] = orjson.loads(text)
        doc["exit_status"] = rc
        return doc

    def stop_all(self) -> None:
        for proc in self.procs:
            stop_process(proc, grace=5)
        self.procs.clear()


def schedstat(pid: int) -> tuple[float, float, int]:
    """(seconds on a CPU, seconds runnable but waiting for a CPU, timeslices) of every thread of
    `pid` (/proc/<pid>/task/*/schedstat, the kernel's sched_info). Raises OSError."""
    run = wait = slices = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                a, b, c = (int(x) for x in f.read().split())
            run, wait, slices = run + a, wait + b, slices + c
    return run / 1e9, wait / 1e9, slices


class CpuSampler:
    """Samples CPU seconds of some pids and the machine's busy time every `interval` seconds in a
    thread; `utilisation()` gives the mean and busiest interval in cores, and from the first and
    last sample each pid's run-queue wait (time runnable but not running: CPU contention)."""

    def __init__(self, pids: dict[str, int], interval: float = 1.0) -> None:
        self.pids = pids
        self.interval = interval
        self.samples: list[tuple[float, dict[str, float], float]] = []
        self.sched: list[dict[str, tuple[float, float, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def _sched(self) -> None:
        snap = {}
        for name, pid in self.pids.items():
            with contextlib.suppress(OSError):
                snap[name] = schedstat(pid)
        self.sched.append(snap)

    def _sample(self) -> None:
        cpu = {}
        for name, pid in self.pids.items():
            with contextlib.suppress(OSError):
                cpu[name] = cpu_seconds(pid)
        self.samples.append((time.monotonic(), cpu, machine_busy_seconds()))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> CpuSampler:
        self._sched()
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sample()
        self._sched()

    def utilisation(self) -> dict[str, dict[str, float]]:
        """{name: {mean_cores, max_cores, cpu_s}} per pid and for "machine" (busy cores)."""
        out: dict[str, dict[str, float]] = {}
        if len(self.samples) < 2:
            return out
        (t0, c0, m0), (t1, c1, m1) = self.samples[0], self.samples[-1]
        for name in [*self.pids, "machine"]:
            peaks = []
            for (ta, ca, ma), (tb, cb, mb) in zip(self.samples, self.samples[1:]):
                a, b = (ma, mb) if name == "machine" else (ca.get(name), cb.get(name))
                if a is not None and b is not None and tb > ta:
                    peaks.append((b - a) / (tb - ta))
            a, b = (m0, m1) if name == "machine" else (c0.get(name), c1.get(name))
            if a is None or b is None:
                continue
            out[name] = {
                "cpu_s": round(b - a, 3),
                "mean_cores": round((b - a) / max(t1 - t0, 1e-9), 3),
                "max_cores": round(max(peaks, default=0.0), 3),
            }
            if name in self.sched[0] and name in self.sched[-1]:
                (_, w0, n0), (_, w1, n1) = self.sched[0][name], self.sched[-1][name]
                out[name]["runqueue_wait_s"] = round(w1 - w0, 3)
                out[name]["runqueue_wait_per_timeslice_ms"] = round((w1 - w0) / max(n1 - n0, 1) * 1000, 3)
        return out


def etcd_pid(fed: Federation, partition: str) -> int:
    """The pid of partition `partition`'s etcd (found by its unique client URL)."""
    want = fed.partition(partition).etcd_url.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"etcd") and want in argv:
            return int(entry)
    raise RuntimeError(f"etcd of {partition} not found")


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent not idle (/proc/stat: every field but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


# -- set-up ---------------------------------------------------------------------------------


def configmap(name: str, namespace: str, payload_bytes: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "union-watch-bench"}},
        "data": {"payload": "x" * payload_bytes},
    }


async def create_objects(fed: Federation, objects: int, payload_bytes: int) -> dict[str, int]:
    """Create the tenant namespaces and `objects` ConfigMaps bench-00000.. straight on the
    partitions: object i on TPS[i % 2]. Returns ConfigMaps created per partition."""
    created = dict.fromkeys(TPS, 0)
    deadline = time.monotonic() + CREATE_TIMEOUT
    sessions = {tp: new_session(client_ssl(fed, fed.partition(tp).admin_cert)) for tp in TPS}
    try:
        for tp in TPS:
            ns = TENANT_NAMESPACES[tp]
            async with sessions[tp].post(f"{fed.partition(tp).server}/api/v1/namespaces",
                                         json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}) as resp:
                if resp.status not in (201, 409):
                    raise RuntimeError(f"create namespace {ns} on {tp}: {resp.status} {await resp.text()}")
        todo = iter(range(objects))

        async def worker() -> None:
            for i in todo:
                if time.monotonic() > deadline:
                    raise RuntimeError("creating ConfigMaps: past the deadline")
                tp = TPS[i % len(TPS)]
                ns = TENANT_NAMESPACES[tp]
                url = f"{fed.partition(tp).server}/api/v1/namespaces/{ns}/configmaps"
                async with sessions[tp].post(url, json=configmap(f"bench-{i:05d}", ns, payload_bytes)) as resp:
                    if resp.status == 201:
                        created[tp] += 1
                    elif resp.status != 409:
                        raise RuntimeError(f"POST {url}: {resp.status} {await resp.text()}")

        await asyncio.gather(*(worker() for _ in range(16)))
    finally:
        for s in sessions.values():
            await s.close()
    return created


# -- one step -------------------------------------------------------------------------------


def side_summary(rep: dict[str, Any], written: int) -> dict[str, Any]:
    """The figures of one watcher's report that the tables use, plus the report's details."""
    lag = rep.get("lag_ms", {})
    return {
        "delivered": rep.get("counted", 0),
        "expected": written,
        "delivered_fraction": round(rep.get("counted", 0) / written, 4) if written else None,
        "events_per_s": rep.get("events_per_s"),
        "lag_p50_ms": lag.get("p50_ms"),
        "lag_p90_ms": lag.get("p90_ms"),
        "lag_p99_ms": lag.get("p99_ms"),
        "lag_p999_ms": lag.get("p999_ms"),
        "lag_max_ms": lag.get("max_ms"),
        "lag_mean_ms": lag.get("mean_ms"),
        "duplicates": rep.get("duplicates"),
        "stop_reason": rep.get("stop_reason"),
        "watcher_cpu_s": rep.get("cpu_seconds"),
        "streams": [
            {k: s.get(k) for k in ("server", "list_rv", "first_rv", "last_rv", "response_content_types", "events",
                                   "counted", "rvs_increasing", "rv_regressions", "invalid_rvs", "ended_early", "errors")}
            for s in rep.get("streams", [])
        ],
        "lag_by_second": rep.get("lag_by_second", []),
        "fatal": rep.get("fatal"),
        "exit_status": rep.get("exit_status"),
    }


def run_step(
    *, fed: Federation, proxy: ProxyProcess, proxy_kubeconfig: Path, procs: GoProcs, encoding: str, rate: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    run = f"{encoding}-{rate}"
    planned = int(rate * args.step_seconds)
    # the writer stops sending at the end of the step (writes it could not send in time are
    # skipped); the watchers end earlier than this bound when they have every event or nothing
    # came for --idle-seconds
    watch_seconds = args.step_seconds + args.drain_seconds
    ready = {side: procs.directory / f"{run}-{side}.ready" for side in ("proxy", "direct")}
    for f in ready.values():
        f.unlink(missing_ok=True)
    direct_kubeconfigs = ",".join(str(fed.partition(tp).admin_kubeconfig) for tp in TPS)
    logs = {name: procs.directory / f"{run}-{name}.csv" for name in ("proxy", "direct", "write")}
    common = ["--path", WATCH_PATH, "--content-type", encoding, "--run", run, "--expect", str(planned),
              "--duration", f"{watch_seconds}s", "--idle", f"{args.idle_seconds}s"]
    watchers = {
        "proxy": procs.start(f"{run}-watch-proxy", ["watch", "--kubeconfig", str(proxy_kubeconfig), *common,
                                                    "--ready-file", str(ready["proxy"]), "--events-out", str(logs["proxy"])]),
        "direct": procs.start(f"{run}-watch-direct", ["watch", "--kubeconfig", direct_kubeconfigs, *common,
                                                      "--ready-file", str(ready["direct"]), "--events-out", str(logs["direct"])]),
    }
    deadline = time.monotonic() + READY_TIMEOUT
    while not all(f.exists() for f in ready.values()):
        for side, (proc, out) in watchers.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{run}: the {side} watcher exited {proc.returncode} before its watch opened: "
                                   f"{out.read_text()[:500]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{run}: watchers not open after {READY_TIMEOUT:.0f} s")
        time.sleep(0.05)
    time.sleep(0.5)  # let bookmarks and the initial stream bytes settle

    assert proxy.popen is not None
    pids = {
        "proxy": proxy.popen.pid,
        **{f"{tp}_apiserver": apiserver_pid(fed.partition(tp)) for tp in TPS},
        **{f"{tp}_etcd": etcd_pid(fed, tp) for tp in TPS},
    }
    log(f"{run}: watchers open; writing {planned} events at {rate}/s for {args.step_seconds:.0f} s")
    with CpuSampler(pids) as sampler:
        writer_proc, writer_out = procs.start(f"{run}-write", [
            "write", "--kubeconfig", direct_kubeconfigs,
            "--namespace", ",".join(TENANT_NAMESPACES[tp] for tp in TPS),
            "--rate", str(rate), "--duration", f"{args.step_seconds}s", "--objects", str(args.objects),
            "--prefix", "bench-", "--clients", str(args.clients), "--run", run, "--content-type", "protobuf",
            "--log-out", str(logs["write"]),
        ])
        writer = GoProcs.report(writer_proc, writer_out, timeout=args.step_seconds + 60)
        reports = {side: GoProcs.report(proc, out, timeout=watch_seconds + 60) for side, (proc, out) in watchers.items()}
    use = sampler.utilisation()
    # The Go clients exit before the last sample: their own rusage.
    clients_cpu = {"writer": float(writer.get("cpu_seconds") or 0),
                   **{f"watcher_{side}": float(reports[side].get("cpu_seconds") or 0) for side in ("proxy", "direct")}}
    for name, cpu in clients_cpu.items():
        use[name] = {"cpu_s": cpu}
    if "machine" in use:
        # everything else on the machine: other work, rp1, this process
        ours = sum(v["cpu_s"] for k, v in use.items() if k != "machine")
        use["other_processes"] = {"cpu_s": round(use["machine"]["cpu_s"] - ours, 3)}
    written = writer.get("writes_ok", 0)
    proxy_side, direct_side = side_summary(reports["proxy"], written), side_summary(reports["direct"], written)
    proxy_cpu = use.get("proxy", {}).get("cpu_s")
    proxy_side["proxy_cpu_s"] = proxy_cpu
    proxy_side["proxy_cpu_ms_per_event"] = round(proxy_cpu / proxy_side["delivered"] * 1000, 4) if proxy_cpu and proxy_side["delivered"] else None
    case: dict[str, Any] = {
        "encoding": encoding,
        "rate": rate,
        "run": run,
        "writer": {k: writer.get(k) for k in ("writes_planned", "writes_sent", "writes_skipped", "writes_ok", "achieved_per_s", "send_seconds",
                                              "behind_schedule_ms", "patch_round_trip_ms", "errors_total", "errors",
                                              "targets", "cpu_seconds", "fatal", "exit_status")},
        "proxy": proxy_side,
        "direct": direct_side,
        "cpu": use,
        "ratio_events_per_s_proxy_over_direct": ratio(proxy_side["events_per_s"] or 0, direct_side["events_per_s"] or 0),
        "ratio_lag_p50_proxy_over_direct": ratio(proxy_side["lag_p50_ms"] or 0, direct_side["lag_p50_ms"] or 0),
        "ratio_lag_p99_proxy_over_direct": ratio(proxy_side["lag_p99_ms"] or 0, direct_side["lag_p99_ms"] or 0),
        "proxy_added_lag_p50_ms": _diff(proxy_side["lag_p50_ms"], direct_side["lag_p50_ms"]),
        "proxy_added_lag_p99_ms": _diff(proxy_side["lag_p99_ms"], direct_side["lag_p99_ms"]),
        "lag_breakdown": lag_breakdown(logs),
    }
    notes = []
    for side in ("proxy", "direct"):
        s = case[side]
        if s["delivered"] < written:
            notes.append(f"{side}: {s['delivered']} of {written} events delivered ({s['stop_reason']})")
        if any(st["ended_early"] for st in s["streams"]) or s["fatal"]:
            notes.append(f"{side}: {s['fatal']}")
    if writer.get("writes_skipped"):
        notes.append(f"writer: {writer['writes_skipped']:,} of {planned:,} writes not sent within the step (the partitions "
                     f"answered {writer.get('achieved_per_s')}/s)")
    if writer.get("errors_total"):
        notes.append(f"writer: {writer['errors_total']} errors")
    if notes:
        case["note"] = "; ".join(notes)
    log(f"{run}: written {written} at {writer.get('achieved_per_s')}/s; proxy {proxy_side['delivered']} "
        f"p50/p99 {proxy_side['lag_p50_ms']}/{proxy_side['lag_p99_ms']} ms; direct {direct_side['delivered']} "
        f"p50/p99 {direct_side['lag_p50_ms']}/{direct_side['lag_p99_ms']} ms; proxy CPU {use.get('proxy')}")
    return case


def read_log(path: Path) -> dict[int, tuple[int, int]]:
    """seq -> (a_ns, b_ns) of a CSV written by rvcheck --events-out / --log-out ({} if absent)."""
    out: dict[int, tuple[int, int]] = {}
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            seq, a, b = line.split(",")
            out[int(seq)] = (int(a), int(b))
    return out


def lag_breakdown(logs: dict[str, Path]) -> dict[str, Any]:
    """Where each event's lag went, joined per write (seq) over the writer's and both watchers'
    logs, all on this machine's wall clock: the write until its PATCH was answered; the direct
    watch's receive after that answer (negative when the event arrived first); the proxy's
    receive after the direct watch's receive of the same event (the proxy's hop)."""
    write, proxy, direct = read_log(logs["write"]), read_log(logs["proxy"]), read_log(logs["direct"])

    def summary(values_ns: list[int]) -> dict[str, Any]:
        if not values_ns:
            return {"count": 0}
        ms = [v / 1e6 for v in values_ns]
        return {"count": len(ms), "p50_ms": round(percentile(ms, 50), 3), "p99_ms": round(percentile(ms, 99), 3),
                "min_ms": round(min(ms), 3), "max_ms": round(max(ms), 3)}

    starts = [sent for sent, _ in write.values()]
    by_second: dict[int, list[int]] = {}
    for s in proxy:
        if s in direct and starts:
            by_second.setdefault((direct[s][1] - min(starts)) // 1_000_000_000, []).append(proxy[s][1] - direct[s][1])
    return {
        "write_answered_after_send": summary([done - sent for sent, done in write.values()]),
        "direct_receive_after_answer": summary([direct[s][1] - write[s][1] for s in write if s in direct]),
        "proxy_receive_after_answer": summary([proxy[s][1] - write[s][1] for s in write if s in proxy]),
        "proxy_receive_after_direct_receive": summary([proxy[s][1] - direct[s][1] for s in proxy if s in direct]),
        "proxy_receive_after_direct_receive_by_second": [
            {"second": sec, **summary(values)} for sec, values in sorted(by_second.items())
        ],
    }


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


# -- capture of real event bytes ------------------------------------------------------------


async def capture(fed: Federation, procs: GoProcs, args: argparse.Namespace) -> dict[str, dict[str, list[bytes]]]:
    """Raw watch events of tp1 and tp2 (cluster-wide configmaps, as the proxy's upstream watches
    are) in JSON (lines) and protobuf (frame payloads) while the writer sends `args.capture`
    writes. Returns {encoding: {partition: [event bytes]}}, only events of the capture run."""
    run = "capture"
    per_partition = args.capture // len(TPS)
    out: dict[str, dict[str, list[bytes]]] = {"json": {tp: [] for tp in TPS}, "protobuf": {tp: [] for tp in TPS}}
    sessions = {tp: new_session(client_ssl(fed, fed.partition(tp).admin_cert),
                                timeout=aiohttp.ClientTimeout(total=None, sock_connect=15)) for tp in TPS}
    responses: list[aiohttp.ClientResponse] = []
    try:
        for tp in TPS:
            server = fed.partition(tp).server
            async with sessions[tp].get(f"{server}{WATCH_PATH}", params={"limit": "1"}) as resp:
                rv = orjson.loads(await resp.read())["metadata"]["resourceVersion"]
            for encoding, accept in (("json", "application/json"), ("protobuf", PROTOBUF)):
                resp = await sessions[tp].get(
                    f"{server}{WATCH_PATH}",
                    params={"watch": "1", "allowWatchBookmarks": "true", "resourceVersion": rv, "timeoutSeconds": "60"},
                    headers={"Accept": accept},
                )
                if resp.status != 200:
                    raise RuntimeError(f"capture watch on {tp} ({encoding}): {resp.status}")
                responses.append(resp)

        async def read(tp: str, encoding: str, resp: aiohttp.ClientResponse) -> None:
            events = out[encoding][tp]
            frames = pb.FrameReader()
            pending = b""
            async for chunk in resp.content.iter_any():
                if encoding == "protobuf":
                    items = frames.feed(chunk)
                else:
                    pending += chunk
                    *items, pending = pending.split(b"\n")
                    items = [line + b"\n" for line in items if line.strip()]
                events.extend(e for e in items if run.encode() in e)
                if len(events) >= per_partition:
                    return

        readers = [asyncio.create_task(read(tp, enc, r), name=f"capture-{tp}-{enc}")
                   for (tp, enc), r in zip([(tp, enc) for tp in TPS for enc in ("json", "protobuf")], responses)]
        proc, report_path = procs.start("capture-write", [
            "write", "--kubeconfig", ",".join(str(fed.partition(tp).admin_kubeconfig) for tp in TPS),
            "--namespace", ",".join(TENANT_NAMESPACES[tp] for tp in TPS), "--rate", str(args.capture // 2),
            "--duration", "2s", "--objects", str(args.objects), "--run", run, "--clients", "4",
        ])
        try:
            async with asyncio.timeout(CAPTURE_TIMEOUT):
                await asyncio.gather(*readers)
        except TimeoutError:
            log("capture: not every stream got all its events in time; using what arrived")
        finally:
            for t in readers:
                t.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
        await asyncio.to_thread(GoProcs.report, proc, report_path, 60)
    finally:
        for r in responses:
            r.close()
        for s in sessions.values():
            await s.close()
    return out


def save_capture(events: dict[str, dict[str, list[bytes]]], directory: Path) -> dict[str, Any]:
    """Keep the captured bytes beside the run (JSON lines; protobuf re-framed) for re-use."""
    directory.mkdir(parents=True, exist_ok=True)
    sizes: dict[str, Any] = {}
    for tp in TPS:
        (directory / f"{tp}-watch.jsonl").write_bytes(b"".join(events["json"][tp]))
        (directory / f"{tp}-watch.pbstream").write_bytes(b"".join(pb.encode_frame(f) for f in events["protobuf"][tp]))
        for enc in ("json", "protobuf"):
            evs = events[enc][tp]
            sizes[f"{tp}_{enc}"] = {"events": len(evs), "mean_bytes": round(sum(map(len, evs)) / len(evs)) if evs else 0}
    return sizes


# -- per-event cost of the rewrite ----------------------------------------------------------


def codec_for(space: tuple[str, ...]) -> rvcodec.RVCodec:
    """A codec whose one epoch starts at 0 (as tests/routing/test_merge.py builds it)."""
    table = rvcodec.EpochTable((rvcodec.Epoch(1, space, rvcodec.natural_slot_bits(len(space)), (0,) * len(space)),))
    return rvcodec.RVCodec(space, table)


def per_event_us(fn: Callable[[], object], events: int, repeat: int) -> float:
    """µs per event of `fn`, which handles `events` events once: min over `repeat` runs."""
    return round(min(timeit.Timer(fn).repeat(repeat=repeat, number=1)) / events * 1e6, 2)


def rewrite_cost(events: dict[str, dict[str, list[bytes]]], config_path: Path, repeat: int) -> dict[str, Any]:
    """Time the proxy's rewrite of real events per event (see module docstring)."""
    placement = Placement.from_config(load_config(config_path))

    def keep(partition: str, obj: dict[str, Any]) -> bool:  # as proxy.union._keep_fn
        namespace = object_meta(obj).get("namespace")
        return not namespace or placement.partition_of_namespace(namespace) == partition

    codec = codec_for(TPS)
    rows: list[dict[str, Any]] = []
    for encoding in ("json", "protobuf"):
        per = events[encoding]
        n = min(len(per[tp]) for tp in TPS)
        union = [(tp, per[tp][i]) for i in range(n) for tp in TPS]  # interleaved, as a union sees them
        tp1 = per["tp1"][:n]
        if not n:
            continue
        to_proxy = object_translator(codec, 0)
        if encoding == "json":
            baseline = per_event_us(lambda: [orjson.loads(e) for _, e in union], len(union), repeat)

            def union_fn() -> None:
                merge = WatchMerge(codec=codec, start=(1, 1), initial=set(), client_initial_events=False, bookmarks=True, keep=keep)
                for tp, e in union:
                    merge.on_line(tp, e)

            def forward_fn() -> None:
                translator = StreamTranslator("application/json", to_proxy)
                for e in tp1:
                    translator.feed(e)

            forward_base = per_event_us(lambda: [orjson.loads(e) for e in tp1], len(tp1), repeat)
            rows += [
                {"encoding": "json", "path": "union watch", "what": "WatchMerge.on_line",
                 "us_per_event": per_event_us(union_fn, len(union), repeat), "baseline": "orjson.loads of the line",
                 "baseline_us_per_event": baseline},
                {"encoding": "json", "path": "forward (one partition)", "what": "StreamTranslator.feed",
                 "us_per_event": per_event_us(forward_fn, len(tp1), repeat), "baseline": "orjson.loads of the line",
                 "baseline_us_per_event": forward_base},
            ]
        else:
            def read_frames(items: Sequence[bytes]) -> None:
                reader = pb.FrameReader()
                for e in items:
                    for frame in reader.feed(e):
                        pb.decode_watch_event(frame)

            framed_union = [(tp, pb.encode_frame(e)) for tp, e in union]
            framed_tp1 = [pb.encode_frame(e) for e in tp1]
            baseline = per_event_us(lambda: read_frames([e for _, e in framed_union]), len(union), repeat)

            def union_pb() -> None:
                merge = WatchMerge(codec=codec, start=(1, 1), initial=set(), client_initial_events=False, bookmarks=True, keep=keep)
                for tp, e in union:
                    merge.on_frame(tp, e)

            def forward_pb() -> None:
                translator = StreamTranslator(f"{PROTOBUF};stream=watch", to_proxy)
                for e in framed_tp1:
                    translator.feed(e)

            forward_base = per_event_us(lambda: read_frames(framed_tp1), len(framed_tp1), repeat)
            rows += [
                {"encoding": "protobuf", "path": "union watch", "what": "WatchMerge.on_frame",
                 "us_per_event": per_event_us(union_pb, len(union), repeat),
                 "baseline": "FrameReader.feed + decode_watch_event", "baseline_us_per_event": baseline},
                {"encoding": "protobuf", "path": "forward (one partition)", "what": "StreamTranslator.feed",
                 "us_per_event": per_event_us(forward_pb, len(framed_tp1), repeat),
                 "baseline": "FrameReader.feed + decode_watch_event", "baseline_us_per_event": forward_base},
            ]
    for row in rows:
        row["ratio_over_baseline"] = ratio(row["us_per_event"], row["baseline_us_per_event"])
        row["cores_at_1000_per_s"] = round(row["us_per_event"] * TARGET_RATE / 1e6, 4)
    return {"rows": rows}


def fixture_events() -> dict[str, dict[str, list[bytes]]]:
    """Fallback when the capture failed: the protobuf watch frames of
    tests/routing/testdata/protobuf/watch-pods.bin (real kube-apiserver bytes), alternately
    assigned to tp1 and tp2; no JSON."""
    frames = pb.FrameReader().feed((REPO / "tests/routing/testdata/protobuf/watch-pods.bin").read_bytes())
    return {"json": {tp: [] for tp in TPS}, "protobuf": {tp: frames[i::2] for i, tp in enumerate(TPS)}}


# -- main -----------------------------------------------------------------------------------


def targets(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for c in cases:
        if c["rate"] != TARGET_RATE:
            continue
        p99 = c["proxy"]["lag_p99_ms"]
        out.append({
            "target": f"union watch delivery lag p99 <= {TARGET_P99_MS:.0f} ms at {TARGET_RATE:,} events/s",
            "encoding": c["encoding"],
            "proxy_p99_ms": p99,
            "direct_p99_ms": c["direct"]["lag_p99_ms"],
            "achieved_write_rate": c["writer"]["achieved_per_s"],
            "all_delivered": c["proxy"]["delivered"] >= c["writer"]["writes_ok"],
            "met": p99 is not None and p99 <= TARGET_P99_MS and c["proxy"]["delivered"] >= c["writer"]["writes_ok"],
        })
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="100,500,1000", help="writes per second (comma-separated)")
    ap.add_argument("--encodings", default="json,protobuf", help="watch encodings, one pass each")
    ap.add_argument("--step-seconds", type=float, default=20.0)
    ap.add_argument("--drain-seconds", type=float, default=15.0, help="watchers' bound after the step")
    ap.add_argument("--idle-seconds", type=float, default=5.0, help="a watcher ends this long after its last event")
    ap.add_argument("--objects", type=int, default=300, help="ConfigMaps written (half per tenant partition)")
    ap.add_argument("--payload-bytes", type=int, default=512, help="data size of each ConfigMap")
    ap.add_argument("--clients", type=int, default=32, help="writer workers (each its own connection per partition)")
    ap.add_argument("--capture", type=int, default=400, help="events captured for the rewrite timing (both TPs)")
    ap.add_argument("--timeit-repeat", type=int, default=7)
    args = ap.parse_args()
    install_sigterm()
    if not RVCHECK.exists():
        sys.exit(f"{RVCHECK} missing: run `bash hack/build-components.sh`")
    rates = [int(x) for x in args.rates.split(",") if x.strip()]
    encodings = [x.strip() for x in args.encodings.split(",") if x.strip()]
    t0 = time.monotonic()
    out: dict[str, Any] = {
        "benchmark": NAME,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": host_info(),
        "params": {**vars(args), "rates": rates, "encodings": encodings},
        "peer": "the same watch straight to tp1 and to tp2 (one rvcheck watch process, two streams merged client side), "
                "open at the same time as the union watch through the proxy and fed by the same writes",
        "cases": [],
    }
    root = WORK_DIR / NAME
    fed = Federation(root, tenant_partitions=2, resource_partitions=1)
    proxy: ProxyProcess | None = None
    procs: GoProcs | None = None
    captured: dict[str, dict[str, list[bytes]]] | None = None
    try:
        t = time.monotonic()
        fed.start()
        log(f"federation up in {time.monotonic() - t:.1f} s: " + ", ".join(f"{p.name}={p.server}" for p in fed.partitions))
        procs = GoProcs(root / "clients")
        procs.directory.mkdir(parents=True, exist_ok=True)
        proxy = ProxyProcess(fed, root / "proxy")
        proxy.start(timeout=180)
        assert proxy.popen is not None
        log(f"proxy up at {proxy.server} (pid {proxy.popen.pid})")
        proxy_kubeconfig = fed.issue_client_kubeconfig("bench-admin", user="bench-admin", groups=[PROXY_ADMINS_GROUP],
                                                       server=proxy.server)
        created = asyncio.run(create_objects(fed, args.objects, args.payload_bytes))
        log(f"created ConfigMaps {created}")
        out["setup"] = {"partitions": [p.name for p in fed.partitions], "proxy_partitions": [p.name for p in fed.partitions],
                        "configmaps_created": created, "namespaces": TENANT_NAMESPACES}
        for encoding in encodings:
            for rate in rates:
                out["cases"].append(run_step(fed=fed, proxy=proxy, proxy_kubeconfig=proxy_kubeconfig, procs=procs,
                                             encoding=encoding, rate=rate, args=args))
        try:
            captured = asyncio.run(capture(fed, procs, args))
            out["capture"] = {"source": "raw watches of tp1 and tp2 in this run", **save_capture(captured, root / "capture")}
        except (RuntimeError, OSError, aiohttp.ClientError, subprocess.TimeoutExpired) as exc:
            log(f"capture failed ({exc!r}); timing the rewrite on tests/routing/testdata/protobuf/watch-pods.bin")
            out["capture"] = {"source": "tests/routing/testdata/protobuf/watch-pods.bin", "error": repr(exc)}
    finally:
        if procs is not None:
            procs.stop_all()
        if proxy is not None:
            proxy.stop()
        fed.stop()
        log("federation, proxy and Go clients stopped")
    if proxy is not None:
        log("timing the rewrite per event (everything else stopped)")
        out["rewrite_cost"] = rewrite_cost(captured or fixture_events(), proxy.config_path, args.timeit_repeat)
        out["rewrite_cost"]["source"] = out["capture"]["source"]
    out["targets"] = targets(out["cases"])
    notes = [f"{c['run']}: {c['note']}" for c in out["cases"] if "note" in c]
    if notes:
        out["note"] = "; ".join(notes)
    out["total_seconds"] = round(time.monotonic() - t0, 1)
    emit(NAME, out)


if __name__ == "__main__":
    main()
