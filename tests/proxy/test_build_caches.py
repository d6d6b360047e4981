"""Which configured caches get a protobuf twin (proxy.app.build_caches): resources whose
selectable fields the proxy reads from protobuf, unless `caches[].protobuf` is false."""

from __future__ import annotations

from typing import Any

import pytest

from config import ConfigError, parse_config
from proxy.app import build_caches
from routing import rv as rvcodec
from tests.config.test_load import _valid


def _caches(caches: list[dict[str, Any]]) -> dict[str, str | None]:
    doc = _valid()
    doc["caches"] = caches
    built, _node_index = build_caches(parse_config(doc))
    return {c.spec.name: (c.protobuf.spec.name if c.protobuf is not None else None) for c in built}


def test_readable_resources_get_a_protobuf_twin_unless_turned_off() -> None:
    assert _caches([
        {"name": "nodes", "resource": "nodes", "role": "resource"},
        {"name": "leases", "group": "coordination.k8s.io", "resource": "leases", "role": "resource", "namespace": "kube-node-lease"},
        {"name": "pods", "resource": "pods", "role": "tenant", "protobuf": False},
        {"name": "events", "resource": "events", "role": "tenant"},  # involvedObject.* not read from protobuf
        {"name": "widgets", "group": "example.com", "resource": "widgets", "role": "tenant"},  # no protobuf
    ]) == {"nodes": "nodes-protobuf", "leases": "leases-protobuf", "pods": None, "events": None, "widgets": None}


def test_a_system_cache_speaks_the_system_partitions_native_rvs() -> None:
    doc = _valid()
    doc["caches"] = [{"name": "csidrivers", "group": "storage.k8s.io", "resource": "csidrivers", "role": "system"}]
    config = parse_config(doc)
    [built], _ = build_caches(config)
    assert isinstance(built.cache.codec, rvcodec.NativeCodec)
    assert built.cache.space == (config.system_partition,) and built.cache.codec.rv_space == ()


@pytest.mark.parametrize(("group", "resource"), [("", "pods"), ("", "nodes"), ("storage.k8s.io", "csinodes")])
def test_a_system_cache_of_namespaced_or_node_objects_fails_naming_the_field(group: str, resource: str) -> None:
    doc = _valid()
    doc["caches"] = [{"name": "c", "group": group, "resource": resource, "role": "system"}]
    with pytest.raises(ConfigError, match=r"^caches\.0\.role: a system cache holds cluster-scoped objects"):
        build_caches(parse_config(doc))


def test_the_default_caches_are_what_kubelets_watch_twinned_and_no_node_leases() -> None:
    """Kubelets watch nodes, pods, CSIDrivers and RuntimeClasses protobuf first (services: their
    selectable fields are not read from protobuf, proxy.app.build_caches). They write their
    Lease but never watch Leases, so node Leases are not cached: a cache of them would make every
    renewal an event in every worker (docs/sizing.md, "Every node's events in every worker")."""
    doc = _valid()
    doc.pop("caches", None)
    built, _node_index = build_caches(parse_config(doc))
    twins = {c.spec.name: (c.protobuf.spec.name if c.protobuf is not None else None) for c in built}
    assert twins == {"nodes": "nodes-protobuf", "pods": "pods-protobuf", "services": None,
                     "csidrivers": "csidrivers-protobuf", "runtimeclasses": "runtimeclasses-protobuf"}


def test_a_node_leases_cache_as_the_docs_write_it_has_no_twin() -> None:
    """The entry config.models.default_caches and the chart's values tell operators to add."""
    doc = _valid()
    doc["caches"] = [{"name": "node-leases", "group": "coordination.k8s.io", "resource": "leases",
                      "namespace": "kube-node-lease", "role": "resource", "protobuf": False}]
    built, _node_index = build_caches(parse_config(doc))
    assert [(c.spec.name, c.protobuf) for c in built] == [("node-leases", None)]