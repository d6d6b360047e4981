"""Placement rules: which tenant owns a namespace, which tenant partition owns a tenant, and
which resource partition owns a node name. Pure functions of the configuration.

Tenant of a namespace (first match): the Arktos tenant named in the path; the explicit
`tenants.namespaces` map; then the configured mode: `prefix` (text before the first separator,
the whole name if there is none), `name` (the namespace name itself) or `map` (explicit map only,
else no tenant).

Tenant partition of a tenant (first match): explicit `tenants.partitions` map; Arktos-style
name ranges `tenants.ranges` (a tenant matches a range when `first <= tenant[:len(bound)]`
compared per bound, so `a`..`m` takes every name starting with a letter from a to m);
`tenants.default_partition`; else the system partition.

Resource partition of a node (first match in the configured mode): `prefix` (longest matching
name prefix), `regex` (first matching pattern, `re.match`), `hash` (FNV-1a 64 of the name
modulo the number of ACTIVE resource partitions, in configuration order: a draining one takes
no new nodes). A prefix or regex rule that matches nothing falls back to the hash, so every
name has exactly one owner. (An existing node is found where it is by the node index first:
routing.decide.)

Partition lists (configuration order): `*_partitions` are the live ones (active and draining:
unions go to them), `*_space` every one of the role including retired ones (the proxy RV space:
slots are append-only, config.models.PartitionState); `all_*` the same over both roles, in
configuration order (a resource held by both roles: leases).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from config.models import PartitionRole, PartitionState, ProxyConfig

# Namespaces every kube-apiserver creates for itself; they belong to no tenant and are owned by
# the system partition. kube-node-lease holds node leases, which are node-scoped.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
NODE_LEASE_NAMESPACE = "kube-node-lease"

# namespaces whose tenant partition a Placement remembers (each ~150 bytes: key, value, slot);
# past it the memo starts again empty. Above the namespaces a federation of tens of thousands of
# nodes serves (a few per tenant), and small enough (~2.5 MiB) that a client naming arbitrary
# namespaces cannot grow a replica by more.
NAMESPACE_MEMO_SIZE = 16_384
# characters: the longest namespace name (a DNS-1123 label); a longer one in a path (which the
# partition will refuse) is not remembered, so the memo's keys stay small
_NAMESPACE_MAX = 63

_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3
_U64 = (1 << 64) - 1


def fnv1a64(text: str) -> int:
    """FNV-1a, 64 bit, of the UTF-8 bytes: stable across processes and Python versions."""
    h = _FNV64_OFFSET
    for byte in text.encode():
        h = ((h ^ byte) * _FNV64_PRIME) & _U64
    return h


@dataclass(frozen=True, slots=True)
class Placement:
    """The placement rules compiled from a ProxyConfig."""

    config: ProxyConfig
    tenant_partitions: tuple[str, ...]
    resource_partitions: tuple[str, ...]
    node_regex: tuple[tuple[re.Pattern[str], str], ...]
    node_prefixes: tuple[tuple[str, str], ...]  # longest prefix first
    config_names: frozenset[str]  # every live partition name (routing reads it per request)
    tenant_space: tuple[str, ...] = ()
    resource_space: tuple[str, ...] = ()
    hash_partitions: tuple[str, ...] = ()  # active resource partitions: where the hash places new nodes
    all_partitions: tuple[str, ...] = ()  # every live partition, configuration order
    all_space: tuple[str, ...] = ()  # every partition, retired too: the RV space of unions over both roles
    fenced: frozenset[str] = frozenset()  # tenants being moved: their writes get 503
    # namespace -> its tenant partition, filled by `partition_of_namespace` (a pure function of
    # the rules above: a new Placement starts empty). Every namespaced request asks it.
    _namespace_partitions: dict[str, str] = field(default_factory=dict, init=False, compare=False, repr=False)

    @classmethod
    def from_config(cls, config: ProxyConfig) -> Placement:
        return cls(
            config=config,
            tenant_partitions=config.live_names(PartitionRole.TENANT),
            resource_partitions=config.live_names(PartitionRole.RESOURCE),
            node_regex=tuple((re.compile(r.pattern), r.partition) for r in config.nodes.regex),
            node_prefixes=tuple(sorted(config.nodes.prefixes.items(), key=lambda kv: -len(kv[0]))),
            config_names=frozenset(p.name for p in config.partitions if p.live),
            tenant_space=config.names(PartitionRole.TENANT),
            resource_space=config.names(PartitionRole.RESOURCE),
            hash_partitions=config.names(PartitionRole.RESOURCE, PartitionState.ACTIVE),
            all_partitions=tuple(p.name for p in config.partitions if p.live),
            all_space=tuple(p.name for p in config.partitions),
            fenced=frozenset(config.tenants.fenced),
        )

    @property
    def system_partition(self) -> str:
        return self.config.system_partition

    def tenant_of_namespace(self, namespace: str) -> str:
        """The tenant that owns `namespace`, or "" when the namespace belongs to no tenant."""
        rules = self.config.tenants
        if namespace in rules.namespaces:
            return rules.namespaces[namespace]
        if rules.namespace_to_tenant == "prefix":
            return namespace.split(rules.separator, 1)[0]
        if rules.namespace_to_tenant == "name":
            return namespace
        return ""

    def partition_of_tenant(self, tenant: str) -> str:
        rules = self.config.tenants
        if tenant in rules.partitions:
            return rules.partitions[tenant]
        for r in rules.ranges:
            if r.first <= tenant[: len(r.first)] and tenant[: len(r.last)] <= r.last:
                return r.partition
        return rules.default_partition or self.system_partition

    def partition_of_namespace(self, namespace: str, *, tenant: str = "") -> str:
        """The tenant partition that owns a namespace (and everything namespaced in it)."""
        if tenant or len(namespace) > _NAMESPACE_MAX:
            return self._partition_of_namespace(namespace, tenant)
        memo = self._namespace_partitions
        partition = memo.get(namespace)
        if partition is None:
            if len(memo) >= NAMESPACE_MEMO_SIZE:
                memo.clear()
            partition = memo[namespace] = self._partition_of_namespace(namespace, "")
        return partition

    def _partition_of_namespace(self, namespace: str, tenant: str) -> str:
        if namespace in SYSTEM_NAMESPACES:
            return self.system_partition
        tenant = tenant or self.tenant_of_namespace(namespace)
        if not tenant:
            return self.system_partition
        return self.partition_of_tenant(tenant)

    def partition_of_node(self, node: str) -> str:
        """The resource partition a node of this name is placed in (create) or looked up in."""
        mode = self.config.nodes.placement
        if mode == "prefix":
            for prefix, partition in self.node_prefixes:
                if node.startswith(prefix):
                    return partition
        elif mode == "regex":
            for pattern, partition in self.node_regex:
                if pattern.match(node):
                    return partition
        return self.hash_partitions[fnv1a64(node) % len(self.hash_partitions)]
