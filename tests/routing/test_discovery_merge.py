"""Merging discovery and OpenAPI documents over tenant partitions (routing.discovery_merge)."""

from __future__ import annotations

from typing import Any

import pytest

from routing import discovery_merge as dm


def group(name: str, *versions: tuple[str, list[str]]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "versions": [
        {"version": v, "resources": [{"resource": r, "scope": "Namespaced"} for r in rs]} for v, rs in versions]}


def aggregated(*groups: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "items": list(groups)}


def test_aggregated_discovery_is_the_system_partitions_then_what_only_others_serve() -> None:
    system = aggregated(group("apps", ("v1", ["deployments"])), group("batch", ("v1", ["jobs"])))
    tp2 = aggregated(group("apps", ("v1", ["deployments", "widgets"]), ("v2", ["gadgets"])), group("g.example.com", ("v1", ["widgets"])))
    merged = dm.merge(dm.Document.AGGREGATED, [system, tp2])
    assert [g["metadata"]["name"] for g in merged["items"]] == ["apps", "batch", "g.example.com"]
    apps = merged["items"][0]
    assert [v["version"] for v in apps["versions"]] == ["v1", "v2"]
    assert [r["resource"] for r in apps["versions"][0]["resources"]] == ["deployments", "widgets"]
    assert system["items"][0]["versions"][0]["resources"] == [{"resource": "deployments", "scope": "Namespaced"}]  # inputs untouched
    assert dm.merge(dm.Document.AGGREGATED, [system]) == system


def test_group_list_and_openapi_documents_take_the_union() -> None:
    system = {"kind": "APIGroupList", "groups": [{"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}]}]}
    tp2 = {"kind": "APIGroupList", "groups": [{"name": "apps", "versions": [{"groupVersion": "apps/v2", "version": "v2"}]},
                                              {"name": "g", "versions": [{"groupVersion": "g/v1", "version": "v1"}]}]}
    merged = dm.merge(dm.Document.GROUP_LIST, [system, tp2])
    assert [(g["name"], [v["groupVersion"] for v in g["versions"]]) for g in merged["groups"]] == [("apps", ["apps/v1", "apps/v2"]), ("g", ["g/v1"])]
    index = dm.merge(dm.Document.OPENAPI_V3_INDEX, [{"paths": {"api/v1": {"serverRelativeURL": "a"}}},
                                                    {"paths": {"api/v1": {"serverRelativeURL": "b"}, "apis/g/v1": {"serverRelativeURL": "c"}}}])
    assert index == {"paths": {"api/v1": {"serverRelativeURL": "a"}, "apis/g/v1": {"serverRelativeURL": "c"}}}
    v2 = dm.merge(dm.Document.OPENAPI_V2, [{"swagger": "2.0", "paths": {"/a": 1}, "definitions": {"A": 1}},
                                            {"swagger": "2.0", "paths": {"/b": 2}, "definitions": {"A": 9, "B": 2}}])
    assert v2 == {"swagger": "2.0", "paths": {"/a": 1, "/b": 2}, "definitions": {"A": 1, "B": 2}}
    with pytest.raises(ValueError):
        dm.merge(dm.Document.AGGREGATED, [[]])


@pytest.mark.parametrize(
    ("path", "accept", "kind"),
    [
        ("/apis", "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json", dm.Document.AGGREGATED),
        ("/apis/", "application/json", dm.Document.GROUP_LIST),
        ("/openapi/v3", "", dm.Document.OPENAPI_V3_INDEX),
        ("/openapi/v2", "application/json", dm.Document.OPENAPI_V2),
        ("/openapi/v2", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf", None),
        ("/apis/apps/v1", "", dm.Document.FALLBACK),
        ("/openapi/v3/apis/g.example.com/v1", "", dm.Document.FALLBACK),
        ("/api", "", None),
        ("/version", "", None),
    ],
)
def test_which_document_a_request_is(path: str, accept: str, kind: dm.Document | None) -> None:
    assert dm.document_of(path, accept) is kind


def test_etag_is_a_quoted_digest_of_the_bytes() -> None:
    assert dm.etag_of(b"a") == dm.etag_of(b"a") != dm.etag_of(b"b")
    assert dm.etag_of(b"a").startswith('"') and dm.etag_of(b"a").endswith('"')
