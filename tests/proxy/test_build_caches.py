"""Which configured caches get a protobuf twin (proxy.app.build_caches): resources whose
selectable fields the proxy reads from protobuf, unless `caches[].protobuf` is false."""

from __future__ import annotations

from typing import Any

from config import parse_config
from proxy.app import build_caches
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
