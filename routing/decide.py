"""Route decisions: `decide(RequestInfo, RoutingState) -> Route`. Pure.

Precedence, first match wins:
1. partition path prefix `/partitions/<name>/`: a resource partition pins node-scoped objects
   (its kubelets' Node, Lease, CSINode), and a list/watch of leases in every namespace (a node
   lifecycle controller's lease informer: it reads kube-node-lease out of it); a tenant
   partition pins everything but node-scoped objects (its scheduler's pods and bindings), whose
   lists stay the union of all RPs;
2. node-scoped objects (nodes, leases in kube-node-lease, csinodes): the RP owning the node name;
3. tenant-scoped objects (namespaces and everything namespaced): the TP owning the tenant;
4. everything else: the system partition, but a TokenReview goes to the tenant partition owning
   the namespace its service-account token names (routing.tokens: only that one can review it). A write of a cluster-scoped definition that
   tenants' objects depend on (`REPLICATED`: CRDs, admission policies and their bindings,
   webhook configurations, PriorityClasses, RuntimeClasses) goes to the system partition and is
   then replicated to every other live TP (`Route.replicate_to`): without it a CRD made through
   the proxy would serve custom resources in the system partition's namespaces only, and an
   admission policy would never apply to the other TPs' namespaces (FlowSchemas and
   PriorityLevelConfigurations go to every live partition, RPs too). Their reads (and their
   status subresource, which each kube-apiserver writes itself) are the system partition's; a
   GET of one also reads the other TPs' copies, to report those that differ (routing.replicas).
Cluster-wide LIST/WATCH (and deletecollection) of a namespaced resource is a union over all TPs;
of a node-scoped resource, a union over all RPs; of leases (node Leases in the RPs' kube-node-lease,
every other Lease in the TPs), a union over every partition (`kubectl get leases -A`), each
keeping what it owns.

Every resource that can be merged (node-scoped or namespaced, and namespaces themselves) lives
in one proxy RV space (`Route.rv_space`): the partitions whose native RVs form its RV vector,
every partition of the role in configuration order, retired ones included (their slots are
never reused); unions go to the live ones only. Cluster-scoped system objects (clusterroles,
CRDs, ...) are never merged and keep native RVs.

A write of a namespaced object (or of a namespace) whose tenant is being moved between tenant
partitions (`tenants.fenced`) is refused with 503 and Retry-After: no write lands in either
tenant partition until the move's routing switch (docs/partition-set.md).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from routing.discovery_merge import document_of
from routing.placement import NODE_LEASE_NAMESPACE, SYSTEM_NAMESPACES, Placement
from routing.requestinfo import RequestInfo

NODE_SCOPED = frozenset({("", "nodes"), ("storage.k8s.io", "csinodes")})
NODE_LEASE = ("coordination.k8s.io", "leases")
NAMESPACES = ("", "namespaces")
TOKEN_REVIEWS = ("authentication.k8s.io", "tokenreviews")
_UNION_VERBS = frozenset({"list", "watch", "deletecollection"})
# Cluster-scoped kinds whose writes every tenant partition gets (docs/partition-set.md,
# "cluster-scoped definitions"): what a TP's kube-apiserver reads when it serves or admits a
# tenant's objects. RBAC (ClusterRoles, bindings) stays per partition on purpose: each
# partition's own authorizer is the proxy's, through SubjectAccessReviews to the owning partition.
REPLICATED_VERSIONS: Mapping[tuple[str, str], str] = {  # (group, resource) -> the version served
    # in this order when copied to a TP that lacks them (proxy.definitions_sync): what a policy
    # may refer to is defined before it
    ("apiextensions.k8s.io", "customresourcedefinitions"): "v1",
    ("scheduling.k8s.io", "priorityclasses"): "v1",
    ("node.k8s.io", "runtimeclasses"): "v1",
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"): "v1",
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"): "v1",
    ("admissionregistration.k8s.io", "mutatingadmissionpolicies"): "v1",
    ("admissionregistration.k8s.io", "mutatingadmissionpolicybindings"): "v1",
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): "v1",
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): "v1",
    # API Priority and Fairness: every kube-apiserver classifies the requests it serves by its
    # own FlowSchemas, so a FlowSchema made through the proxy must be in every partition a
    # request of the user it names may land in, resource partitions included
    ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"): "v1",
    ("flowcontrol.apiserver.k8s.io", "flowschemas"): "v1",
}
REPLICATED = frozenset(REPLICATED_VERSIONS)
# Replicated to every live partition, not only the tenant partitions.
REPLICATED_EVERYWHERE = frozenset({("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"),
                                   ("flowcontrol.apiserver.k8s.io", "flowschemas")})
_WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
_VIA_KUBELET = frozenset({"log", "exec", "attach", "portforward"})  # pod subresources the proxy takes to the kubelet
# seconds; what a write to a fenced tenant is told to wait before retrying: a tenant move's
# switch is a config reload every replica picks up within seconds (proxy.partition_set).
FENCE_RETRY_AFTER = 5


class RouteKind(enum.Enum):
    FORWARD = "forward"  # one partition answers
    FAN_OUT = "fan-out"  # union list / union watch over several partitions
    NEEDS_BODY = "needs-body"  # a create without a name in its URL, a TokenReview: decide again with what its body says
    REJECT = "reject"  # the proxy answers with a Status itself


@dataclass(frozen=True, slots=True)
class RoutingState:
    """What routing needs besides the request: placement rules, the set of namespaced
    resources (group, resource) learned from discovery."""

    placement: Placement
    namespaced: frozenset[tuple[str, str]]
    # node name -> the RP that holds it, kept by the node watch cache (live view, read only here)
    node_index: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request goes.

    partitions: one (FORWARD) or several (FAN_OUT), target partitions in slot order.
    rv_space: the partitions forming the proxy RV vector of this resource, or () when the
      resource keeps native RVs (never merged).
    owner_filter: a union must drop items whose owning partition is not the one that sent them
      (every TP has its own kube-system, default, ...).
    status_code/reason/message: for REJECT, the Status to answer.
    """

    kind: RouteKind
    partitions: tuple[str, ...] = ()
    rv_space: tuple[str, ...] = ()
    owner_filter: bool = False
    status_code: int = 0
    reason: str = ""
    message: str = ""
    plain_text: bool = False  # answer `message` as text/plain, as kube-apiserver does for unknown paths
    retry_after: int = 0  # seconds, for a REJECT that the client should retry (Retry-After)
    replicate_to: tuple[str, ...] = ()  # FORWARD of a replicated write: the other TPs that get it after (a GET: whose copies are compared)
    discovery_from: tuple[str, ...] = ()  # FORWARD of a discovery document: the other TPs merged in (routing.discovery_merge)
    via_kubelet: bool = False  # FORWARD of a pod's log: the proxy reads the pod in its TP and asks its node's kubelet

    def slot(self, partition: str) -> int:
        """The slot of `partition` in this route's RV space. Raises ValueError if absent."""
        return self.rv_space.index(partition)


