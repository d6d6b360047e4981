"""Supervise a group of local processes: start each with its log file and PDEATHSIG, wait until
it is ready, stop them all in reverse order of start.

Owns: spawning (own session, stdin closed, stdout and stderr into one log file, killed by Linux
when the thread that started it dies, as the partitions are: hack/federation.py
`_die_with_parent`), readiness polling, stopping (SIGTERM, then SIGKILL after a grace period)
and resident memory of the group. Does not own: what the processes are (hack/controlplane.py).
"""

from __future__ import annotations

import atexit
import http.client
import os
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hack.federation import FederationError, _die_with_parent, _signal, _tail

# seconds a process gets between SIGTERM and SIGKILL: every component of hack/controlplane.py
# exits within a second of SIGTERM (`make run` stops its 18 processes in under 2 s).
STOP_GRACE_SECONDS = 5.0


@dataclass(frozen=True)
class Process:
    """One started process: a name unique in its group, its argv and its log file."""

    name: str
    argv: tuple[str, ...]
    log: Path
    popen: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def __str__(self) -> str:
        return f"{self.name} (pid {self.popen.pid})"


class ProcessGroup:
    """Processes started one by one and stopped in reverse order; `stop()` is idempotent and
    registered with atexit while anything runs."""

    def __init__(self) -> None:
        self._procs: list[Process] = []
        self._lock = threading.Lock()

    @property
    def processes(self) -> list[Process]:
        with self._lock:
            return list(self._procs)

    def start(self, name: str, argv: Sequence[str], *, log: Path, env: Mapping[str, str] | None = None,
              cwd: Path | None = None) -> Process:
        """Start `argv` with stdout and stderr appended to `log`. `env` adds to os.environ."""
        if any(p.name == name for p in self.processes):
            raise FederationError(f"{name} already started")
        log.parent.mkdir(parents=True, exist_ok=True)
        # PDEATHSIG is tied to the spawning *thread*: only safe from the main thread.
        main = threading.current_thread() is threading.main_thread()
        with open(log, "ab") as out:
            popen = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_die_with_parent if main else None,
                env={**os.environ, **(env or {})}, cwd=cwd,
            )
        proc = Process(name, tuple(argv), log, popen)
        with self._lock:
            if not self._procs:
                atexit.register(self.stop)
            self._procs.append(proc)
        return proc

    def wait_ready(self, procs: Sequence[Process], ready: Callable[[Process], bool], *, timeout: float) -> None:
        """Poll `ready(process)` (exceptions count as not ready) every 0.25 s until it holds for
        every process. Raises FederationError, with the log's last lines, when a process exits
        or `timeout` seconds pass first."""
        deadline = time.monotonic() + timeout
        pending = list(procs)
        while pending:
            for proc in list(pending):
                if proc.popen.poll() is not None:
                    raise FederationError(f"{proc} exited with {proc.popen.returncode}; last lines of "
                                          f"{proc.log}:\n{_tail(proc.log)}")
                try:
                    if ready(proc):
                        pending.remove(proc)
                except (OSError, http.client.HTTPException):
                    pass
            if pending and time.monotonic() > deadline:
                proc = pending[0]
                raise FederationError(f"{proc} not ready after {timeout:.0f} s; last lines of "
                                      f"{proc.log}:\n{_tail(proc.log)}")
            if pending:
                time.sleep(0.25)

    def exited(self) -> list[Process]:
        """The processes that have ended (a supervisor's health check)."""
        return [p for p in self.processes if p.popen.poll() is not None]

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stop every process, the last started first: SIGTERM to its process group, up to
        `grace` seconds, then SIGKILL. Idempotent."""
        with self._lock:
            procs, self._procs = self._procs, []
        for proc in reversed(procs):
            _signal(proc.popen, signal.SIGTERM)
            try:
                proc.popen.wait(grace)
            except subprocess.TimeoutExpired:
                _signal(proc.popen, signal.SIGKILL)
                proc.popen.wait()
        atexit.unregister(self.stop)

    def rss_mib(self) -> float:
        """Resident memory of every running process of the group, MiB."""
        return rss_mib([p.pid for p in self.processes if p.popen.poll() is None])


def rss_mib(pids: Sequence[int]) -> float:
    """The sum of VmRSS of `pids` (MiB); processes that are gone count 0."""
    total_kib = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
        except OSError:
            pass
    return total_kib / 1024


def https_ok(port: int, path: str = "/healthz", *, context: ssl.SSLContext | None = None) -> bool:
    """GET https://127.0.0.1:<port><path> answers 200 (a component's self-signed serving
    certificate is not verified unless `context` says so)."""
    ctx = context or ssl._create_unverified_context()  # noqa: S323 - loopback health check
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    finally:
        conn.close()


def http_ok(port: int, path: str = "/healthz") -> bool:
    """GET http://127.0.0.1:<port><path> answers 200."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    finally:
        conn.close()
