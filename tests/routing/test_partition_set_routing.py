"""Routing and union merging across a change of the partition set: draining and retired
partitions, append-only RV spaces, tenants fenced during a move, a union watch a partition joins."""

from __future__ import annotations

from typing import Any

import orjson

from routing import rv as rvcodec
from routing.decide import FENCE_RETRY_AFTER, RouteKind, RoutingState, decide
from routing.merge import WatchMerge
from routing.placement import Placement, fnv1a64
from routing.requestinfo import parse_request_info
from tests.routing.test_decide import _config
from tests.routing.test_merge import bookmark, event

PARTITIONS = [
    {"name": "tp1", "role": "tenant", "kubeconfig": "/k/tp1"},
    {"name": "tp2", "role": "tenant", "kubeconfig": "/k/tp2"},
    {"name": "rp1", "role": "resource", "kubeconfig": "/k/rp1"},
    {"name": "rp2", "role": "resource", "kubeconfig": "/k/rp2", "state": "retired"},
    {"name": "rp3", "role": "resource", "kubeconfig": "/k/rp3", "state": "draining"},
    {"name": "rp4", "role": "resource", "kubeconfig": "/k/rp4"},
]
CONFIG = _config(partitions=PARTITIONS, nodes={"placement": "hash"}, tenants={"ranges": [{"first": "a", "last": "z", "partition": "tp1"}],
                                                                             "partitions": {"acme": "tp2"}, "fenced": ["acme"]})
STATE = RoutingState(Placement.from_config(CONFIG), namespaced=frozenset({("", "pods"), ("", "configmaps")}))


def route(method: str, path: str, *, body_name: str | None = None) -> Any:
    return decide(parse_request_info(method, path, {}), STATE, body_name=body_name)


def test_unions_go_to_live_partitions_and_rvs_keep_every_slot() -> None:
    r = route("GET", "/api/v1/nodes")
    assert r.kind is RouteKind.FAN_OUT
    assert r.partitions == ("rp1", "rp3", "rp4")  # draining still serves what it holds
    assert r.rv_space == ("rp1", "rp2", "rp3", "rp4")  # the retired slot is kept, never reused
    assert route("GET", "/partitions/rp2/api/v1/nodes/x").status_code == 404  # retired: not routable


def test_new_nodes_are_hashed_over_active_resource_partitions_only() -> None:
    names = [f"node-{i}" for i in range(200)]
    placed = {route("POST", "/api/v1/nodes", body_name=n).partitions[0] for n in names}
    assert placed == {"rp1", "rp4"}
    for n in names:
        assert route("POST", "/api/v1/nodes", body_name=n).partitions == (("rp1", "rp4")[fnv1a64(n) % 2],)


def test_writes_of_a_fenced_tenant_get_503_with_retry_after_and_reads_go_on() -> None:
    for method, path, body_name in [
        ("POST", "/api/v1/namespaces/acme-web/configmaps", None),
        ("PUT", "/api/v1/namespaces/acme-web/configmaps/c", None),
        ("PATCH", "/api/v1/namespaces/acme-web/pods/p/status", None),
        ("DELETE", "/api/v1/namespaces/acme-web", None),
        ("POST", "/api/v1/namespaces", "acme-new"),
        ("DELETE", "/api/v1/namespaces/acme-web/configmaps", None),
    ]:
        r = route(method, path, body_name=body_name)
        assert (r.kind, r.status_code, r.retry_after) == (RouteKind.REJECT, 503, FENCE_RETRY_AFTER), (method, path)
        assert "acme" in r.message
    assert route("GET", "/api/v1/namespaces/acme-web/configmaps/c").partitions == ("tp2",)
    assert route("POST", "/api/v1/namespaces/bravo-web/configmaps").partitions == ("tp1",)
    assert route("POST", "/api/v1/namespaces/kube-system/configmaps").partitions == ("tp1",)


TABLE = rvcodec.EpochTable((
    rvcodec.Epoch(1, ("tp1", "tp2"), 52, (0, 0)),
    rvcodec.Epoch(2, ("tp1", "tp2", "tp3"), 34, (0, 0, 0)),
))


def test_an_rv_from_before_a_partition_joined_reads_nothing_seen_of_it() -> None:
    old = rvcodec.RVCodec(("tp1", "tp2"), TABLE)
    new = rvcodec.RVCodec(("tp1", "tp2", "tp3"), TABLE)
    rv = old.encode((10, 20))
    assert new.decode(rv) == (10, 20, 0)
    assert new.is_vector_form(rv) and not new.is_vector_form(new.object_rv(0, 10))
    assert rvcodec.compare(rv, new.encode((10, 20, 0))) < 0  # a newer epoch is a larger number
    assert not new.is_complete((10, 20, 0))
    assert rvcodec.RVCodec(("tp1", "tp2", "tp3"), TABLE, retired=("tp3",)).is_complete((10, 20, 0))


def test_a_union_watch_a_partition_joins_stamps_its_initial_events_with_nothing_seen_of_it() -> None:
    merge = WatchMerge(codec=rvcodec.RVCodec(("tp1", "tp2"), TABLE), start=(10, 20), initial=set(),
                       client_initial_events=False, bookmarks=True)
    assert merge.on_line("tp1", event("MODIFIED", "a", "alpha", 11))
    assert merge.rebase(rvcodec.RVCodec(("tp1", "tp2", "tp3"), TABLE)) == ("tp3",)
    new = rvcodec.RVCodec(("tp1", "tp2", "tp3"), TABLE)
    out = [orjson.loads(line) for line in merge.on_line("tp3", event("ADDED", "z", "zeta", 5))]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in out] == [("ADDED", "z")]
    stamp = out[0]["object"]["metadata"]["resourceVersion"]
    assert new.decode(stamp) == (11, 20, 0)  # resuming from it starts tp3 over: nothing lost
    assert merge.on_line("tp3", bookmark(7, end=True)) == []  # not the client's initial-events-end
    assert not merge.joining and not merge.initial
    after = orjson.loads(merge.on_line("tp3", event("MODIFIED", "z", "zeta", 8))[0])
    assert new.decode(after["object"]["metadata"]["resourceVersion"]) == (11, 20, 8)
    assert rvcodec.compare(stamp, after["object"]["metadata"]["resourceVersion"]) < 0


def test_writes_of_cluster_scoped_definitions_are_replicated_to_every_other_live_tp() -> None:
    state = RoutingState(Placement.from_config(_config()), namespaced=frozenset())

    def r(method: str, path: str) -> Any:
        return decide(parse_request_info(method, path, {}), state)

    for method, path in [
        ("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
        ("PUT", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"),
        ("PATCH", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/p"),
        ("DELETE", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/p"),
        ("DELETE", "/apis/scheduling.k8s.io/v1/priorityclasses"),
        # a GET: the system partition's answer, the other copies compared (routing.replicas)
        ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"),
        ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com/status"),
    ]:
        assert (r(method, path).partitions, r(method, path).replicate_to) == (("tp1",), ("tp2",)), (method, path)
    for method, path in [
        ("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),  # lists and watches: the system partition's
        ("PUT", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com/status"),  # each kube-apiserver's own
        ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles"),  # RBAC stays per partition
    ]:
        assert r(method, path).replicate_to == (), (method, path)