def replica_partitions(p: Placement, key: tuple[str, str]) -> tuple[str, ...]:
    """The live partitions that get copies of a replicated definition (group, resource), the
    system partition's own excepted: every other TP, or every other partition for
    REPLICATED_EVERYWHERE."""
    names = p.all_partitions if key in REPLICATED_EVERYWHERE else p.tenant_partitions
    return tuple(name for name in names if name != p.system_partition)


@functools.lru_cache(maxsize=1024)
def _forward(partition: str, space: tuple[str, ...]) -> Route:
    """The route of a request to one partition. Routes are immutable, so the routes of the
    (partition, RV space) pairs in use are made once and shared (most requests take one)."""
    return Route(RouteKind.FORWARD, (partition,), space)


def _not_found() -> Route:
    # kube-apiserver's answer to a path no handler serves: Go's http.NotFound, text/plain
    # "404 page not found" (k8s.io/apiserver/pkg/server/mux).
    return Route(RouteKind.REJECT, status_code=404, reason="NotFound", message="404 page not found", plain_text=True)


def is_node_scoped(info: RequestInfo) -> bool:
    key = (info.api_group, info.resource)
    if key in NODE_SCOPED:
        return True
    return key == NODE_LEASE and info.namespace == NODE_LEASE_NAMESPACE


