"""Start partition-proxy as its own process in front of a local `Federation`.

Writes the proxy's configuration (tenant partitions by tenant name range `a`-`m` -> tp1,
`n`-`z` -> tp2, ...; nodes by name prefix `rp<N>-` -> rpN), a serving certificate from the
federation CA, and waits for the proxy's /readyz. Used by `make run` and the integration tests.
"""

from __future__ import annotations

import http.client
import os
import ssl
import string
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from hack.federation import Federation, _free_ports
from hack.openssl import proxy_env
from hack.procs import FederationError, children, serving, spawn, stop_process, tail

REPO = Path(__file__).resolve().parent.parent
# seconds the proxy gets between SIGTERM and SIGKILL: its graceful stop
# (failure.shutdown_drain_seconds + failure.shutdown_grace_seconds, 10 + 5 s by default) plus slack.
_STOP_GRACE_SECONDS = 20.0


def tenant_ranges(tenant_partitions: list[str]) -> list[dict[str, str]]:
    """Split a..z into contiguous ranges, one per tenant partition (Arktos-style)."""
    letters = string.ascii_lowercase
    n = len(tenant_partitions)
    out = []
    for i, name in enumerate(tenant_partitions):
        lo, hi = letters[i * 26 // n], letters[(i + 1) * 26 // n - 1]
        out.append({"first": lo, "last": hi, "partition": name})
    return out


def write_proxy_config(
    fed: Federation,
    directory: Path,
    *,
    port: int,
    partitions: Sequence[str] | None = None,
    caches: Sequence[dict[str, Any]] | None = None,
    kubeconfigs: Mapping[str, Path] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write the serving certificate and config.yaml for a proxy listening on 127.0.0.1:port,
    in front of `partitions` (default: all) with `caches` (default: the proxy's defaults).
    `kubeconfigs` replaces the proxy's kubeconfig of some partitions (e.g. through toxiproxy);
    `extra` adds config keys (auth, limits, ...), merged into the sections written here (a
    `listen` in it adds to the address, port and TLS, not replaces them)."""
    directory.mkdir(parents=True, exist_ok=True)
    crt, key = fed.ca.issue_serving(directory, "proxy-serving", ["127.0.0.1", "localhost"])
    members = [p for p in fed.partitions if partitions is None or p.name in partitions]
    tps = [p.name for p in members if p.role == "tenant"]
    rps = [p.name for p in members if p.role == "resource"]
    config = {
        "listen": {
            "address": "127.0.0.1",
            "port": port,
            "tls": {"cert_file": str(crt), "key_file": str(key), "client_ca_file": str(fed.ca_file)},
        },
        "partitions": [
            {"name": p.name, "role": p.role, "kubeconfig": str((kubeconfigs or {}).get(p.name, p.proxy_kubeconfig))}
            for p in members
        ],
        "system_partition": tps[0],
        "tenants": {"namespace_to_tenant": "prefix", "separator": "-", "ranges": tenant_ranges(tps)},
        "nodes": {"placement": "prefix", "prefixes": {f"{name}-": name for name in rps}},
    }
    if caches is not None:
        config["caches"] = list(caches)
    _merge(config, extra or {})
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


# 1 when CFS shares the CPUs between sessions (autogroups) rather than between threads
AUTOGROUP_SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")


def set_group_nice(pid: int, nice: int) -> str:
    """Give the scheduling group of `pid` the nice value `nice` (0: leave it). `spawn` starts
    every process in a session of its own, and with Linux's autogroup scheduling
    (`/proc/sys/kernel/sched_autogroup_enabled`) CFS shares the CPUs between sessions, not
    threads: a proxy's workers, children of its supervisor, share one group's weight, as a
    pod's processes share its CPU request. A negative value weighs the group as a pod whose
    request is larger than the other processes' (nice -5: about 3x; sched(7)). Without
    autogroups CFS weighs each process: the process gets the value, and the workers it starts
    inherit it. Returns "autogroup", "process" or "" (0). Raises OSError (PermissionError: a
    negative value needs CAP_SYS_NICE)."""
    if not nice:
        return ""
    group = Path(f"/proc/{pid}/autogroup")
    if group.exists() and AUTOGROUP_SWITCH.exists() and AUTOGROUP_SWITCH.read_text().strip() == "1":
        group.write_text(f"{nice}\n")
        return "autogroup"
    os.setpriority(os.PRIO_PROCESS, pid, nice)
    return "process"


class ProxyProcess:
    """One `partition-proxy serve` process. `start()` waits for /readyz; `stop()` ends it."""

    def __init__(
        self,
        fed: Federation,
        directory: Path,
        *,
        port: int | None = None,
        partitions: Sequence[str] | None = None,
        caches: Sequence[dict[str, Any]] | None = None,
        kubeconfigs: Mapping[str, Path] | None = None,
        extra: Mapping[str, Any] | None = None,
        workers: int | None = 1,
        event_loop: str | None = None,
        env: Mapping[str, str] | None = None,
        nice: int = 0,
    ) -> None:
        """`workers`: `serve --workers` (None: the proxy's default, one per CPU). Tests default
        to 1: one process holds every limit and cache they assert on. `env` adds to the
        process's environment (e.g. PYTHONTRACEMALLOC=1 for /debug/memory). `nice`: the nice
        value of the process's scheduling group (`set_group_nice`; 0 leaves it as it is)."""
        self.fed = fed
        self.workers = workers
        self.event_loop = event_loop
        self.env = {**proxy_env(), **(env or {})}  # the OpenSSL of the image (hack.openssl)
        self.nice = nice
        self.directory = directory
        self.port = port or _free_ports(1)[0]
        self.config_path = write_proxy_config(
            fed, directory, port=self.port, partitions=partitions, caches=caches, kubeconfigs=kubeconfigs, extra=extra
        )
        self.log_path = directory / "proxy.log"
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _ready(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.fed.ca_file))
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=5)
        try:
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def _argv(self) -> list[str]:
        exe = Path(sys.executable).parent / "partition-proxy"
        argv = [str(exe), "serve", "--config", str(self.config_path)]
        if self.workers is not None:
            argv += ["--workers", str(self.workers)]
        if self.event_loop is not None:
            argv += ["--event-loop", self.event_loop]
        return argv

    def start(self, timeout: float = 60.0) -> ProxyProcess:
        """Start the proxy (it dies with this process) and wait (seconds) for its /readyz.
        Raises FederationError."""
        self.popen = spawn(self._argv(), log=self.log_path, cwd=REPO, env=self.env)
        set_group_nice(self.popen.pid, self.nice)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise FederationError(f"partition-proxy exited with {self.popen.returncode}:\n{tail(self.log_path)}")
            if self._ready():
                return self
            time.sleep(0.2)
        stop_process(self.popen, grace=_STOP_GRACE_SECONDS)  # exited: restart_if_exited tries again
        raise FederationError(f"partition-proxy not ready after {timeout:.0f} s:\n{tail(self.log_path)}")

    def restart_if_exited(self, timeout: float = 60.0) -> int | None:
        """What a Deployment does for its replica: if the proxy process has exited (a worker
        died and its supervisor stopped the others, proxy.workers), start it again on the same
        port and config and wait (seconds) for /readyz. Returns the exit code of the process
        it replaced, or None when it was running (or was never started, or was stopped).
        Raises FederationError when the new process does not become ready."""
        if self.popen is None or self.popen.poll() is None:
            return None
        code = self.popen.returncode
        self.start(timeout)
        return code

    def roll(self, timeout: float = 60.0) -> float:
        """What the chart's rolling update does (maxSurge 1, maxUnavailable 0: a new replica is
        ready before the old one stops): start a new process on the same port and config beside
        the running one (its workers listen with SO_REUSEPORT too), wait (seconds) until each of
        its workers has answered /readyz with 200 on a connection the kernel gave that worker,
        then stop the old process; its clients reconnect to the port and reach the new workers.
        Needs `workers` >= 2 (one worker does not set SO_REUSEPORT). Returns the seconds the old
        process took to stop. Raises FederationError when the new one is not ready in time (it
        is stopped; the old one keeps serving)."""
        wanted = self.workers or 0
        if self.popen is None or self.popen.poll() is not None or wanted < 2:
            raise FederationError("roll needs a running proxy with at least 2 workers")
        new = spawn(self._argv(), log=self.log_path, cwd=REPO, env=self.env)
        set_group_nice(new.pid, self.nice)
        ready: set[int] = set()
        deadline = time.monotonic() + timeout
        while True:
            if new.poll() is not None:
                raise FederationError(f"the new partition-proxy exited with {new.returncode}:\n{tail(self.log_path)}")
            workers = children(new.pid)
            if len(workers) >= wanted and ready >= set(workers):
                break
            if time.monotonic() > deadline:
                stop_process(new, grace=_STOP_GRACE_SECONDS)
                raise FederationError(f"the new partition-proxy not ready after {timeout:.0f} s "
                                      f"(ready workers {sorted(ready)} of {workers}):\n{tail(self.log_path)}")
            worker = self._ready_worker(workers)
            if worker is None or worker in ready:
                time.sleep(0.1)
            else:
                ready.add(worker)
        old, self.popen = self.popen, new
        t0 = time.monotonic()
        stop_process(old, grace=_STOP_GRACE_SECONDS)
        return time.monotonic() - t0

    def _ready_worker(self, workers: Sequence[int]) -> int | None:
        """Open a connection to the port; if one of `workers` accepted it, that worker when its
        /readyz answers 200 on it, else None."""
        ctx = ssl.create_default_context(cafile=str(self.fed.ca_file))
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=5)
        try:
            conn.connect()
            assert conn.sock is not None
            worker = serving(workers, self.port, conn.sock.getsockname()[1])
            if worker is None:
                return None
            conn.request("GET", "/readyz")
            return worker if conn.getresponse().status == 200 else None
        except OSError:
            return None
        finally:
            conn.close()

    def stop(self) -> None:
        """SIGTERM, up to 10 s, then SIGKILL. Idempotent."""
        proc, self.popen = self.popen, None
        stop_process(proc, grace=_STOP_GRACE_SECONDS)


def _merge(into: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """Merge `extra` into `into`, mappings key by key, everything else replaced."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
