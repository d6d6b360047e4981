"""Pydantic models of the proxy configuration file (YAML).

Shape (keys are snake_case; every model forbids unknown keys so a typo fails start-up):

    listen: {address: 127.0.0.1, port: 6443, tls: {cert_file, key_file, client_ca_file}}
    partitions:                          # append only: a new partition goes at the end
      - {name: tp1, role: tenant, kubeconfig: /path/tp1.yaml}
      - {name: rp1, role: resource, kubeconfig: /path/rp1.yaml}
      - {name: rp0, role: resource, kubeconfig: /path/rp0.yaml, state: retired}
    system_partition: tp1
    tenants:
      namespace_to_tenant: prefix        # prefix | name | map
      separator: "-"                     # for prefix: tenant = text before the first separator
      namespaces: {team-x: acme}         # explicit namespace -> tenant map, consulted first
      partitions: {acme: tp2}            # explicit tenant -> tenant partition map
      ranges: [{first: a, last: m, partition: tp1}]   # Arktos-style tenant name ranges
      default_partition: tp1
    nodes:
      placement: prefix                  # prefix | regex | hash
      prefixes: {"rp1-": rp1}
      regex: [{pattern: "^rp1-.*", partition: rp1}]
    resource_versions: {table_namespace: kube-system, table_name: partition-proxy-resource-versions}
    caches:                              # watch caches (default: nodes, and leases in kube-node-lease)
      - {name: nodes, resource: nodes, role: resource, label_selector: "", history: 1000}
    upstream: {connect_timeout_seconds: 5, request_timeout_seconds: 60}
    kubelet: {client_cert_file, client_key_file, ca_file}   # optional: pods' logs, exec, attach, port-forward via their kubelet

Semantics of the rules are applied in `routing.placement`; this module only validates that
the file is well formed and self-consistent (every referenced partition exists and has the
right role).
"""

from __future__ import annotations

import enum
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Partition names appear in URLs (/partitions/<name>/...) and metric labels: DNS-1123 labels.
# bits of a 128-bit proxy resourceVersion shared by its partition fields (routing.rv.FIELD_BITS;
# config is the lowest layer and cannot import it).
_RV_FIELD_BITS = 104
_PARTITION_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PartitionRole(str, enum.Enum):
    """A tenant partition holds tenants' workloads; a resource partition holds machines."""

    TENANT = "tenant"
    RESOURCE = "resource"


class PartitionState(str, enum.Enum):
    """Where a partition is in its life (docs/partition-set.md).

    active: routed to, and new tenants and nodes may be placed in it;
    draining: still routed to for what it holds, but placement rules may not send new tenants
      or nodes there (the hash placement skips it);
    retired: gone. Kept in the list because its slot stays in the proxy resourceVersion
      encoding (never reused, so every RV issued while it lived still decodes); never routed
      to, its kubeconfig is not read.
    """

    ACTIVE = "active"
    DRAINING = "draining"
    RETIRED = "retired"


