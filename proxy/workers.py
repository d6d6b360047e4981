"""`partition-proxy serve --workers N`: N worker processes behind one listening port.

Each worker is a whole proxy (its partition clients, watch caches, limits, event loop) started
as `python -m proxy.cli serve --config F --workers 1 --reuse-port`; every worker binds the port
with SO_REUSEPORT and Linux spreads new connections over them by a hash of the connection's
addresses, so one connection (a kubelet's HTTP/2 connection with all its watches) stays with one
worker. One Python process uses one core; N workers use N.

Trade-offs, per replica: each worker holds every configured watch cache and its upstream
watches (cache memory and upstream watches x N); limits (`limits.*`, `failure.max_inflight_*`)
are per worker, as they are per replica; `/debug/caches` and `/readyz` answer for the worker
that took the connection. `/metrics` is the aggregate of all workers, merged at scrape time
(proxy.metrics_workers, over Unix sockets in a directory the supervisor creates and removes).

The supervisor (this module) forwards SIGTERM and SIGINT to every worker and waits for them. A
worker that exits on its own is replaced by a new one with the same index, as gunicorn's
arbiter does; only its own connections end, and while it starts again the kernel gives new
connections to the workers still listening. Replacing only the dead worker keeps the other
workers' kubelets connected: taking the whole replica down instead (what this supervisor did
before) made every kubelet of the replica reconnect at once, and in the soak that storm left
Leases unrenewed for up to 39 s after one worker's SIGKILL (bench/soak.py, 500 kubelets on 2
cores). A worker that keeps dying is not replaced for ever: past MAX_REPLACEMENTS within
REPLACEMENT_WINDOW_SECONDS the supervisor stops the others and exits with its code, and the
container's restart back-off takes over (CrashLoopBackOff). Every replacement is logged with
the dead worker's exit code. A worker dies with its supervisor (Linux PR_SET_PDEATHSIG), so a
supervisor killed by SIGKILL leaves no worker holding the port.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from proxy.metrics import METRICS_DIR_ENV
from proxy.metrics_workers import socket_path

log = logging.getLogger("partition_proxy.workers")

# The environment variable that tells a worker its index (0..N-1), for its log lines.
WORKER_ENV = "PARTITION_PROXY_WORKER"
# seconds between two checks of the workers: a worker's death is noticed within it.
_POLL_SECONDS = 0.2
# seconds a worker gets to stop after the supervisor stops it (before SIGKILL): the graceful
# stop's drain and grace plus slack. proxy.cli passes failure.shutdown_drain_seconds +
# failure.shutdown_grace_seconds.
_KILL_SLACK_SECONDS = 5.0
# workers replaced within REPLACEMENT_WINDOW_SECONDS before the supervisor gives up and exits:
# a worker that dies at start (bad config read after SIGHUP, port taken, import error) dies
# again within seconds, and 5 in 60 s is a loop that a new process will not break.
MAX_REPLACEMENTS = 5
# seconds: the window MAX_REPLACEMENTS is counted over.
REPLACEMENT_WINDOW_SECONDS = 60.0
# prctl(2) option: the signal the kernel sends a process when its parent thread exits.
_PR_SET_PDEATHSIG = 1
# cgroup v2 CPU limit of the container (quota and period in microseconds, or "max").
_CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def available_cpus() -> int:
    """The CPUs this process may use: its affinity, capped by the cgroup v2 CPU quota rounded
    up (a pod with `limits.cpu: 1500m` gets 2)."""
    cpus = len(os.sched_getaffinity(0))
    try:
        quota, period = _CGROUP_CPU_MAX.read_text().split()
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 limit to read: the affinity is the limit
    return cpus


def _die_with_supervisor() -> None:
    """preexec_fn of a worker: SIGKILL from the kernel when the supervisor dies (Linux only;
    elsewhere a no-op). The supervisor starts workers from its main thread, which lives as long
    as it does."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def run_workers(worker_argv: list[str], workers: int, grace: float) -> int:
    """Start `workers` processes `sys.executable -m proxy.cli <worker_argv>`, supervise them as
    the module docstring says (a worker that exits on its own is replaced), and return the exit
    code: 0 when they stopped on a signal and exited 0, else the code of the worker whose death
    made the supervisor give up (MAX_REPLACEMENTS)."""
    metrics_dir = tempfile.mkdtemp(prefix="partition-proxy-metrics-")
    env = {**os.environ, METRICS_DIR_ENV: metrics_dir}
    procs: list[subprocess.Popen[bytes]] = []
    stopping = False

    def stop_all(signum: int = signal.SIGTERM) -> None:  # also forwards SIGHUP
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        stop_all(signum)

    def on_hangup(signum: int, frame: object) -> None:  # reload the config: every worker re-reads it
        stop_all(signal.SIGHUP)

    def start(index: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "proxy.cli", *worker_argv], env={**env, WORKER_ENV: str(index)},
                                preexec_fn=_die_with_supervisor)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hangup)
    code = 0
    replaced: list[float] = []  # monotonic times of the replacements within the window
    try:
        for index in range(workers):
            procs.append(start(index))
        log.info("started %d workers: pids %s", workers, " ".join(str(p.pid) for p in procs))
        ended: set[int] = set()
        stop_deadline = math.inf
        while len(ended) < len(procs):
            for index, proc in enumerate(procs):
                if index in ended or proc.poll() is None:
                    continue
                rc = proc.returncode
                asked = stopping and rc in (0, -signal.SIGTERM, -signal.SIGINT)
                if not stopping:
                    now = time.monotonic()
                    replaced = [t for t in replaced if now - t < REPLACEMENT_WINDOW_SECONDS]
                    if len(replaced) < MAX_REPLACEMENTS:
                        replaced.append(now)
                        _forget_metrics(metrics_dir, proc.pid)
                        procs[index] = start(index)
                        if stopping:  # SIGTERM or SIGINT came while it started
                            procs[index].send_signal(signal.SIGTERM)
                        log.error("worker %d (pid %d) exited with %d: replaced by pid %d", index, proc.pid, rc,
                                  procs[index].pid)
                        continue
                    log.error("worker %d (pid %d) exited with %d, %d workers died within %.0f s: stopping the others",
                              index, proc.pid, rc, len(replaced) + 1, REPLACEMENT_WINDOW_SECONDS)
                    stopping = True
                    stop_all()
                elif not asked:
                    log.error("worker %d (pid %d) exited with %d while stopping", index, proc.pid, rc)
                ended.add(index)
                if not asked and code == 0:
                    code = rc if rc > 0 else 1
            if stopping and stop_deadline == math.inf:
                stop_deadline = time.monotonic() + grace + _KILL_SLACK_SECONDS
            elif time.monotonic() > stop_deadline:
                stop_all(signal.SIGKILL)
            time.sleep(_POLL_SECONDS)
    finally:
        stop_all(signal.SIGKILL)
        for proc in procs:
            proc.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(metrics_dir, ignore_errors=True)
    return code


def _forget_metrics(directory: str, pid: int) -> None:
    """Remove a dead worker's metrics socket (proxy.metrics_workers.socket_path), so scrapes
    stop asking it. Its counters go with it, which Prometheus reads as a counter reset."""
    try:
        socket_path(directory, pid).unlink()
    except FileNotFoundError:
        pass
