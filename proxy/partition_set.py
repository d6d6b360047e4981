"""The partition set at runtime: the config file re-read on SIGHUP and whenever its content
changes, and each accepted change applied without a restart (docs/partition-set.md).

Source: the file `serve --config` names. It is read every CONFIG_POLL_SECONDS and compared by
content (a helm ConfigMap mount changes by an atomic symlink swap, which a poll sees and an
inotify watch on the file would not), and at once on SIGHUP. Every replica and every worker
reads its own copy of the same file, so all converge within one kubelet ConfigMap sync plus one
poll; each reports the version it serves (`partition_proxy_partition_set_info{version}`,
`/debug/partitions`), which is how an operator knows a change has landed everywhere (a tenant
move waits for it before copying: docs/partition-set.md).

Why not a custom resource in the system partition: a partition that joins needs a credential
for the proxy, which is a file mounted into the proxy's pod (its kubeconfig); a set published
through the API would name files some replicas may not have yet. One source, the file, keeps
the credential and the set that uses it in the same update.

What a change does is `config.changes` (which changes are allowed) and `ProxyApp.reconfigure`
(applying one). A refused change is logged in one line and counted; the set in force stays.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from config import ConfigError, load_config
from config.changes import RuntimeChange, partition_set_version, runtime_change
from config.models import ProxyConfig
from proxy.metrics import Metrics

log = logging.getLogger("partition_proxy.partition_set")

# seconds between two reads of the config file: the bound on how long a change takes to be
# seen after the file changed (a few hundred bytes read and hashed: negligible); 2 s keeps the
# convergence of replicas within seconds of kubelet's ConfigMap update.
CONFIG_POLL_SECONDS = 2.0


class PartitionSet:
    """The partition set this process serves and the loop that follows the config file.

    `apply` is `ProxyApp.reconfigure`: it raises ConfigError (a change it cannot apply, e.g.
    the new RV space could not get an epoch) and leaves the running set as it was.
    """

    def __init__(self, config: ProxyConfig, path: Path | None, metrics: Metrics,
                 apply: Callable[[RuntimeChange], Awaitable[None]]) -> None:
        self.config = config
        self.path = path
        self.version = partition_set_version(config)
        self.loaded_at = time.time()
        self.last_error = ""
        self._metrics = metrics
        self._apply = apply
        self._digest = _digest(path) if path is not None else b""
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        metrics.partition_set.labels(self.version).set(1)

    def reload_soon(self) -> None:
        """Re-read the file now (SIGHUP). Plain def: callable from a signal handler on the loop."""
        self._wake.set()

    async def run(self) -> None:
        """Follow the file until cancelled."""
        if self.path is None:
            return
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), CONFIG_POLL_SECONDS)
                forced = True
            except asyncio.TimeoutError:
                forced = False
            self._wake.clear()
            digest = _digest(self.path)
            if digest == self._digest and not forced:
                continue
            self._digest = digest
            if await self.reload() == "refused":
                # Read it again at the next poll: a joining partition's credential may land a
                # moment after the config (kubelet syncs each mounted Secret and ConfigMap on
                # its own); a refusal that stays is logged once, not every poll.
                self._digest = b""

    async def reload(self) -> str:
        """Read the file and apply what changed: "applied", "unchanged" or "refused"."""
        assert self.path is not None
        async with self._lock:
            try:
                loaded = load_config(self.path)
                change = runtime_change(self.config, loaded)
                version = partition_set_version(change.config)
                if version == self.version:
                    result = "unchanged"
                else:
                    await self._apply(change)
                    self._metrics.partition_set.labels(self.version).set(0)
                    self._metrics.partition_set.labels(version).set(1)
                    log.info("partition set %s -> %s: joined %s, state changes %s", self.version, version,
                             list(change.joined) or "none", [f"{p} {a}->{b}" for p, a, b in change.state_changes] or "none")
                    self.version, self.config, self.loaded_at = version, change.config, time.time()
                    result = "applied"
                for section in change.ignored:
                    log.warning("config reload: %s changed; it takes effect at the next restart", section)
                self.last_error = ""
            except ConfigError as exc:
                if str(exc) != self.last_error:
                    log.error("config reload refused, the partition set %s stays: %s", self.version, exc)
                self.last_error = str(exc)
                result = "refused"
        self._metrics.reloads.labels(result).inc()
        return result

    def debug(self) -> dict[str, Any]:
        """What /debug/partitions shows."""
        return {
            "version": self.version,
            "loadedAt": self.loaded_at,
            "lastError": self.last_error,
            "partitions": [{"name": p.name, "role": p.role.value, "state": p.state.value} for p in self.config.partitions],
            "fencedTenants": list(self.config.tenants.fenced),
        }


def _digest(path: Path) -> bytes:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return b""  # gone for a moment (a ConfigMap update swaps a symlink): read again next time