def is_pinned_lease_list(info: RequestInfo, placement: Placement) -> bool:
    """A list/watch of leases in every namespace under a resource partition's path prefix.

    kube-controller-manager's node lifecycle controller watches leases in all namespaces and
    reads each node's Lease in kube-node-lease from that informer; pointed at an RP it must see
    the RP's node Leases, as it would talking to the RP's kube-apiserver directly. (Unpinned, a
    list of every namespace's leases stays the union of the TPs: node Leases are not in it.)"""
    return (
        info.partition in placement.resource_partitions
        and (info.api_group, info.resource) == NODE_LEASE
        and not info.namespace
        and not info.name
        and info.verb in ("list", "watch")
    )


def is_every_lease_list(info: RequestInfo) -> bool:
    """A list/watch/deletecollection of leases in every namespace without a partition prefix or
    an Arktos tenant: node Leases live in the RPs, every other Lease in the TPs, so the union
    covers every partition."""
    return (
        (info.api_group, info.resource) == NODE_LEASE
        and not info.namespace
        and not info.name
        and not info.partition
        and not info.tenant
        and info.verb in _UNION_VERBS
    )


def rv_space_of(info: RequestInfo, state: RoutingState) -> tuple[str, ...]:
    """The RV space of the resource a request is about (see module docstring)."""
    p = state.placement
    if not info.is_resource_request or info.malformed:
        return ()
    if is_node_scoped(info) or is_pinned_lease_list(info, p):
        return p.resource_space
    if is_every_lease_list(info):
        return p.all_space
    key = (info.api_group, info.resource)
    if info.namespace or key == NAMESPACES or key in state.namespaced:
        return p.tenant_space
    return ()


def _fenced(tenant: str) -> Route:
    return Route(RouteKind.REJECT, status_code=503, reason="ServiceUnavailable",
                 message=f"tenant {tenant!r} is being moved between tenant partitions; retry shortly",
                 retry_after=FENCE_RETRY_AFTER)


def owner_of_namespaced(namespace: str, state: RoutingState, *, tenant: str = "") -> str:
    """The partition that owns an object in `namespace` (a tenant partition)."""
    return state.placement.partition_of_namespace(namespace, tenant=tenant)


# keep(partition, object) -> whether a union (or a watch cache over several tenant partitions)
# keeps an object that `partition` sent.
KeepFn = Callable[[str, dict[str, Any]], bool]


OwnsFn = Callable[[str, str, str], bool]  # (partition, namespace, name) -> the partition owns the object


def owner_by_key(by_name: bool, state: Callable[[], RoutingState]) -> OwnsFn:
    """Whether the partition that sent an object, known by its namespace and name, owns it:
    every TP has its own `default`, `kube-system`, ..., and a union must show each namespace
    once. `by_name`: the objects are namespaces (owned by their name) rather than namespaced
    objects. `state` gives the routing state in force at each call (a watch outlives a change
    of the partition set). The watch caches call it with the metadata they read anyway."""

    def owns(partition: str, namespace: str, name: str) -> bool:
        owner = name if by_name else namespace
        if not owner:
            return True
        current = state()
        if owner == NODE_LEASE_NAMESPACE and not by_name and partition in current.placement.resource_partitions:
            return True  # node Leases: each RP owns those of its nodes
        return owner_of_namespaced(owner, current) == partition

    return owns


def owner_filter(by_name: bool, state: Callable[[], RoutingState]) -> KeepFn:
    """`owner_by_key` for decoded objects (union lists and watches); a Table's row is judged by
    its object."""
    owns = owner_by_key(by_name, state)

    def keep(partition: str, obj: dict[str, Any]) -> bool:
        meta = object_meta(obj)
        return owns(partition, meta.get("namespace") or "", meta.get("name") or "")

    return keep


