"""Which changes of a running proxy's configuration take effect without a restart, and the
configuration that results. Pure: no I/O (the reload itself is proxy.partition_set).

At runtime the PARTITION SET changes: `partitions` (appended, drained, retired), `tenants`
(placement rules, fenced tenants) and `nodes` (placement rules). Every other section (listen,
auth, caches, limits, upstream, failure, resource_versions, system_partition) is read at
start-up only: a reload that changes one keeps the running value and says so.

Rules (a reload that breaks one is refused whole; the set in force stays):
- the partition list is append-only: every partition of the running list keeps its place and
  its role, new ones come after them (their place is their slot in the proxy resourceVersion
  encoding, which every replica and every issued RV must agree on);
- a retired partition stays retired (its slot is never reused);
- a partition's kubeconfig and extra_servers are fixed once it joined (a new endpoint is a new
  partition name).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from config.load import ConfigError, parse_config
from config.models import PartitionState, ProxyConfig

RUNTIME_SECTIONS = ("partitions", "tenants", "nodes")


@dataclass(frozen=True, slots=True)
class RuntimeChange:
    """The configuration to run with after a reload, and what the reload changed."""

    config: ProxyConfig
    joined: tuple[str, ...]  # partitions new to the set
    retired: tuple[str, ...]  # partitions that became retired
    state_changes: tuple[tuple[str, str, str], ...]  # (partition, from, to) for every state change
    ignored: tuple[str, ...]  # sections that changed but need a restart


def partition_set_version(config: ProxyConfig) -> str:
    """A short stable digest of the partition-set sections: replicas serving the same set
    report the same version (12 hex digits of SHA-256 over their canonical JSON)."""
    doc = config.model_dump(mode="json", include=set(RUNTIME_SECTIONS))
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]


def runtime_change(running: ProxyConfig, loaded: ProxyConfig) -> RuntimeChange:
    """The configuration to run with when `loaded` (a re-read, already validated file) replaces
    `running`: `running` with the partition-set sections of `loaded`. Raises ConfigError, one
    line naming the partition, when the change breaks a rule of the module docstring."""
    new = {p.name: p for p in loaded.partitions}
    for i, old in enumerate(running.partitions):
        if i >= len(loaded.partitions) or loaded.partitions[i].name != old.name:
            where = "is missing" if old.name not in new else "moved"
            raise ConfigError(
                f"partitions.{i}: partition {old.name!r} {where}: the list is append-only "
                "(mark a partition `state: retired` instead of removing it, add new ones at the end)"
            )
        now = new[old.name]
        if now.role is not old.role:
            raise ConfigError(f"partitions.{i}.role: partition {old.name!r} cannot change its role")
        if old.state is PartitionState.RETIRED and now.state is not PartitionState.RETIRED:
            raise ConfigError(f"partitions.{i}.state: partition {old.name!r} is retired for good (its slot is never reused)")
        if now.live and (now.kubeconfig != old.kubeconfig or now.extra_servers != old.extra_servers):
            raise ConfigError(f"partitions.{i}.kubeconfig: partition {old.name!r} keeps its endpoints (add a new partition instead)")
    before = {p.name: p.state for p in running.partitions}
    joined = tuple(p.name for p in loaded.partitions[len(running.partitions):] if p.live)
    state_changes = tuple(
        (p.name, before[p.name].value, p.state.value) for p in loaded.partitions if p.name in before and before[p.name] is not p.state
    )
    retired = tuple(name for name, _, to in state_changes if to == PartitionState.RETIRED.value)
    ignored = tuple(
        section
        for section in sorted(set(ProxyConfig.model_fields) - set(RUNTIME_SECTIONS))
        if getattr(running, section) != getattr(loaded, section)
    )
    config = running.model_copy(update={section: getattr(loaded, section) for section in RUNTIME_SECTIONS})
    # Re-validate the combination (the running start-up sections with the new set: e.g. the
    # running system partition may not be retired).
    config = parse_config(config.model_dump())
    return RuntimeChange(config=config, joined=joined, retired=retired, state_changes=state_changes, ignored=ignored)
