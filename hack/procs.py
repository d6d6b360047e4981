"""Spawn and stop the local processes of a federation: partitions, proxies, the control plane,
toxiproxy, benchmark clients. Every one dies with its launcher, from whatever thread it was
started, and every stop escalates to SIGKILL.

Owns: `spawn` (own session, stdin closed, stdout and stderr into one log file, Linux
PR_SET_PDEATHSIG so the kernel SIGKILLs the child when its launcher dies, even by SIGKILL or a
test timeout), `stop_process` (SIGTERM to the process group, a grace period, then SIGKILL:
a kube-apiserver whose etcd is gone ignores SIGTERM), `ProcessGroup` (processes started one by
one, readiness polling, stopped in reverse order), resident memory, and which of some
processes holds a socket on a port (`listening`, `serving`: with SO_REUSEPORT the kernel picks
the listener, so only /proc can tell). Does not own: what the processes are
(hack/federation.py, hack/controlplane.py, hack/proxy_process.py).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import http.client
import os
import queue
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# seconds a process gets between SIGTERM and SIGKILL: every component of hack/controlplane.py
# exits within a second of SIGTERM (`make run` stops its 18 processes in under 2 s); a
# kube-apiserver whose etcd stopped first never exits on SIGTERM and is killed after it.
STOP_GRACE_SECONDS = 5.0
# lines of a log a start-up error quotes
_TAIL_LINES = 30


class FederationError(RuntimeError):
    """A local component failed to start or stop."""


def tail(path: Path, lines: int = _TAIL_LINES) -> str:
    """The last `lines` lines of a log file, or why it cannot be read."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"<cannot read {path}: {e}>"


_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """preexec_fn: have Linux SIGKILL the child when the thread that started it dies (even by
    SIGKILL or os._exit, e.g. a test timeout). Tied to the spawning *thread*: `spawn` runs it
    only on threads that live as long as the process."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


class _Spawner:
    """One daemon thread that starts the children asked for by threads which may end before
    them (asyncio.to_thread workers, a test's helper thread): the death signal follows the
    thread that forked, and this one lives until the process exits."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def run(self, job: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="process-spawner", daemon=True)
                self._thread.start()
        done: Future[Any] = Future()
        self._jobs.put((job, done))
        return done.result()

    def _loop(self) -> None:
        while True:
            job, done = self._jobs.get()
            try:
                done.set_result(job())
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                done.set_exception(e)


_SPAWNER = _Spawner()


def spawn(argv: Sequence[str], *, log: Path, env: Mapping[str, str] | None = None,
          cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start `argv` in its own session with stdin closed and stdout and stderr appended to
    `log`, killed by Linux when this process dies. `env` adds to os.environ. Raises OSError
    when the program cannot be started."""
    log.parent.mkdir(parents=True, exist_ok=True)

    def start() -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=die_with_parent,
                env={**os.environ, **env} if env else None, cwd=cwd,
            )

    if threading.current_thread() is threading.main_thread():
        return start()
    result: subprocess.Popen[bytes] = _SPAWNER.run(start)
    return result


def signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    """Send `sig` to the process group of `proc` (started in its own session, so the group's
    id is its pid): to its children too, even when `proc` itself has already ended."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop_process(proc: subprocess.Popen[Any] | None, grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM the process group of `proc`, wait up to `grace` seconds for `proc`, then SIGKILL
    what is left of the group (children orphaned by a leader that died first included) and reap
    `proc`."""
    stop_processes([proc] if proc is not None else [], grace)


def stop_processes(procs: Sequence[subprocess.Popen[Any]], grace: float = STOP_GRACE_SECONDS) -> None:
    """`stop_process` for several at once: all get SIGTERM, then share one `grace` period."""
    for proc in procs:
        if proc.poll() is None:
            signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        signal_group(proc, signal.SIGKILL)
        proc.wait()


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
        popen = spawn(argv, log=log, env=env, cwd=cwd)
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
                                          f"{proc.log}:\n{tail(proc.log)}")
                try:
                    if ready(proc):
                        pending.remove(proc)
                except (OSError, http.client.HTTPException):
                    pass
            if pending and time.monotonic() > deadline:
                proc = pending[0]
                raise FederationError(f"{proc} not ready after {timeout:.0f} s; last lines of "
                                      f"{proc.log}:\n{tail(proc.log)}")
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
            stop_process(proc.popen, grace)
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


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in /proc (processes that end meanwhile are left out)."""
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            out[int(entry)] = int(stat.rsplit(b")", 1)[1].split()[1])  # the field after "(comm) state"
    return out


def children(pid: int) -> list[int]:
    """The pids whose parent is `pid`."""
    return sorted(child for child, parent in _parents().items() if parent == pid)


def descendants(pid: int) -> set[int]:
    """Every process below `pid` in the process tree (children, their children, ...)."""
    below: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        below.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = list(below.get(pid, []))
    while todo:
        p = todo.pop()
        if p not in found:
            found.add(p)
            todo.extend(below.get(p, []))
    return found


def alive(pid: int) -> bool:
    """`pid` is a process that has not ended (a zombie, ended but not reaped, counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


# /proc/net/tcp `st` field (include/net/tcp_states.h)
TCP_ESTABLISHED = 0x01
TCP_LISTEN = 0x0A


@dataclass(frozen=True, slots=True)
class TcpSocket:
    """One line of /proc/net/tcp: ports, state (TCP_ESTABLISHED, TCP_LISTEN, ...) and the
    socket's inode."""

    local_port: int
    remote_port: int
    state: int
    inode: int


def parse_proc_net_tcp(text: str) -> list[TcpSocket]:
    """The sockets of a /proc/net/tcp or tcp6 text (header line skipped). Addresses are
    `HEXIP:HEXPORT`; `st` is the state in hex; the inode is the 10th field (proc(5))."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10:
            continue
        local, remote = fields[1], fields[2]
        out.append(TcpSocket(local_port=int(local.rsplit(":", 1)[1], 16), remote_port=int(remote.rsplit(":", 1)[1], 16),
                             state=int(fields[3], 16), inode=int(fields[9])))
    return out


def read_sockets() -> list[TcpSocket]:
    """Every TCP socket of this network namespace (IPv4 and IPv6 tables)."""
    out = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            out += parse_proc_net_tcp(Path(name).read_text())
    return out


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets `pid` holds open (its /proc/<pid>/fd links `socket:[inode]`;
    empty when it ended)."""
    out = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    with contextlib.suppress(OSError):
        for fd in os.listdir(fd_dir):
            with contextlib.suppress(OSError):
                link = os.readlink(fd_dir / fd)
                if link.startswith("socket:["):
                    out.add(int(link[8:-1]))
    return out


def listening(pids: Sequence[int], port: int) -> set[int]:
    """Those of `pids` that hold a listening socket on `port` (several do with SO_REUSEPORT)."""
    inodes = {s.inode for s in read_sockets() if s.state == TCP_LISTEN and s.local_port == port}
    return {pid for pid in pids if socket_inodes(pid) & inodes}


def serving(pids: Sequence[int], port: int, client_port: int) -> int | None:
    """Which of `pids` holds the server side of the connection from `client_port` to `port`:
    with SO_REUSEPORT the kernel picks the listener, so the client cannot know; None when none
    of them does."""
    inodes = {s.inode for s in read_sockets()
              if s.state == TCP_ESTABLISHED and s.local_port == port and s.remote_port == client_port}
    return next((pid for pid in pids if socket_inodes(pid) & inodes), None)
