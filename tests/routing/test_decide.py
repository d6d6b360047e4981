"""Route decisions (routing.decide, routing.placement): the routing precedence, tested with tables
and hypothesis over a federation of two tenant partitions and two resource partitions."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config import ProxyConfig, parse_config
from routing.decide import Route, RouteKind, RoutingState, decide, owner_by_key, owner_filter, route_keep
from routing.placement import SYSTEM_NAMESPACES, Placement, fnv1a64
from routing.requestinfo import parse_request_info

HYPOTHESIS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TPS = ("tp1", "tp2")
RPS = ("rp1", "rp2")


def _config(**overrides: object) -> ProxyConfig:
    doc: dict[str, object] = {
        "partitions": [
            {"name": "tp1", "role": "tenant", "kubeconfig": "/k/tp1"},
            {"name": "tp2", "role": "tenant", "kubeconfig": "/k/tp2"},
            {"name": "rp1", "role": "resource", "kubeconfig": "/k/rp1"},
            {"name": "rp2", "role": "resource", "kubeconfig": "/k/rp2"},
        ],
        "system_partition": "tp1",
        "tenants": {
            "namespace_to_tenant": "prefix",
            "separator": "-",
            "namespaces": {"team-x": "zulu"},
            "partitions": {"acme": "tp2", "zeta": "tp1"},
            "ranges": [
                {"first": "a", "last": "m", "partition": "tp1"},
                {"first": "n", "last": "z", "partition": "tp2"},
            ],
        },
        "nodes": {"placement": "prefix", "prefixes": {"rp1-": "rp1", "rp2-": "rp2"}},
    }
    doc.update(overrides)
    return parse_config(doc)


CONFIG = _config()
PLACEMENT = Placement.from_config(CONFIG)
STATE = RoutingState(
    PLACEMENT,
    namespaced=frozenset({("", "pods"), ("apps", "deployments"), ("coordination.k8s.io", "leases"), ("", "secrets")}),
)


def route(
    method: str, path: str, query: Mapping[str, str] | None = None, *, body_name: str | None = None
) -> Route:
    return decide(parse_request_info(method, path, query or {}), STATE, body_name=body_name)


def forward(partition: str, rv_space: tuple[str, ...]) -> Route:
    return Route(RouteKind.FORWARD, (partition,), rv_space)


def fan_out(partitions: tuple[str, ...], *, owner_filter: bool) -> Route:
    return Route(RouteKind.FAN_OUT, partitions, partitions, owner_filter=owner_filter)


# --- placement --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "tenant", "partition"),
    [
        ("bravo-web", "bravo", "tp1"),  # range a..m
        ("mike-db", "mike", "tp1"),  # last letter of the range
        ("nova-web", "nova", "tp2"),  # range n..z
        ("zulu", "zulu", "tp2"),  # no separator: the whole name is the tenant
        ("acme-web", "acme", "tp2"),  # explicit tenant map beats the range a..m
        ("zeta-1", "zeta", "tp1"),  # explicit tenant map beats the range n..z
        ("team-x", "zulu", "tp2"),  # explicit namespace map beats the prefix rule
        ("9lives", "9lives", "tp1"),  # no range matches: the system partition
    ],
)
def test_namespace_belongs_to_its_tenants_partition(namespace: str, tenant: str, partition: str) -> None:
    assert PLACEMENT.tenant_of_namespace(namespace) == tenant
    assert PLACEMENT.partition_of_namespace(namespace) == partition


@pytest.mark.parametrize("namespace", sorted(SYSTEM_NAMESPACES))
def test_system_namespaces_belong_to_the_system_partition(namespace: str) -> None:
    assert PLACEMENT.partition_of_namespace(namespace) == "tp1"


def test_default_partition_takes_tenants_outside_every_range() -> None:
    placement = Placement.from_config(_config(tenants={"default_partition": "tp2"}))

    assert placement.partition_of_namespace("9lives") == "tp2"


def test_fnv1a64_matches_the_published_test_vectors() -> None:
    # FNV-1a 64 test vectors (draft-eastlake-fnv, "" and "a").
    assert fnv1a64("") == 0xCBF29CE484222325
    assert fnv1a64("a") == 0xAF63DC4C8601EC8C
    assert fnv1a64("foobar") == 0x85944171F73967E8


# --- node-scoped objects: the RP that owns the node name ---------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("GET", "/api/v1/nodes/rp1-n1", "rp1"),
        ("GET", "/api/v1/nodes/rp2-n1", "rp2"),
        ("PATCH", "/api/v1/nodes/rp2-n1", "rp2"),  # kubectl label
        ("PUT", "/api/v1/nodes/rp1-n1", "rp1"),
        ("PATCH", "/api/v1/nodes/rp2-n1/status", "rp2"),  # kubelet node status
        ("DELETE", "/api/v1/nodes/rp2-n1", "rp2"),
        ("GET", "/api/v1/nodes/rp2-n1", "rp2"),
        ("GET", "/apis/storage.k8s.io/v1/csinodes/rp2-n1", "rp2"),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/rp2-n1", "rp2"),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/rp1-n1", "rp1"),
    ],
)
def test_node_scoped_object_goes_to_the_rp_owning_the_node_name(method: str, path: str, expected: str) -> None:
    assert route(method, path) == forward(expected, RPS)


def test_single_node_watch_by_name_goes_to_its_rp() -> None:
    assert route("GET", "/api/v1/watch/nodes/rp2-n1") == forward("rp2", RPS)


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/api/v1/nodes", {}),
        ("/api/v1/nodes", {"watch": "true"}),
        ("/api/v1/nodes", {"watch": "1", "labelSelector": "node-role.kubernetes.io/worker"}),
        ("/api/v1/watch/nodes", {}),
        ("/apis/storage.k8s.io/v1/csinodes", {}),
        ("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {}),
        ("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {"watch": "true"}),
    ],
)
def test_node_list_and_watch_are_union_over_all_resource_partitions(path: str, query: dict[str, str]) -> None:
    result = route("GET", path, query)

    assert result.kind is RouteKind.FAN_OUT
    assert result.partitions == RPS
    assert result.rv_space == RPS


def test_node_deletecollection_is_union_over_all_resource_partitions() -> None:
    result = route("DELETE", "/api/v1/nodes")

    assert (result.kind, result.partitions) == (RouteKind.FAN_OUT, RPS)


def test_node_create_without_url_name_needs_the_body_name() -> None:
    assert route("POST", "/api/v1/nodes").kind is RouteKind.NEEDS_BODY


@pytest.mark.parametrize(("body_name", "expected"), [("rp1-n7", "rp1"), ("rp2-n7", "rp2")])
def test_node_create_is_routed_by_body_name_placement(body_name: str, expected: str) -> None:
    assert route("POST", "/api/v1/nodes", body_name=body_name) == forward(expected, RPS)


def test_node_create_goes_where_a_later_get_by_name_looks() -> None:
    for name in ["rp1-a", "rp2-b", "worker-7", "gpu-node-0001"]:
        created = route("POST", "/api/v1/nodes", body_name=name)
        fetched = route("GET", f"/api/v1/nodes/{name}")
        watched = route("GET", f"/api/v1/watch/nodes/{name}")
        assert created == fetched == watched
        assert created.partitions[0] in RPS


def test_node_create_without_any_name_goes_to_one_resource_partition() -> None:
    # generateName: no name anywhere, the first RP names it.
    assert route("POST", "/api/v1/nodes", body_name="") == forward("rp1", RPS)


def test_node_lease_create_is_routed_by_body_name_to_the_nodes_rp() -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"

    assert route("POST", path).kind is RouteKind.NEEDS_BODY
    assert route("POST", path, body_name="rp2-n1") == forward("rp2", RPS)


def test_lease_outside_kube_node_lease_is_tenant_scoped() -> None:
    # Leader-election leases live in a tenant's namespace, not with the nodes.
    result = route("PUT", "/apis/coordination.k8s.io/v1/namespaces/nova-ctl/leases/rp1-looks-like-a-node")

    assert result == forward("tp2", TPS)


# --- tenant-scoped objects --------------------------------------------------------------------


def test_namespace_create_without_url_name_needs_the_body_name() -> None:
    assert route("POST", "/api/v1/namespaces").kind is RouteKind.NEEDS_BODY


@pytest.mark.parametrize(
    ("body_name", "expected"),
    [("bravo-web", "tp1"), ("nova-web", "tp2"), ("acme-web", "tp2"), ("zeta-db", "tp1"), ("team-x", "tp2")],
)
def test_namespace_create_is_routed_by_body_name_to_the_tenants_partition(body_name: str, expected: str) -> None:
    assert route("POST", "/api/v1/namespaces", body_name=body_name) == forward(expected, TPS)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/namespaces/nova-web"),
        ("DELETE", "/api/v1/namespaces/nova-web"),
        ("PUT", "/api/v1/namespaces/nova-web/finalize"),
        ("PUT", "/api/v1/namespaces/nova-web/status"),
    ],
)
def test_namespace_by_name_goes_to_the_tenants_partition(method: str, path: str) -> None:
    assert route(method, path) == forward("tp2", TPS)


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/namespaces/nova-web/pods", {}, "tp2"),
        ("GET", "/api/v1/namespaces/nova-web/pods", {"watch": "true"}, "tp2"),
        ("GET", "/api/v1/watch/namespaces/nova-web/pods", {}, "tp2"),
        ("GET", "/api/v1/namespaces/nova-web/pods/p1", {}, "tp2"),
        ("POST", "/api/v1/namespaces/nova-web/pods", {}, "tp2"),
        ("POST", "/api/v1/namespaces/nova-web/pods/p1/binding", {}, "tp2"),
        ("PUT", "/api/v1/namespaces/nova-web/pods/p1/status", {}, "tp2"),
        ("GET", "/api/v1/namespaces/nova-web/pods/p1/log", {"follow": "true"}, "tp2"),
        ("DELETE", "/api/v1/namespaces/nova-web/pods", {}, "tp2"),
        ("GET", "/api/v1/namespaces/bravo-web/secrets/s1", {}, "tp1"),
        ("PATCH", "/apis/apps/v1/namespaces/acme-shop/deployments/d1/scale", {}, "tp2"),
        ("GET", "/api/v1/namespaces/bravo-web/configmaps", {}, "tp1"),  # not in discovery yet: still by namespace
    ],
)
def test_namespaced_object_goes_only_to_the_tenants_partition(
    method: str, path: str, query: dict[str, str], expected: str
) -> None:
    assert route(method, path, query) == forward(expected, TPS)


@pytest.mark.parametrize("namespace", ["kube-system", "default", "kube-public"])
@pytest.mark.parametrize("path", ["/api/v1/namespaces/{ns}/pods", "/api/v1/namespaces/{ns}/secrets/s",
                                  "/api/v1/namespaces/{ns}"])
def test_system_namespaces_go_to_the_system_partition(namespace: str, path: str) -> None:
    assert route("GET", path.format(ns=namespace)) == forward("tp1", TPS)


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/api/v1/pods", {}),
        ("/api/v1/pods", {"watch": "true"}),
        ("/api/v1/watch/pods", {}),
        ("/apis/apps/v1/deployments", {}),
        ("/api/v1/secrets", {"watch": "1"}),
    ],
)
def test_cluster_wide_list_and_watch_of_namespaced_resource_is_union_over_all_tenant_partitions(
    path: str, query: dict[str, str]
) -> None:
    assert route("GET", path, query) == fan_out(TPS, owner_filter=True)


@pytest.mark.parametrize("query", [{"fieldSelector": "spec.nodeName=rp1-n1"},
                                   {"fieldSelector": "spec.nodeName=rp1-n1", "watch": "true"}])
@pytest.mark.parametrize("prefix", ["", "/partitions/rp1"])
def test_kubelet_pod_list_and_watch_is_union_over_all_tenant_partitions(prefix: str, query: dict[str, str]) -> None:
    assert route("GET", prefix + "/api/v1/pods", query) == fan_out(TPS, owner_filter=True)


@pytest.mark.parametrize("query", [{}, {"watch": "true"}])
def test_namespace_list_and_watch_is_union_over_all_tenant_partitions(query: dict[str, str]) -> None:
    assert route("GET", "/api/v1/namespaces", query) == fan_out(TPS, owner_filter=True)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles"),
        ("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin"),
        ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles"),
        ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
        ("GET", "/api/v1/persistentvolumes/pv1"),
        ("GET", "/apis/storage.k8s.io/v1/storageclasses"),
    ],
)
def test_cluster_scoped_system_objects_go_to_the_system_partition_with_native_rvs(method: str, path: str) -> None:
    assert route(method, path) == Route(RouteKind.FORWARD, ("tp1",), ())


@pytest.mark.parametrize("path", ["/api", "/api/v1", "/version", "/healthz", "/openapi/v3/api/v1"])
def test_discovery_goes_to_the_system_partition(path: str) -> None:
    assert route("GET", path) == Route(RouteKind.FORWARD, ("tp1",), ())


@pytest.mark.parametrize("path", ["/apis", "/apis/", "/apis/apps/v1", "/openapi/v3", "/openapi/v2", "/openapi/v3/apis/apps/v1"])
def test_group_discovery_and_openapi_merge_the_other_tenant_partitions(path: str) -> None:
    assert route("GET", path) == Route(RouteKind.FORWARD, ("tp1",), (), discovery_from=("tp2",))
    assert route("GET", "/partitions/tp2" + path) == Route(RouteKind.FORWARD, ("tp2",), ())  # pinned: that TP's own


def test_malformed_path_goes_to_the_system_partition_to_be_answered_there() -> None:
    assert route("GET", "/api/v1/namespaces/nova-web//pods") == Route(RouteKind.FORWARD, ("tp1",), ())


def test_empty_namespace_segment_lists_all_namespaces_as_a_union_over_all_tps() -> None:
    assert route("GET", "/api/v1/namespaces//pods", {"watch": "true"}) == fan_out(TPS, owner_filter=True)


# --- the partition path prefix ----------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/partitions/tp9/api/v1/pods", "/partitions/tp9/api", "/partitions/TP1/api/v1/nodes", "/partitions/tp9/version"],
)
def test_unknown_partition_prefix_is_rejected_with_404_not_found(path: str) -> None:
    result = route("GET", path)

    assert result.kind is RouteKind.REJECT
    assert result.status_code == 404
    assert result.reason == "NotFound"
    assert result.message
    assert result.partitions == ()


@pytest.mark.parametrize(
    ("method", "path", "query"),
    [
        ("GET", "/partitions/tp2/api/v1/pods", {}),
        ("GET", "/partitions/tp2/api/v1/pods", {"watch": "true"}),
        ("GET", "/partitions/tp2/api/v1/namespaces/bravo-web/pods", {}),  # bravo belongs to tp1
        ("POST", "/partitions/tp2/api/v1/namespaces/bravo-web/pods/p1/binding", {}),
        ("GET", "/partitions/tp2/api/v1/namespaces", {}),
        ("POST", "/partitions/tp2/api/v1/namespaces", {}),
    ],
)
def test_tenant_partition_prefix_pins_tenant_scoped_requests_to_that_tp(
    method: str, path: str, query: dict[str, str]
) -> None:
    assert route(method, path, query) == forward("tp2", TPS)


def test_tenant_partition_prefix_pins_discovery_to_that_tp() -> None:
    assert route("GET", "/partitions/tp2/apis") == Route(RouteKind.FORWARD, ("tp2",), ())


@pytest.mark.parametrize("query", [{}, {"watch": "true"}])
def test_scheduler_node_list_under_tp_prefix_stays_union_over_all_rps(query: dict[str, str]) -> None:
    result = route("GET", "/partitions/tp2/api/v1/nodes", query)

    assert (result.kind, result.partitions, result.rv_space) == (RouteKind.FAN_OUT, RPS, RPS)


def test_node_get_under_tp_prefix_goes_to_the_nodes_rp() -> None:
    assert route("GET", "/partitions/tp1/api/v1/nodes/rp2-n1") == forward("rp2", RPS)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/partitions/rp2/api/v1/nodes/rp2-n1"),
        ("POST", "/partitions/rp2/api/v1/nodes"),  # kubelet registration: no body needed
        ("PATCH", "/partitions/rp2/api/v1/nodes/rp2-n1/status"),
        ("GET", "/partitions/rp2/api/v1/nodes/whatever-name"),  # the prefix beats the name rule
        ("PUT", "/partitions/rp2/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/rp2-n1"),
        ("POST", "/partitions/rp2/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"),
        ("GET", "/partitions/rp2/apis/storage.k8s.io/v1/csinodes/rp2-n1"),
        ("GET", "/partitions/rp2/api/v1/nodes"),
    ],
)
def test_resource_partition_prefix_pins_nodes_and_leases_to_that_rp(method: str, path: str) -> None:
    assert route(method, path) == forward("rp2", RPS)


@pytest.mark.parametrize("query", [{}, {"watch": "true"}, {"resourceVersion": "0"}])
def test_lease_list_of_every_namespace_under_rp_prefix_is_that_rps_node_leases(query: dict[str, str]) -> None:
    # kube-controller-manager's node lifecycle controller watches leases in all namespaces and
    # reads kube-node-lease/<node> from it: pinned to rp2 it must see rp2's node Leases, as it
    # does pointed straight at rp2's kube-apiserver (it marked every node NotReady otherwise).
    assert route("GET", "/partitions/rp2/apis/coordination.k8s.io/v1/leases", query) == forward("rp2", RPS)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        # unpinned: every partition (node Leases live in the RPs), each keeping what it owns
        ("/apis/coordination.k8s.io/v1/leases", fan_out(TPS + RPS, owner_filter=True)),
        ("/apis/coordination.k8s.io/v1/tenants/acme/leases", Route(RouteKind.FORWARD, ("tp2",), TPS)),  # Arktos: one TP
        ("/partitions/tp2/apis/coordination.k8s.io/v1/leases", Route(RouteKind.FORWARD, ("tp2",), TPS)),
        ("/partitions/rp2/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", forward("tp1", TPS)),
    ],
)
def test_other_lease_lists_keep_their_routes(path: str, expected: Route) -> None:
    assert route("GET", path) == expected


def test_a_union_of_every_lease_keeps_node_leases_from_the_rps_and_the_rest_from_their_owners() -> None:
    info = parse_request_info("GET", "/apis/coordination.k8s.io/v1/leases", {})
    keep = route_keep(info, decide(info, STATE), lambda: STATE)
    assert keep is not None

    def lease(namespace: str) -> dict[str, object]:
        return {"metadata": {"namespace": namespace, "name": "x"}}

    assert keep("rp1", lease("kube-node-lease")) and keep("rp2", lease("kube-node-lease"))
    assert not keep("rp1", lease("kube-system"))  # each RP's own kube-apiserver identity leases
    assert keep("tp1", lease("kube-system")) and not keep("tp2", lease("kube-system"))
    assert keep("tp2", lease("nova-web")) and not keep("tp1", lease("nova-web"))


@pytest.mark.parametrize("by_name", [False, True])
def test_the_watch_caches_owner_check_by_key_judges_as_the_owner_filter_of_objects(by_name: bool) -> None:
    owns, keep = owner_by_key(by_name, lambda: STATE), owner_filter(by_name, lambda: STATE)
    for partition in TPS + RPS:
        for namespace, name in [("", "kube-system"), ("", "nova-web"), ("kube-system", "x"), ("nova-web", "x"),
                                ("kube-node-lease", "rp1-n1"), ("", "")]:
            obj = {"metadata": {"namespace": namespace, "name": name}} if namespace else {"metadata": {"name": name}}
            assert owns(partition, namespace, name) == keep(partition, obj), (partition, namespace, name)
    assert not owns("tp2", "", "kube-system") if by_name else not owns("tp2", "kube-system", "x")


@pytest.mark.parametrize("query", [{}, {"watch": "true"}])
def test_pod_list_under_rp_prefix_stays_union_over_all_tps(query: dict[str, str]) -> None:
    assert route("GET", "/partitions/rp2/api/v1/pods", query) == fan_out(TPS, owner_filter=True)


def test_namespaced_request_under_rp_prefix_goes_to_the_tenants_tp() -> None:
    assert route("GET", "/partitions/rp1/api/v1/namespaces/nova-web/secrets/s") == forward("tp2", TPS)


# --- Arktos tenant paths ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        # the tenant in the path wins over the namespace name rule ("web" would be tenant "web" -> tp2)
        ("GET", "/api/v1/tenants/bravo/namespaces/web/pods", "tp1"),
        ("GET", "/api/v1/tenants/acme/namespaces/shop/pods/p1", "tp2"),
        ("POST", "/api/v1/tenants/nova/namespaces/db/pods", "tp2"),
        ("GET", "/api/v1/tenants/nova/namespaces/db", "tp2"),
        ("GET", "/apis/apps/v1/tenants/zeta/namespaces/web/deployments", "tp1"),
        ("GET", "/api/v1/tenants/nova/pods", "tp2"),  # every namespace of a tenant is in its TP
    ],
)
def test_arktos_tenant_path_goes_to_the_tenants_partition(method: str, path: str, expected: str) -> None:
    assert route(method, path) == forward(expected, TPS)


def test_arktos_namespace_create_goes_to_the_tenants_partition() -> None:
    assert route("POST", "/api/v1/tenants/nova/namespaces", body_name="web") == forward("tp2", TPS)


# --- rv_space ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "space"),
    [
        ("GET", "/api/v1/nodes", RPS),
        ("GET", "/api/v1/nodes/rp1-n", RPS),
        ("GET", "/partitions/rp1/api/v1/nodes/rp1-n", RPS),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/rp1-n", RPS),
        ("GET", "/apis/storage.k8s.io/v1/csinodes", RPS),
        ("GET", "/api/v1/pods", TPS),
        ("GET", "/api/v1/namespaces/kube-system/pods", TPS),
        ("GET", "/partitions/tp2/api/v1/namespaces/nova-web/pods/p", TPS),
        ("GET", "/api/v1/namespaces", TPS),
        ("GET", "/api/v1/namespaces/nova-web", TPS),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/nova-web/leases/l", TPS),
        ("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles", ()),
    ],
)
def test_rv_space_is_rps_for_node_scoped_and_tps_for_tenant_scoped(
    method: str, path: str, space: tuple[str, ...]
) -> None:
    result = route(method, path)

    assert result.rv_space == space
    if space:
        for partition in result.partitions:
            assert result.slot(partition) == space.index(partition)


def test_slot_of_a_partition_outside_the_rv_space_raises() -> None:
    with pytest.raises(ValueError):
        route("GET", "/api/v1/nodes").slot("tp1")


# --- hypothesis -------------------------------------------------------------------------------

_NODE_NAMES = st.one_of(
    st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,40}[a-z0-9])?", fullmatch=True),
    st.from_regex(r"rp[12]-[a-z0-9]{1,20}", fullmatch=True),
    st.text(min_size=1, max_size=40),
)


@HYPOTHESIS
@given(name=_NODE_NAMES, mode=st.sampled_from(["prefix", "regex", "hash"]))
def test_every_node_name_has_exactly_one_stable_owning_rp(name: str, mode: str) -> None:
    nodes = {
        "placement": mode,
        "prefixes": {"rp1-": "rp1", "rp2-": "rp2"},
        "regex": [{"pattern": "^rp1-", "partition": "rp1"}, {"pattern": "^rp2-", "partition": "rp2"}],
    }
    placement = Placement.from_config(_config(nodes=nodes))
    owner = placement.partition_of_node(name)

    assert owner in RPS
    assert placement.partition_of_node(name) == owner
    assert Placement.from_config(_config(nodes=nodes)).partition_of_node(name) == owner
    if name.startswith(("rp1-", "rp2-")) and mode != "hash":
        assert owner == name[:3]


@HYPOTHESIS
@given(name=st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,40}[a-z0-9])?", fullmatch=True))
def test_every_node_name_routes_get_create_and_lease_to_the_same_rp(name: str) -> None:
    owner = PLACEMENT.partition_of_node(name)
    lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"

    assert route("GET", f"/api/v1/nodes/{name}").partitions == (owner,)
    assert route("POST", "/api/v1/nodes", body_name=name).partitions == (owner,)
    assert route("PUT", f"{lease}/{name}").partitions == (owner,)
    assert route("POST", lease, body_name=name).partitions == (owner,)


@HYPOTHESIS
@given(namespace=st.text(max_size=30), tenant=st.one_of(st.just(""), st.text(max_size=12)))
def test_every_namespace_maps_to_a_tenant_partition(namespace: str, tenant: str) -> None:
    owner = PLACEMENT.partition_of_namespace(namespace, tenant=tenant)

    assert owner in TPS
    assert PLACEMENT.partition_of_namespace(namespace, tenant=tenant) == owner


@HYPOTHESIS
@given(
    namespace=st.from_regex(r"[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?", fullmatch=True),
    mode=st.sampled_from(["prefix", "name", "map"]),
)
def test_namespace_create_and_later_requests_in_it_agree_on_the_partition(namespace: str, mode: str) -> None:
    cfg = _config(tenants={**CONFIG.tenants.model_dump(), "namespace_to_tenant": mode})
    state = RoutingState(Placement.from_config(cfg), STATE.namespaced)

    def go(method: str, path: str, body_name: str | None = None) -> Route:
        return decide(parse_request_info(method, path, {}), state, body_name=body_name)

    created = go("POST", "/api/v1/namespaces", namespace)
    assert created.kind is RouteKind.FORWARD and created.partitions[0] in TPS
    assert go("GET", f"/api/v1/namespaces/{namespace}") == created
    assert go("POST", f"/api/v1/namespaces/{namespace}/pods").partitions == created.partitions


_SEGMENTS = st.sampled_from(
    ["", "api", "apis", "v1", "apps", "coordination.k8s.io", "storage.k8s.io", "rbac.authorization.k8s.io",
     "partitions", "tp1", "tp2", "rp1", "rp2", "tp9", "tenants", "acme", "nova", "namespaces", "kube-node-lease",
     "kube-system", "nova-web", "watch", "proxy", "pods", "nodes", "leases", "csinodes", "deployments",
     "clusterroles", "status", "finalize", "binding", "rp1-n1", "rp2-n1", "x", "é", " "]
)
_PATHS = st.one_of(st.lists(_SEGMENTS, max_size=10).map(lambda s: "/" + "/".join(s)), st.text(max_size=60))


@HYPOTHESIS
@given(
    method=st.sampled_from(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT"]),
    path=_PATHS,
    query=st.dictionaries(st.sampled_from(["watch", "fieldSelector"]), st.sampled_from(["true", "1", "0", "x"]),
                          max_size=2),
    body_name=st.one_of(st.none(), st.just(""), _NODE_NAMES),
)
def test_decide_never_raises_and_always_names_configured_partitions(
    method: str, path: str, query: dict[str, str], body_name: str | None
) -> None:
    info = parse_request_info(method, path, query)
    result = decide(info, STATE, body_name=body_name)

    assert isinstance(result, Route)
    if result.kind is RouteKind.REJECT:
        assert info.partition and info.partition not in TPS + RPS
        assert result.status_code == 404
    elif result.kind is RouteKind.NEEDS_BODY:
        assert body_name is None and info.verb == "create" and not info.name
    elif result.kind is RouteKind.FAN_OUT:
        assert result.partitions in (TPS, RPS)
        assert result.rv_space == result.partitions
    else:
        assert len(result.partitions) == 1
        assert result.partitions[0] in TPS + RPS
        if result.rv_space:
            assert result.partitions[0] in result.rv_space


@HYPOTHESIS
@given(st.lists(st.from_regex(r"[a-z]{1,3}(-[a-z0-9]{1,3})?", fullmatch=True) | st.sampled_from(sorted(SYSTEM_NAMESPACES)), max_size=30))
def test_a_placement_remembers_namespaces_without_changing_their_owner(namespaces: list[str]) -> None:
    """`partition_of_namespace` remembers each namespace's owner: asked again (in any order) it
    answers as the rules do, and a Placement made from the same rules starts with nothing."""
    placement = Placement.from_config(CONFIG)
    for namespace in namespaces + namespaces[::-1]:
        assert placement.partition_of_namespace(namespace) == placement._partition_of_namespace(namespace, "")
    assert Placement.from_config(CONFIG)._namespace_partitions == {}


def test_the_namespace_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import routing.placement as placement_module

    monkeypatch.setattr(placement_module, "NAMESPACE_MEMO_SIZE", 8)
    placement = Placement.from_config(CONFIG)
    for i in range(20):
        assert placement.partition_of_namespace(f"acme-{i}") == "tp2"
        assert len(placement._namespace_partitions) <= 8
    # an Arktos tenant in the path decides by itself, and is not remembered under the namespace
    assert placement.partition_of_namespace("acme-0", tenant="zeta") == "tp1"
    assert placement.partition_of_namespace("acme-0") == "tp2"
    # a name longer than any namespace can be is answered, not remembered
    placement._namespace_partitions.clear()
    assert placement.partition_of_namespace("acme-" + "x" * 100) == "tp2"
    assert placement._namespace_partitions == {}