def route_keep(info: RequestInfo, route: Route, state: Callable[[], RoutingState]) -> KeepFn | None:
    """The owner filter a union route needs, None when it needs none."""
    if not route.owner_filter:
        return None
    return owner_filter((info.api_group, info.resource) == NAMESPACES, state)


def object_meta(obj: dict[str, Any]) -> dict[str, Any]:
    """metadata of an object, or of the single row object of a Table (kubectl get -w)."""
    if obj.get("kind") == "Table":
        rows = obj.get("rows") or []
        if rows and isinstance(rows[0].get("object"), dict):
            meta = rows[0]["object"].get("metadata")
            return meta if isinstance(meta, dict) else {}
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def decide(info: RequestInfo, state: RoutingState, *, body_name: str | None = None, token_namespace: str | None = None) -> Route:
    """Decide where a request goes, by the precedence of the module docstring (steps 1 to 4).
    After a NEEDS_BODY answer the caller reads the body and decides again with `body_name`
    (metadata.name of a create's body, routing.bodies.body_name) and `token_namespace` (a
    TokenReview's, routing.bodies.body_token_namespace)."""
    p = state.placement
    pinned = info.partition
    if pinned and pinned not in p.config_names:
        return _not_found()
    space = rv_space_of(info, state)
    if not info.is_resource_request or info.malformed:
        return _non_resource_route(info, p)
    node_scoped = is_node_scoped(info)
    # 1. A partition path prefix.
    if pinned and _prefix_pins(info, p, node_scoped=node_scoped):
        return _forward(pinned, space)
    # 2. Node-scoped objects.
    if node_scoped:
        return _node_scoped_route(info, state, space=space, body_name=body_name)
    # 3. Tenant-scoped objects.
    route = _tenant_scoped_route(info, state, space=space, body_name=body_name)
    if route is not None:
        return route
    # 4. Everything else.
    return _system_route(info, state, space=space, token_namespace=token_namespace)


def _non_resource_route(info: RequestInfo, p: Placement) -> Route:
    """A request that is not for a resource, or that is malformed: discovery, /version, /openapi
    and paths kube-apiserver will answer itself, at the pinned partition or the system
    partition; discovery and OpenAPI documents merged with the other TPs' (what a CRD made in
    one adds)."""
    if not info.partition and not info.malformed and info.method == "GET" and document_of(info.upstream_path, "") is not None:
        others = tuple(t for t in p.tenant_partitions if t != p.system_partition)
        return Route(RouteKind.FORWARD, (p.system_partition,), discovery_from=others)
    return Route(RouteKind.FORWARD, (info.partition or p.system_partition,))


def _prefix_pins(info: RequestInfo, p: Placement, *, node_scoped: bool) -> bool:
    """Step 1: whether the partition path prefix of `info` pins it to that partition: a
    resource partition pins node-scoped objects and a list/watch of leases in every namespace,
    a tenant partition everything but node-scoped objects."""
    if info.partition in p.resource_partitions:
        return node_scoped or is_pinned_lease_list(info, p)
    return not node_scoped


def _object_name(info: RequestInfo, body_name: str | None) -> str | None:
    """The name of the object a request is about: in its path, else for a create its body's
    (None before the body is read)."""
    return info.name or (body_name if info.verb == "create" else None)


def _node_scoped_route(info: RequestInfo, state: RoutingState, *, space: tuple[str, ...], body_name: str | None) -> Route:
    """Step 2: a node-scoped object goes where its node is (the node index), else where a
    create puts it (`Placement.partition_of_node`); a union of every RP for a list or watch."""
    p = state.placement
    name = _object_name(info, body_name)
    if name:
        owner = state.node_index.get(name) if info.verb != "create" else None
        return _forward(owner or p.partition_of_node(name), space)
    if info.verb == "create":
        if body_name is None:
            return Route(RouteKind.NEEDS_BODY)
        # No name in the body either (generateName): the first RP validates and names it.
        return _forward(p.resource_partitions[0], space)
    if info.verb in _UNION_VERBS:
        return Route(RouteKind.FAN_OUT, p.resource_partitions, space)
    return _forward(p.resource_partitions[0], space)


