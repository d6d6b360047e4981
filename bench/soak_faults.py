"""The soak's fault injectors (bench/soak.py): each fault of bench/soak_schedule.py done to the
real components, and undone; `Faults.inject` returns the window it was in force.

A window starts just before the injection and ends when the fault is healed: the component
restarted and ready (a kube-apiserver's /readyz straight from it, a proxy replica's /readyz),
the toxic removed, the link enabled, the config change served by every worker of every replica,
the burst's last write answered. Client-visible 5xx must fall inside it, or within the breaker's
open time plus 2 s after it (bench/soak_checks.py `attribute_errors`).

Blocking steps (process starts, toxiproxy's HTTP API) run in threads (asyncio.to_thread): the
recorders keep reading meanwhile. hack.procs.spawn keeps die-with-parent for processes started
from those threads.

Replica faults take `Replicas.busy` for their replica while they stop and start it, so the
soak's Deployment stand-in (`Replicas.supervise`) does not restart it under them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml
from toxiproxy.proxy import Proxy

from bench.common import apiserver_pid, hollow_node
from bench.soak_checks import Window
from bench.soak_record import Clock, EpochArchive, ErrorLog, parse_samples
from bench.soak_schedule import (
    APISERVER_KILL,
    EPOCH_BURST,
    ETCD_RESTART,
    JOIN,
    LATENCY,
    RESET,
    RETIRE,
    ROLLING_RESTART,
    SYSTEM_UNREACHABLE,
    WORKER_KILL,
    PlannedFault,
)
from hack.federation import Federation
from hack.procs import FederationError, children
from hack.proxy_process import ProxyProcess

# seconds
READY_TIMEOUT = 120.0  # a restarted kube-apiserver, etcd or proxy replica
VERSION_TIMEOUT = 30.0  # every worker of every replica serving a new partition set
LATENCY_MS, JITTER_MS, LATENCY_SECONDS = 400, 100, 20.0
RESET_AFTER_MS, RESET_SECONDS = 500, 10.0
BURST_CONCURRENCY = 8
BURST_MAX_WRITES = 12_000  # give up on the roll after this many writes (the report says so)
BURST_CHECK_EVERY = 250  # writes between two reads of the epoch table
BURST_OBJECTS = 16  # ConfigMaps the burst updates round robin (updates: no objects pile up)
JOINED_NODES = 4  # nodes a joining RP holds
JOINED_WRITE_SECONDS = 2.0  # a joined RP's nodes get a label change this often (events to check)


@dataclass
class Replicas:
    """The proxy replicas by name ("A", "B") and which ones a fault is working on. `supervise`
    is what a Deployment does: a replica whose process exited is started again; outside a
    replica fault that restart is unexpected and recorded."""

    procs: dict[str, ProxyProcess]
    clock: Clock
    busy: set[str] = field(default_factory=set)
    unexpected: list[dict[str, Any]] = field(default_factory=list)

    def pids(self) -> dict[str, int | None]:
        return {name: (p.popen.pid if p.popen is not None and p.popen.poll() is None else None) for name, p in self.procs.items()}

    async def supervise(self, interval: float = 1.0) -> None:
        while True:
            for name, proxy in self.procs.items():
                if name in self.busy or proxy.popen is None or proxy.popen.poll() is None:
                    continue
                self.busy.add(name)
                try:
                    code = await asyncio.to_thread(proxy.restart_if_exited, READY_TIMEOUT)
                    if code is not None:
                        self.unexpected.append({"t": round(self.clock.now(), 1), "replica": name, "exit_code": code})
                except FederationError as exc:
                    self.unexpected.append({"t": round(self.clock.now(), 1), "replica": name, "error": str(exc)[:300]})
                finally:
                    self.busy.discard(name)
            await asyncio.sleep(interval)


@dataclass
class FaultResult:
    planned: PlannedFault
    window: Window
    detail: dict[str, Any]


@dataclass
class Faults:
    """Everything the injectors act on. `joined` (partition -> the native RV its nodes were at
    when the soak started writing to them) and `retired` are read by the checkers."""

    fed: Federation
    links: Mapping[str, Proxy]
    kubeconfigs: Mapping[str, Path]  # the proxies' kubeconfigs of every partition, through toxiproxy
    replicas: Replicas
    workers: Mapping[str, int]  # replica -> workers
    clock: Clock
    archive: EpochArchive
    admin: Mapping[str, aiohttp.ClientSession]  # partition -> an admin session straight to it; "A"/"B" through a replica
    errors: ErrorLog
    refresh_seconds: float
    on_partition_started: Callable[[str], Awaitable[None]]  # a joining partition is up: start its truth recorders
    joined: dict[str, int] = field(default_factory=dict)
    retired: list[str] = field(default_factory=list)
    _writers: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    async def inject(self, fault: PlannedFault) -> FaultResult:
        """Inject `fault`, wait for its heal; the window and what was done."""
        action: dict[str, Callable[[str], Awaitable[dict[str, Any]]]] = {
            APISERVER_KILL: self.apiserver_kill, ETCD_RESTART: self.etcd_restart, LATENCY: self.latency, RESET: self.reset,
            SYSTEM_UNREACHABLE: self.system_unreachable, WORKER_KILL: self.worker_kill, ROLLING_RESTART: self.rolling_restart,
            JOIN: self.join, RETIRE: self.retire, EPOCH_BURST: self.epoch_burst,
        }
        start = self.clock.now()
        try:
            detail = await action[fault.kind](fault.target)
        except (FederationError, OSError, RuntimeError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
            detail = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        end = self.clock.now()
        return FaultResult(fault, Window(fault.name, start, end), detail)

    # -- partitions ------------------------------------------------------------------------------

    async def apiserver_kill(self, partition: str) -> dict[str, Any]:
        """SIGKILL the partition's kube-apiserver; start it again on the same etcd."""
        pid = apiserver_pid(self.fed.partition(partition))
        t0 = time.monotonic()
        await asyncio.to_thread(self.fed.kill_apiserver, partition)
        await asyncio.to_thread(self.fed.start_apiserver, partition, READY_TIMEOUT)
        return {"killed_pid": pid, "restart_s": round(time.monotonic() - t0, 2)}

    async def etcd_restart(self, partition: str) -> dict[str, Any]:
        """Stop the partition's etcd (SIGTERM), start it again on the same data, wait until
        its kube-apiserver is ready again."""
        t0 = time.monotonic()
        await asyncio.to_thread(self.fed.restart_etcd, partition, READY_TIMEOUT)
        t_etcd = time.monotonic() - t0
        await asyncio.to_thread(self.fed.wait_apiserver_ready, partition, READY_TIMEOUT)
        return {"etcd_down_and_up_s": round(t_etcd, 2), "apiserver_ready_s": round(time.monotonic() - t0, 2)}

    async def latency(self, partition: str) -> dict[str, Any]:
        attributes = {"latency": LATENCY_MS, "jitter": JITTER_MS}
        await self._toxic(partition, "latency", attributes, LATENCY_SECONDS)
        return {"latency_ms": LATENCY_MS, "jitter_ms": JITTER_MS, "seconds": LATENCY_SECONDS}

    async def reset(self, partition: str) -> dict[str, Any]:
        await self._toxic(partition, "reset_peer", {"timeout": RESET_AFTER_MS}, RESET_SECONDS)
        return {"reset_after_ms": RESET_AFTER_MS, "seconds": RESET_SECONDS}

    async def _toxic(self, partition: str, kind: str, attributes: dict[str, Any], seconds: float) -> None:
        link = self.links[partition]
        names = [f"soak-{kind}-{stream}" for stream in ("downstream", "upstream")]
        try:
            for name, stream in zip(names, ("downstream", "upstream")):
                await asyncio.to_thread(link.add_toxic, type=kind, stream=stream, attributes=attributes, name=name)
            await asyncio.sleep(seconds)
        finally:
            for name in names:
                with contextlib.suppress(Exception):  # toxiproxy's client raises its own errors for a missing toxic
                    await asyncio.to_thread(link.destroy_toxic, name)

    async def system_unreachable(self, partition: str) -> dict[str, Any]:
        """The system partition (it holds the epoch table) cut off from the proxies for longer
        than resource_versions.refresh_seconds."""
        seconds = 2 * self.refresh_seconds + 2
        link = self.links[partition]
        await asyncio.to_thread(link.disable)
        try:
            await asyncio.sleep(seconds)
        finally:
            await asyncio.to_thread(link.enable)
        return {"seconds": seconds, "refresh_seconds": self.refresh_seconds}

    # -- replicas ----------------------------------------------------------------------------------

    async def worker_kill(self, replica: str) -> dict[str, Any]:
        """SIGKILL one worker of the replica: its supervisor replaces it (proxy.workers) and the
        other workers keep serving; healed once a new worker runs and every worker of the
        replica answers in its /metrics. A replica of one worker has no supervisor: it exits
        and is started again by restart_if_exited, as a Deployment would."""
        proxy = self.replicas.procs[replica]
        self.replicas.busy.add(replica)
        try:
            assert proxy.popen is not None
            supervisor = proxy.popen
            workers = children(supervisor.pid)
            t0 = time.monotonic()
            deadline = t0 + READY_TIMEOUT
            if not workers:  # one worker: the replica's process is the worker
                os.kill(supervisor.pid, signal.SIGKILL)
                code = None
                while code is None and time.monotonic() < deadline:
                    await asyncio.sleep(0.3)
                    code = await asyncio.to_thread(proxy.restart_if_exited, READY_TIMEOUT)
                if code is None:
                    raise RuntimeError(f"replica {replica} still running {READY_TIMEOUT:.0f} s after it was killed")
                return {"killed_worker_pid": supervisor.pid, "workers_before": 1, "exit_code": code,
                        "back_s": round(time.monotonic() - t0, 2)}
            victim = workers[0]
            os.kill(victim, signal.SIGKILL)
            while True:
                if supervisor.poll() is not None:
                    raise RuntimeError(f"replica {replica} exited ({supervisor.returncode}) when its worker {victim} was killed")
                now = children(supervisor.pid)
                if victim not in now and len(now) >= len(workers) and sum((await self._versions(replica)).values()) >= len(workers):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"replica {replica}: worker {victim} not replaced after {READY_TIMEOUT:.0f} s ({now})")
                await asyncio.sleep(0.2)
            return {"killed_worker_pid": victim, "workers_before": len(workers),
                    "replaced_by": sorted(set(now) - set(workers)), "back_s": round(time.monotonic() - t0, 2)}
        finally:
            self.replicas.busy.discard(replica)

    async def rolling_restart(self, replica: str) -> dict[str, Any]:
        """What the chart's rolling update does to one replica (maxSurge 1, maxUnavailable 0):
        a new process on the same port becomes ready beside the old one, then the old one gets
        SIGTERM (it ends every watch cleanly) and its clients reconnect to the new one, as they
        would through the Service (ProxyProcess.roll)."""
        proxy = self.replicas.procs[replica]
        self.replicas.busy.add(replica)
        try:
            t0 = time.monotonic()
            t_stop = await asyncio.to_thread(proxy.roll, READY_TIMEOUT)
            return {"stop_s": round(t_stop, 2), "back_s": round(time.monotonic() - t0, 2)}
        finally:
            self.replicas.busy.discard(replica)

    # -- the partition set ---------------------------------------------------------------------------

    async def join(self, partition: str) -> dict[str, Any]:
        """Start a deferred RP with a few nodes, add it to every replica's config (SIGHUP),
        wait until every worker serves it; then start writing to its nodes (straight on it)."""
        t0 = time.monotonic()
        await asyncio.to_thread(self.fed.start_partitions, [partition])
        base = self.fed.partition(partition).server
        http = self.admin[partition]
        names = [f"{partition}-joined-{i}" for i in range(JOINED_NODES)]
        for name in names:
            async with http.post(f"{base}/api/v1/nodes", data=orjson.dumps(hollow_node(name)),
                                 headers={"Content-Type": "application/json"}) as resp:
                if resp.status != 201:
                    raise RuntimeError(f"creating node {name} on {partition}: {resp.status} {(await resp.text())[:200]}")
        await self.on_partition_started(partition)

        def change(config: dict[str, Any]) -> None:
            config["partitions"].append({"name": partition, "role": "resource", "kubeconfig": str(self.kubeconfigs[partition])})
            config["nodes"]["prefixes"][f"{partition}-"] = partition

        versions = await self._reconfigure(change)
        floor = await self._position(partition)
        self.joined[partition] = floor
        self._writers[partition] = asyncio.create_task(self._touch_nodes(partition, names), name=f"writer-{partition}")
        return {"nodes": len(names), "versions": versions, "served_s": round(time.monotonic() - t0, 2), "floor_rv": floor}

    async def retire(self, partition: str) -> dict[str, Any]:
        """Stop writing to the joined RP, then retire it in every replica's config."""
        writer = self._writers.pop(partition, None)
        if writer is not None:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        await asyncio.sleep(2)  # the last writes reach every watch before the set changes

        def change(config: dict[str, Any]) -> None:
            for p in config["partitions"]:
                if p["name"] == partition:
                    p["state"] = "retired"
            config["nodes"]["prefixes"].pop(f"{partition}-", None)

        t0 = time.monotonic()
        versions = await self._reconfigure(change)
        self.retired.append(partition)
        return {"versions": versions, "served_s": round(time.monotonic() - t0, 2)}

    async def _reconfigure(self, change: Callable[[dict[str, Any]], None]) -> dict[str, str]:
        """Rewrite every replica's config file with `change`, SIGHUP them, and wait until every
        worker of every replica serves the new partition set; its version per replica."""
        old = {name: await self._versions(name) for name in self.replicas.procs}
        for proxy in self.replicas.procs.values():
            rewrite(proxy.config_path, change)
        for proxy in self.replicas.procs.values():
            if proxy.popen is not None and proxy.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proxy.popen.pid, signal.SIGHUP)
        out = {}
        for name in self.replicas.procs:
            deadline = time.monotonic() + VERSION_TIMEOUT
            while True:
                served = await self._versions(name)
                new = {v: n for v, n in served.items() if v not in old[name] and n >= self.workers[name]}
                if new:
                    out[name] = next(iter(new))
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"replica {name} does not serve the new partition set after {VERSION_TIMEOUT:.0f} s: {served}")
                await asyncio.sleep(0.2)
        return out

    async def _versions(self, replica: str) -> dict[str, float]:
        """partition_proxy_partition_set_info of a replica: version -> workers serving it."""
        http = self.admin[replica]
        server = self.replicas.procs[replica].server
        try:
            async with http.get(f"{server}/metrics", headers={"Accept": "text/plain"}, timeout=aiohttp.ClientTimeout(total=10)) as resp:
                text = await resp.text()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return {}
        return {labels.get("version", ""): value for _, labels, value in parse_samples(text, ["partition_proxy_partition_set_info"])
                if value > 0}

    async def _position(self, partition: str) -> int:
        """The partition's current native RV (a LIST's resourceVersion, straight from it)."""
        base = self.fed.partition(partition).server
        async with self.admin[partition].get(f"{base}/api/v1/nodes", params={"limit": "1"}) as resp:
            doc = orjson.loads(await resp.read())
        return int(doc["metadata"]["resourceVersion"])

    async def _touch_nodes(self, partition: str, names: Sequence[str]) -> None:
        """Change a label of the joined RP's nodes, one every JOINED_WRITE_SECONDS, straight on it."""
        base = self.fed.partition(partition).server
        http = self.admin[partition]
        i = 0
        while True:
            await asyncio.sleep(JOINED_WRITE_SECONDS)
            name = names[i % len(names)]
            body = orjson.dumps({"metadata": {"labels": {"soak-step": str(i)}}})
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
                async with http.patch(f"{base}/api/v1/nodes/{name}", data=body,
                                      headers={"Content-Type": "application/merge-patch+json"}) as resp:
                    await resp.read()
            i += 1

    async def stop_writers(self) -> None:
        for task in self._writers.values():
            task.cancel()
        for task in self._writers.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._writers.clear()

    # -- the resourceVersion epoch ----------------------------------------------------------------

    async def epoch_burst(self, partition: str) -> dict[str, Any]:
        """Writes into one TP through the replicas (ConfigMap updates, round robin over
        BURST_OBJECTS) until the epoch table (read straight from the system partition) has a
        new epoch of a space holding that partition, or BURST_MAX_WRITES."""
        namespace = "nova-burst" if partition == "tp2" else "acme-burst"
        servers = {name: self.replicas.procs[name].server for name in self.replicas.procs}
        await self.archive.read()
        before = {space: n for space, n in _space_counts(self.archive).items() if partition in space}
        start_rv = await self._native_rv(partition)
        await self._request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                            servers, ok=(201, 409))
        writes = failed = 0
        rolled: dict[str, int] = {}
        t0 = time.monotonic()
        counter = iter(range(BURST_MAX_WRITES))

        async def writer() -> None:
            nonlocal writes, failed
            for i in counter:
                if rolled:
                    return
                name = f"burst-{i % BURST_OBJECTS}"
                body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
                        "data": {"i": str(i)}}
                status = await self._request("PUT", f"/api/v1/namespaces/{namespace}/configmaps/{name}", body, servers,
                                             ok=(200, 201, 404))
                if status == 404:
                    status = await self._request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body, servers, ok=(201, 409))
                writes += 1
                if status not in (200, 201, 409):
                    failed += 1
                if writes % BURST_CHECK_EVERY == 0 and await self.archive.read():
                    now = _space_counts(self.archive)
                    rolled.update({",".join(s): now[s] - before.get(s, 0) for s in now if partition in s and now[s] > before.get(s, 0)})

        await asyncio.gather(*(writer() for _ in range(BURST_CONCURRENCY)))
        end_rv = await self._native_rv(partition)
        seconds = time.monotonic() - t0
        return {"namespace": namespace, "writes": writes, "failed": failed, "write_rate_per_s": round(writes / seconds, 1),
                "native_rv_advanced": end_rv - start_rv, "epochs_published": rolled, "rolled": bool(rolled)}

    async def _native_rv(self, partition: str) -> int:
        base = self.fed.partition(partition).server
        async with self.admin[partition].get(f"{base}/api/v1/namespaces", params={"limit": "1"}) as resp:
            return int(orjson.loads(await resp.read())["metadata"]["resourceVersion"])

    async def _request(self, method: str, path: str, body: Any, servers: Mapping[str, str], *, ok: Sequence[int]) -> int:
        """One write through a replica (the first that answers, as through a Service); 5xx and
        unanswered requests go to the error log. Returns the status (0: none answered)."""
        data = orjson.dumps(body)
        status = 0
        for name, server in servers.items():
            try:
                async with self.admin[name].request(method, server + path, data=data, headers={"Content-Type": "application/json"},
                                                    timeout=aiohttp.ClientTimeout(total=30)) as resp:
                    text = await resp.read()
                    status = resp.status
                    if status >= 500:
                        self.errors.add(status, f"burst {method}@{name}", text[:200].decode(errors="replace"))
                    return status
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                self.errors.add(0, f"burst {method}@{name}", repr(exc))
        return status


def _space_counts(archive: EpochArchive) -> dict[tuple[str, ...], int]:
    out: dict[tuple[str, ...], int] = {}
    for e in archive.epochs.values():
        out[e.partitions] = out.get(e.partitions, 0) + 1
    return out


def rewrite(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Change a proxy's config file in place, as an operator would (one write)."""
    config = yaml.safe_load(path.read_text())
    change(config)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.replace(path)