class TLSConfig(_Model):
    """Downstream TLS: the proxy's serving certificate, the CA that signs client certificates,
    the minimum protocol version and (TLS 1.2) cipher suites in OpenSSL syntax."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    min_version: Literal["1.2", "1.3"] = "1.2"
    # OpenSSL cipher list for TLS 1.2; the default keeps forward-secret AEAD suites only, as the
    # Go crypto/tls defaults kube-apiserver uses do.
    ciphers: str = "ECDHE+AESGCM:ECDHE+CHACHA20"


class StaticToken(_Model):
    """A bearer token accepted without asking a partition (tests, break-glass)."""

    token: str = Field(min_length=8)
    user: str = Field(min_length=1)
    uid: str = ""
    groups: tuple[str, ...] = ()


class AuthConfig(_Model):
    """Authentication of clients and authorization of answers served from caches.

    Clients authenticate with a certificate (CN user, O groups) signed by listen.tls.
    client_ca_file, or a bearer token: `static_tokens` first, then a TokenReview sent to
    `token_review_partition`, or for a service-account token to the tenant partition owning
    the namespace it names (answers cached `token_cache_seconds`). Without either a request
    gets 401, unless `anonymous` is on (then it is system:anonymous).

    Reads answered from a watch cache are authorized with a SubjectAccessReview to every
    partition the answer comes from, cached `authorization_cache_seconds` per (user, groups,
    verb, resource, namespace, name, selectors); a partition that cannot be asked is answered
    for by its last answer of at most 10 minutes ago (`proxy.authz`); members of
    `trusted_groups` skip it.
    """

    anonymous: bool = False
    static_tokens: tuple[StaticToken, ...] = ()
    token_review_partition: str | None = None
    # seconds; kube-apiserver caches successful webhook token reviews for 2 min and failures
    # for 10 s by default; a proxy in front of it re-asks more often, so revocation is seen soon.
    token_cache_seconds: float = Field(default=10.0, ge=0)
    # seconds; SubjectAccessReview answers are reused this long (apiserver webhook authorizer
    # default: 5 min allowed, 30 s denied; 10 s keeps RBAC changes visible fast).
    authorization_cache_seconds: float = Field(default=10.0, ge=0)
    trusted_groups: tuple[str, ...] = ()


class LimitsConfig(_Model):
    """Limits against abuse. Sizes in bytes, times in seconds."""

    # bytes; kube-apiserver refuses bodies over 3 MiB (apiserver MaxRequestBodyBytes).
    max_body_bytes: int = Field(default=3 * 1024 * 1024, gt=0)
    # bytes; one header line. Go's net/http allows 1 MiB of headers in all; client
    # certificates are not headers, bearer tokens are a few KiB.
    max_header_bytes: int = Field(default=16 * 1024, ge=1024)
    # bytes; the request line. Label and field selectors make long URLs; 8 KiB is the common
    # limit of front proxies (nginx large_client_header_buffers).
    max_url_bytes: int = Field(default=8 * 1024, ge=256)
    # watches one identity may hold open at once; a kubelet holds one per secret and configmap
    # its pods use (hundreds on a busy node), so the default leaves room for that.
    max_watches_per_identity: int = Field(default=1000, ge=1)
    # seconds; a watch whose client does not take a write within this time is dropped (a client
    # that never reads must not pin memory).
    watch_write_timeout_seconds: float = Field(default=30.0, gt=0)


class Http2Config(_Model):
    """The HTTP/2 front (negotiated by ALPN on the TLS port, next to HTTP/1.1)."""

    enabled: bool = True
    # streams one connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS): 100, as
    # kube-apiserver advertises unless --http2-max-streams-per-connection is set; client-go opens
    # another connection beyond it.
    max_concurrent_streams: int = Field(default=100, ge=1, le=100_000)
    # bytes; a request's header list (SETTINGS_MAX_HEADER_LIST_SIZE). kubelet and scheduler
    # requests carry a few KiB; 256 KiB bounds a connection's header memory at 25 MiB with 100
    # streams (Go's server allows 1 MiB).
    max_header_list_size: int = Field(default=256 * 1024, ge=16 * 1024)


class ListenConfig(_Model):
    address: str = "127.0.0.1"
    port: int = Field(default=6443, ge=0, le=65535)
    tls: TLSConfig | None = None
    http2: Http2Config = Field(default_factory=Http2Config)


class PartitionConfig(_Model):
    """A partition: its kubeconfig (the proxy's own credential and the first endpoint) and
    `extra_servers`, more endpoints of the same partition (HA kube-apiservers behind the same
    CA and credential), tried in turn when one cannot be reached."""

    name: str
    role: PartitionRole
    kubeconfig: Path
    extra_servers: tuple[str, ...] = ()
    state: PartitionState = PartitionState.ACTIVE

    @property
    def live(self) -> bool:
        """Routed to (active or draining)."""
        return self.state is not PartitionState.RETIRED

    @field_validator("extra_servers")
    @classmethod
    def _urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for url in value:
            if not re.match(r"^https?://[^/\s]+", url):
                raise ValueError(f"not an http(s) URL: {url!r}")
        return value

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not _PARTITION_NAME.match(value):
            raise ValueError("must be a DNS-1123 label (lower case letters, digits and '-')")
        return value


class TenantRange(_Model):
    """Tenants whose name sorts in [first, last] (inclusive, by prefix) go to `partition`."""

    first: str
    last: str
    partition: str

    @model_validator(mode="after")
    def _ordered(self) -> TenantRange:
        if self.first > self.last:
            raise ValueError(f"first {self.first!r} sorts after last {self.last!r}")
        return self


class TenantRules(_Model):
    namespace_to_tenant: Literal["prefix", "name", "map"] = "prefix"
    separator: str = Field(default="-", min_length=1)
    namespaces: dict[str, str] = Field(default_factory=dict)
    partitions: dict[str, str] = Field(default_factory=dict)
    ranges: tuple[TenantRange, ...] = ()
    default_partition: str | None = None
    # tenants being moved between tenant partitions: writes to their namespaces get 503 with
    # Retry-After until the tenant leaves this list (docs/partition-set.md, "moving a tenant")
    fenced: tuple[str, ...] = ()


class RegexPlacement(_Model):
    pattern: str
    partition: str

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


class NodePlacement(_Model):
    placement: Literal["prefix", "regex", "hash"] = "hash"
    prefixes: dict[str, str] = Field(default_factory=dict)
    regex: tuple[RegexPlacement, ...] = ()


class UpstreamConfig(_Model):
    # seconds; a TCP+TLS handshake on loopback or a LAN takes milliseconds, 5 s covers a loaded host.
    connect_timeout_seconds: float = Field(default=5.0, gt=0)
    # seconds; total time of a non-watch request. kube-apiserver's own default request timeout
    # is 60 s (--request-timeout), so the proxy never gives up before the partition would.
    request_timeout_seconds: float = Field(default=60.0, gt=0)
    # seconds; an open watch stream (the proxy's own, or one it forwards for a client that asked
    # for bookmarks) with no byte for this long is dead. kube-apiserver sends a bookmark about
    # every 60 s (cacher defaultBookmarkFrequency): one missed bookmark plus slack.
    watch_inactivity_seconds: float = Field(default=90.0, gt=0)


class KubeletConfig(_Model):
    """How the proxy reaches a node's kubelet for what kube-apiserver proxies there (a pod's
    log, exec, attach, port-forward): a tenant partition's kube-apiserver cannot, as the Node lives in a resource partition
    (proxy/handlers/kubelet.py). `client_cert_file`/`client_key_file`: the
    proxy's client certificate for kubelets (kube-apiserver's --kubelet-client-certificate);
    `ca_file`: the CA of kubelets' serving certificates, None to not verify them (kube-apiserver
    without --kubelet-certificate-authority); the first address of the node of a type in
    `preferred_address_types` is dialled at its kubelet port (status.daemonEndpoints)."""

    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    ca_file: Path | None = None
    preferred_address_types: tuple[str, ...] = ("InternalIP", "ExternalIP", "Hostname")

    @model_validator(mode="after")
    def _pair(self) -> KubeletConfig:
        if (self.client_cert_file is None) != (self.client_key_file is None):
            raise ValueError("client_cert_file and client_key_file go together")
        return self


# The `role` of a watch cache over the system partition alone: cluster-scoped objects that keep
# the partition's native resourceVersions (CSIDrivers, RuntimeClasses: what every kubelet watches).
SYSTEM_CACHE_ROLE: Literal["system"] = "system"


class CacheConfig(_Model):
    """One label-selector-filtered watch cache over every partition of one role, or over the
    system partition alone (`role: system`, for its cluster-scoped objects, in native RVs).

    `history` is the number of events kept in the ring for resuming watches (the apiserver
    cacher's default watch cache size is 100 per resource; 1000 covers a burst of one event
    per node of a 1,000-node partition). `namespace` restricts the cache to one namespace
    (node leases live in kube-node-lease). `protobuf` keeps a protobuf twin of the cache for
    clients that ask protobuf first (kubelets, client-go components), filled at the first such
    client: a second copy of every object and a second upstream watch per partition; without it
    those clients get JSON from the cache (docs/serving.md, "Watch caches").
    """

    name: str
    group: str = ""
    version: str = "v1"
    resource: str
    role: PartitionRole | Literal["system"]
    namespace: str = ""
    label_selector: str = ""
    field_selector: str = ""
    strip_managed_fields: bool = True
    strip_last_applied: bool = True
    protobuf: bool = True
    history: int = Field(default=1000, ge=1, le=1_000_000)

    @field_validator("name")
    @classmethod
    def _cache_name(cls, value: str) -> str:
        if not _PARTITION_NAME.match(value):
            raise ValueError("must be a DNS-1123 label (lower case letters, digits and '-')")
        return value


def default_caches() -> tuple[CacheConfig, ...]:
    """Nodes over the resource partitions; pods and services over the tenant partitions;
    CSIDrivers and RuntimeClasses of the system partition: what every kubelet lists and watches
    (its Node by name, its pods by `spec.nodeName`, every Service, CSIDriver and RuntimeClass),
    so a kubelet's watches cost no upstream watch and the partitions see one watch per cache
    instead of one per kubelet (docs/sizing.md).

    Node Leases are not cached by default. Kubelets write their Lease but never watch Leases; the
    few clients that do (the node lifecycle controller, kubectl) get a union list and watch over
    the resource partitions, one upstream watch each. A node-leases cache would make every
    node's renewal, every 10 s, a watch event in every worker of every replica (70-90 us of CPU
    each), keep every Lease in every worker, and open one upstream watch per worker on each
    resource partition: docs/sizing.md, "Every node's events in every worker". Add
    `{name: node-leases, group: coordination.k8s.io, resource: leases, namespace:
    kube-node-lease, role: resource, protobuf: false}` to `caches` where many clients watch
    Leases through the proxy."""
    return (
        CacheConfig(name="nodes", resource="nodes", role=PartitionRole.RESOURCE),
        CacheConfig(name="pods", resource="pods", role=PartitionRole.TENANT),
        CacheConfig(name="services", resource="services", role=PartitionRole.TENANT),
        CacheConfig(name="csidrivers", group="storage.k8s.io", resource="csidrivers", role=SYSTEM_CACHE_ROLE),
        CacheConfig(name="runtimeclasses", group="node.k8s.io", resource="runtimeclasses", role=SYSTEM_CACHE_ROLE),
    )


class ResourceVersionsConfig(_Model):
    """The epoch table behind vector-form proxy resourceVersions (docs/resource-versions.md):
    a ConfigMap in the system partition every replica reads and any replica may extend."""

    table_namespace: str = "kube-system"
    table_name: str = "partition-proxy-resource-versions"
    # seconds; how often a replica re-reads the table and reads each partition's current RV to
    # decide whether to publish a new epoch. An epoch has half its range left when the next is
    # published (hours at 5,000 writes/s with 4 partitions), so a few seconds is ample.
    refresh_seconds: float = Field(default=5.0, gt=0, le=300)
    # epochs kept per partition list; an RV of an older epoch answers 410 Expired. At 4
    # partitions an epoch lasts about an hour at 5,000 writes/s into one partition, so 256 keep
    # days of resumable RVs; the table stays under 100 KiB (ConfigMaps hold 1 MiB).
    retain_epochs: int = Field(default=256, ge=2, le=4096)
    # bits per partition field of vector RVs; None: all that fit (104 bits / partitions).
    # Smaller values only make epochs roll over sooner (tests use them to see rollovers).
    slot_bits: int | None = Field(default=None, ge=4, le=64)


class FailureConfig(_Model):
    """What happens when partitions fail or the proxy is overloaded."""

    # failures in a row that mark a partition down; 3 tells a dead partition from one lost
    # packet.
    breaker_failures: int = Field(default=3, ge=1)
    # seconds a partition marked down is not tried; also the Retry-After clients get.
    breaker_open_seconds: float = Field(default=5.0, gt=0)
    # a union list with a partition down: "partial" answers the others (and that partition's
    # share from a watch cache when one holds it) with a Warning; "unavailable" answers 503.
    union_policy: Literal["partial", "unavailable"] = "partial"
    # requests served at once per class, beyond which the proxy answers 429 with Retry-After.
    # Mutating and read-only requests each hold an upstream connection for milliseconds, and
    # are bounded per partition (as each kube-apiserver bounds its own: a stalled partition
    # fills only its own budget; requests to several partitions share one more; proxy.overload);
    # long-running ones (watches, follows) hold for minutes, bounded for the whole process.
    max_inflight_mutating: int = Field(default=200, ge=1)
    max_inflight_readonly: int = Field(default=400, ge=1)
    max_inflight_long_running: int = Field(default=50_000, ge=1)
    # non-long-running requests one identity may have in flight at once.
    max_inflight_per_identity: int = Field(default=100, ge=1)
    # seconds; on SIGTERM the client connections are let go one by one over up to this long
    # (proxy.fronts.drain: their watches end cleanly, then GOAWAY), so the replicas taking them
    # over get the reconnect storm spread out; 0 lets them all go at once. 10 s spreads 250
    # connections per worker at the drain's 25 per second and keeps a pod's stop (preStop 5 s +
    # this + the grace) well inside the chart's 30 s terminationGracePeriodSeconds.
    shutdown_drain_seconds: float = Field(default=10.0, ge=0)
    # seconds; after its turn in the drain, a connection's requests in flight get this long.
    shutdown_grace_seconds: float = Field(default=5.0, ge=0)


class ProxyConfig(_Model):
    listen: ListenConfig = Field(default_factory=ListenConfig)
    partitions: tuple[PartitionConfig, ...] = Field(min_length=1)
    system_partition: str
    tenants: TenantRules = Field(default_factory=TenantRules)
    nodes: NodePlacement = Field(default_factory=NodePlacement)
    resource_versions: ResourceVersionsConfig = Field(default_factory=ResourceVersionsConfig)
    upstream: UpstreamConfig = Field(default_factory=UpstreamConfig)
    caches: tuple[CacheConfig, ...] = Field(default_factory=default_caches)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    failure: FailureConfig = Field(default_factory=FailureConfig)
    kubelet: KubeletConfig | None = None  # None: a pod's log, exec, attach, port-forward are asked of its TP

    @model_validator(mode="after")
    def _consistent(self) -> ProxyConfig:
        names = [c.name for c in self.caches]
        if len(names) != len(set(names)):
            raise ValueError("caches: duplicate cache name")
        roles = {}
        for p in self.partitions:
            if p.name in roles:
                raise ValueError(f"partitions: duplicate name {p.name!r}")
            roles[p.name] = p.role
        states = {p.name: p.state for p in self.partitions}
        for role in PartitionRole:
            if not self.names(role, PartitionState.ACTIVE):
                raise ValueError(f"partitions: at least one active {role.value} partition is required")

        def need(field: str, name: str, role: PartitionRole, *, placeable: bool = False) -> None:
            if name not in roles:
                raise ValueError(f"{field}: unknown partition {name!r}")
            if roles[name] is not role:
                raise ValueError(f"{field}: partition {name!r} is not a {role.value} partition")
            if states[name] is PartitionState.RETIRED:
                raise ValueError(f"{field}: partition {name!r} is retired")
            if placeable and states[name] is not PartitionState.ACTIVE:
                raise ValueError(f"{field}: partition {name!r} is {states[name].value}: new tenants and nodes go to active partitions only")

        need("system_partition", self.system_partition, PartitionRole.TENANT)
        for tenant, name in self.tenants.partitions.items():
            need(f"tenants.partitions.{tenant}", name, PartitionRole.TENANT)
        for i, r in enumerate(self.tenants.ranges):
            need(f"tenants.ranges.{i}.partition", r.partition, PartitionRole.TENANT)
        if self.auth.token_review_partition is not None and states.get(self.auth.token_review_partition, PartitionState.RETIRED) is PartitionState.RETIRED:
            raise ValueError(f"auth.token_review_partition: unknown or retired partition {self.auth.token_review_partition!r}")
        if self.tenants.default_partition is not None:
            need("tenants.default_partition", self.tenants.default_partition, PartitionRole.TENANT, placeable=True)
        for tenant in self.tenants.fenced:
            if not tenant:
                raise ValueError("tenants.fenced: a tenant name is not empty")
        for prefix, name in self.nodes.prefixes.items():
            need(f"nodes.prefixes.{prefix}", name, PartitionRole.RESOURCE)
        for i, rx in enumerate(self.nodes.regex):
            need(f"nodes.regex.{i}.partition", rx.partition, PartitionRole.RESOURCE)
        bits = self.resource_versions.slot_bits
        widest = len(self.partitions)  # the RV space of unions over both roles (leases in every namespace)
        if bits is not None and bits * widest > _RV_FIELD_BITS:
            raise ValueError(
                f"resource_versions.slot_bits: {bits} bits x {widest} partitions is more than the {_RV_FIELD_BITS} "
                "bits a 128-bit resourceVersion has for partition fields"
            )
        return self

    def names(self, role: PartitionRole, *states: PartitionState) -> tuple[str, ...]:
        """Partition names of one role in configuration order: every one (retired too: the
        proxy RV slot order of the role's RV space), or those in one of `states`."""
        return tuple(p.name for p in self.partitions if p.role is role and (not states or p.state in states))

    def live_names(self, role: PartitionRole) -> tuple[str, ...]:
        """The partitions of one role that are routed to (active and draining)."""
        return self.names(role, PartitionState.ACTIVE, PartitionState.DRAINING)