def _tenant_scoped_route(info: RequestInfo, state: RoutingState, *, space: tuple[str, ...], body_name: str | None) -> Route | None:
    """Step 3: namespaces and namespaced objects go to the TP owning their tenant (a union of
    every TP, or of every partition for leases, for a list or watch in every namespace);
    a write of a fenced tenant's is refused. None when the request is not tenant-scoped."""
    p = state.placement
    key = (info.api_group, info.resource)
    if p.fenced and info.verb in _WRITE_VERBS:
        refused = _refused_if_fenced(info, p, body_name=body_name)
        if refused is not None:
            return refused
    if key == NAMESPACES:
        return _namespace_route(info, state, space=space, body_name=body_name)
    if info.namespace:
        owner = owner_of_namespaced(info.namespace, state, tenant=info.tenant)
        if key == ("", "pods") and info.subresource in _VIA_KUBELET and info.name and p.config.kubelet is not None:
            # kube-apiserver proxies a pod's log, exec and attach to the kubelet of the pod's
            # Node, which lives in an RP, not in the pod's TP: the proxy does it (proxy/handlers/kubelet.py)
            return Route(RouteKind.FORWARD, (owner,), space, via_kubelet=True)
        return _forward(owner, space)
    if is_every_lease_list(info):
        return Route(RouteKind.FAN_OUT, p.all_partitions, space, owner_filter=True)
    if key in state.namespaced and info.verb in _UNION_VERBS:
        if info.tenant:  # Arktos: every namespace of one tenant lives in that tenant's TP
            return _forward(p.partition_of_tenant(info.tenant), space)
        return Route(RouteKind.FAN_OUT, p.tenant_partitions, space, owner_filter=True)
    return None


def _refused_if_fenced(info: RequestInfo, p: Placement, *, body_name: str | None) -> Route | None:
    """The 503 answer to a write of a namespaced object or of a namespace whose tenant is
    being moved (`tenants.fenced`), None when the write may go. System namespaces are never
    fenced."""
    if (info.api_group, info.resource) == NAMESPACES:
        namespace = info.namespace or (_object_name(info, body_name) or "")
    else:
        namespace = info.namespace
    tenant = info.tenant or (p.tenant_of_namespace(namespace) if namespace else "")
    if tenant in p.fenced and (not namespace or namespace not in SYSTEM_NAMESPACES):
        return _fenced(tenant)
    return None


def _namespace_route(info: RequestInfo, state: RoutingState, *, space: tuple[str, ...], body_name: str | None) -> Route:
    """Step 3 for namespaces themselves: the TP owning the namespace's tenant; a union of every
    TP for a list or watch, each keeping the namespaces it owns."""
    p = state.placement
    name = _object_name(info, body_name)
    if name:
        return _forward(owner_of_namespaced(name, state, tenant=info.tenant), space)
    if info.verb == "create":
        if body_name is None:
            return Route(RouteKind.NEEDS_BODY)
        return _forward(p.system_partition, space)
    if info.verb in _UNION_VERBS:
        return Route(RouteKind.FAN_OUT, p.tenant_partitions, space, owner_filter=True)
    return _forward(p.system_partition, space)


def _system_route(info: RequestInfo, state: RoutingState, *, space: tuple[str, ...], token_namespace: str | None) -> Route:
    """Step 4: the system partition, but a TokenReview goes where its service-account token was
    issued (routing.tokens), and a write of a REPLICATED definition (or a read of one, or of its
    status) also names the partitions that get copies (`Route.replicate_to`)."""
    p = state.placement
    key = (info.api_group, info.resource)
    if key == TOKEN_REVIEWS and info.verb == "create":
        if token_namespace is None:
            return Route(RouteKind.NEEDS_BODY)
        if token_namespace:
            return _forward(owner_of_namespaced(token_namespace, state), space)
    if key in REPLICATED and not info.namespace and (
        (info.verb in _WRITE_VERBS and not info.subresource) or (info.verb == "get" and info.subresource in ("", "status"))
    ):
        return Route(RouteKind.FORWARD, (p.system_partition,), space, replicate_to=replica_partitions(p, key))
    return _forward(p.system_partition, space)
