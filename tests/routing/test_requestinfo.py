"""RequestInfo parsing (routing.requestinfo): every path shape of the Kubernetes API, the partition
path prefix, Arktos tenant paths and malformed paths.

Expected values follow kube-apiserver's RequestInfoFactory
(`k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing.requestinfo import RequestInfo, parse_request_info

HYPOTHESIS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parse(method: str, path: str, query: Mapping[str, str] | None = None) -> RequestInfo:
    return parse_request_info(method, path, query or {})


# (method, path, query) -> (verb, api_group, api_version, namespace, resource, subresource, name)
RESOURCE_REQUESTS = [
    # core, cluster-wide and namespaced collections
    ("GET", "/api/v1/pods", {}, ("list", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/namespaces/ns1/pods", {}, ("list", "", "v1", "ns1", "pods", "", "")),
    ("GET", "/api/v1/namespaces/ns1/pods/p1", {}, ("get", "", "v1", "ns1", "pods", "", "p1")),
    ("HEAD", "/api/v1/namespaces/ns1/pods/p1", {}, ("get", "", "v1", "ns1", "pods", "", "p1")),
    ("get", "/api/v1/namespaces/ns1/pods/p1", {}, ("get", "", "v1", "ns1", "pods", "", "p1")),
    ("POST", "/api/v1/namespaces/ns1/pods", {}, ("create", "", "v1", "ns1", "pods", "", "")),
    ("PUT", "/api/v1/namespaces/ns1/pods/p1", {}, ("update", "", "v1", "ns1", "pods", "", "p1")),
    ("PATCH", "/api/v1/namespaces/ns1/pods/p1", {}, ("patch", "", "v1", "ns1", "pods", "", "p1")),
    ("DELETE", "/api/v1/namespaces/ns1/pods/p1", {}, ("delete", "", "v1", "ns1", "pods", "", "p1")),
    ("DELETE", "/api/v1/namespaces/ns1/pods", {}, ("deletecollection", "", "v1", "ns1", "pods", "", "")),
    # subresources
    ("GET", "/api/v1/namespaces/ns1/pods/p1/status", {}, ("get", "", "v1", "ns1", "pods", "status", "p1")),
    ("PUT", "/api/v1/namespaces/ns1/pods/p1/status", {}, ("update", "", "v1", "ns1", "pods", "status", "p1")),
    ("PATCH", "/api/v1/namespaces/ns1/pods/p1/status", {}, ("patch", "", "v1", "ns1", "pods", "status", "p1")),
    ("GET", "/api/v1/namespaces/ns1/pods/p1/log", {"follow": "true"}, ("get", "", "v1", "ns1", "pods", "log", "p1")),
    ("POST", "/api/v1/namespaces/ns1/pods/p1/binding", {}, ("create", "", "v1", "ns1", "pods", "binding", "p1")),
    ("POST", "/api/v1/namespaces/ns1/pods/p1/eviction", {}, ("create", "", "v1", "ns1", "pods", "eviction", "p1")),
    ("POST", "/api/v1/namespaces/ns1/pods/p1/exec", {}, ("create", "", "v1", "ns1", "pods", "exec", "p1")),
    ("GET", "/api/v1/namespaces/ns1/pods/p1/exec", {}, ("get", "", "v1", "ns1", "pods", "exec", "p1")),
    ("POST", "/api/v1/namespaces/ns1/pods/p1/portforward", {}, ("create", "", "v1", "ns1", "pods", "portforward", "p1")),
    (
        "GET",
        "/api/v1/namespaces/ns1/services/s1/proxy/some/path",
        {},
        ("get", "", "v1", "ns1", "services", "proxy", "s1"),
    ),
    ("POST", "/api/v1/namespaces/ns1/serviceaccounts/sa/token", {}, ("create", "", "v1", "ns1", "serviceaccounts", "token", "sa")),
    # the deprecated /proxy/ verb prefix takes no subresource
    ("GET", "/api/v1/proxy/namespaces/ns1/pods/p1", {}, ("proxy", "", "v1", "ns1", "pods", "", "p1")),
    # cluster-scoped core resources
    ("GET", "/api/v1/nodes", {}, ("list", "", "v1", "", "nodes", "", "")),
    ("POST", "/api/v1/nodes", {}, ("create", "", "v1", "", "nodes", "", "")),
    ("GET", "/api/v1/nodes/n1", {}, ("get", "", "v1", "", "nodes", "", "n1")),
    ("PATCH", "/api/v1/nodes/n1", {}, ("patch", "", "v1", "", "nodes", "", "n1")),
    ("PATCH", "/api/v1/nodes/n1/status", {}, ("patch", "", "v1", "", "nodes", "status", "n1")),
    ("DELETE", "/api/v1/nodes/n1", {}, ("delete", "", "v1", "", "nodes", "", "n1")),
    ("DELETE", "/api/v1/nodes", {}, ("deletecollection", "", "v1", "", "nodes", "", "")),
    ("GET", "/api/v1/persistentvolumes/pv1", {}, ("get", "", "v1", "", "persistentvolumes", "", "pv1")),
    # namespaces: the namespace is both the name and the namespace; status and finalize are its subresources
    ("GET", "/api/v1/namespaces", {}, ("list", "", "v1", "", "namespaces", "", "")),
    ("POST", "/api/v1/namespaces", {}, ("create", "", "v1", "", "namespaces", "", "")),
    ("GET", "/api/v1/namespaces/ns1", {}, ("get", "", "v1", "ns1", "namespaces", "", "ns1")),
    ("DELETE", "/api/v1/namespaces/ns1", {}, ("delete", "", "v1", "ns1", "namespaces", "", "ns1")),
    ("PUT", "/api/v1/namespaces/ns1/status", {}, ("update", "", "v1", "ns1", "namespaces", "status", "ns1")),
    ("PUT", "/api/v1/namespaces/ns1/finalize", {}, ("update", "", "v1", "ns1", "namespaces", "finalize", "ns1")),
    # API groups
    ("GET", "/apis/apps/v1/deployments", {}, ("list", "apps", "v1", "", "deployments", "", "")),
    ("GET", "/apis/apps/v1/namespaces/ns1/deployments", {}, ("list", "apps", "v1", "ns1", "deployments", "", "")),
    ("POST", "/apis/apps/v1/namespaces/ns1/deployments", {}, ("create", "apps", "v1", "ns1", "deployments", "", "")),
    ("GET", "/apis/apps/v1/namespaces/ns1/deployments/d1", {}, ("get", "apps", "v1", "ns1", "deployments", "", "d1")),
    (
        "PATCH",
        "/apis/apps/v1/namespaces/ns1/deployments/d1/scale",
        {},
        ("patch", "apps", "v1", "ns1", "deployments", "scale", "d1"),
    ),
    (
        "DELETE",
        "/apis/apps/v1/namespaces/ns1/deployments",
        {},
        ("deletecollection", "apps", "v1", "ns1", "deployments", "", ""),
    ),
    (
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {},
        ("list", "rbac.authorization.k8s.io", "v1", "", "clusterroles", "", ""),
    ),
    (
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
        {},
        ("get", "rbac.authorization.k8s.io", "v1", "", "clusterroles", "", "admin"),
    ),
    (
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
        {},
        ("update", "coordination.k8s.io", "v1", "kube-node-lease", "leases", "", "n1"),
    ),
    (
        "GET",
        "/apis/storage.k8s.io/v1/csinodes/n1",
        {},
        ("get", "storage.k8s.io", "v1", "", "csinodes", "", "n1"),
    ),
    (
        "PUT",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/foos.example.com/status",
        {},
        ("update", "apiextensions.k8s.io", "v1", "", "customresourcedefinitions", "status", "foos.example.com"),
    ),
    # watches: the /watch/ path prefix, ?watch=true and ?watch=1
    ("GET", "/api/v1/watch/pods", {}, ("watch", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/watch/namespaces/ns1/pods", {}, ("watch", "", "v1", "ns1", "pods", "", "")),
    ("GET", "/api/v1/watch/namespaces/ns1/pods/p1", {}, ("watch", "", "v1", "ns1", "pods", "", "p1")),
    ("GET", "/api/v1/watch/nodes/n1", {}, ("watch", "", "v1", "", "nodes", "", "n1")),
    ("GET", "/apis/apps/v1/watch/namespaces/ns1/deployments", {}, ("watch", "apps", "v1", "ns1", "deployments", "", "")),
    ("GET", "/api/v1/pods", {"watch": "true"}, ("watch", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/pods", {"watch": "1"}, ("watch", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/pods", {"watch": "True"}, ("watch", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/pods", {"watch": "false"}, ("list", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/pods", {"watch": "0"}, ("list", "", "v1", "", "pods", "", "")),
    (
        "GET",
        "/api/v1/pods",
        {"watch": "true", "fieldSelector": "spec.nodeName=rp1-n1"},
        ("watch", "", "v1", "", "pods", "", ""),
    ),
    ("GET", "/api/v1/namespaces/ns1/pods", {"watch": "1"}, ("watch", "", "v1", "ns1", "pods", "", "")),
    ("GET", "/api/v1/namespaces/ns1/pods/p1", {"watch": "true"}, ("watch", "", "v1", "ns1", "pods", "", "p1")),
    ("GET", "/api/v1/namespaces", {"watch": "true"}, ("watch", "", "v1", "", "namespaces", "", "")),
    # an empty namespace segment means all namespaces, as in kube-apiserver
    ("GET", "/api/v1/namespaces//pods", {}, ("list", "", "v1", "", "pods", "", "")),
    ("GET", "/api/v1/watch/namespaces//pods", {}, ("watch", "", "v1", "", "pods", "", "")),
    ("GET", "/apis/apps/v1/namespaces//deployments", {"watch": "1"}, ("watch", "apps", "v1", "", "deployments", "", "")),
    # a trailing slash is ignored, as kube-apiserver trims the path
    ("GET", "/api/v1/namespaces/ns1/pods/", {}, ("list", "", "v1", "ns1", "pods", "", "")),
]


@pytest.mark.parametrize(("method", "path", "query", "expected"), RESOURCE_REQUESTS)
def test_resource_request_is_parsed_like_kube_apiserver(
    method: str, path: str, query: dict[str, str], expected: tuple[str, ...]
) -> None:
    info = parse(method, path, query)

    assert info.is_resource_request
    assert not info.malformed
    got = (info.verb, info.api_group, info.api_version, info.namespace, info.resource, info.subresource, info.name)
    assert got == expected
    assert info.method == method.upper()
    assert info.upstream_path == path
    assert info.partition == ""
    assert info.tenant == ""
    assert info.api_prefix == path.split("/")[1]


@pytest.mark.parametrize(
    ("method", "path", "collection"),
    [
        ("GET", "/api/v1/pods", True),
        ("POST", "/api/v1/namespaces", True),
        ("DELETE", "/api/v1/namespaces/ns1/pods", True),
        ("GET", "/api/v1/namespaces/ns1/pods/p1", False),
        ("GET", "/api/v1/namespaces/ns1", False),
        ("POST", "/api/v1/namespaces/ns1/pods/p1/binding", False),
        ("GET", "/api", False),
    ],
)
def test_is_collection_means_no_name_in_the_url(method: str, path: str, collection: bool) -> None:
    assert parse(method, path).is_collection is collection


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/api",
        "/api/",
        "/api/v1",
        "/apis",
        "/apis/apps",
        "/apis/apps/v1",
        "/apis/rbac.authorization.k8s.io/v1",
        "/version",
        "/openapi/v2",
        "/openapi/v3",
        "/openapi/v3/apis/apps/v1",
        "/healthz",
        "/livez",
        "/readyz",
        "/metrics",
        "/.well-known/openid-configuration",
    ],
)
def test_discovery_and_other_non_resource_paths_are_not_resource_requests(path: str) -> None:
    info = parse("GET", path)

    assert not info.is_resource_request
    assert not info.malformed
    assert info.upstream_path == path
    assert info.verb == info.resource == info.name == info.namespace == ""


# --- the partition path prefix ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "partition", "upstream"),
    [
        ("/partitions/tp1/api/v1/namespaces/ns1/pods", "tp1", "/api/v1/namespaces/ns1/pods"),
        ("/partitions/rp2/api/v1/nodes/rp2-n1/status", "rp2", "/api/v1/nodes/rp2-n1/status"),
        ("/partitions/rp1/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", "rp1",
         "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"),
        ("/partitions/tp2/api/v1/watch/pods", "tp2", "/api/v1/watch/pods"),
        ("/partitions/tp1/api", "tp1", "/api"),
        ("/partitions/tp1/apis/apps/v1", "tp1", "/apis/apps/v1"),
        ("/partitions/tp1/version", "tp1", "/version"),
        ("/partitions/tp1/", "tp1", "/"),
        ("/partitions/tp1", "tp1", "/"),
    ],
)
def test_partition_prefix_is_recorded_and_removed_from_upstream_path(path: str, partition: str, upstream: str) -> None:
    info = parse("GET", path)

    assert info.partition == partition
    assert info.upstream_path == upstream
    assert not info.malformed


def test_partition_prefix_does_not_change_the_rest_of_the_request_info() -> None:
    bare = parse("POST", "/api/v1/namespaces/ns1/pods/p1/binding")
    prefixed = parse("POST", "/partitions/tp2/api/v1/namespaces/ns1/pods/p1/binding")

    assert prefixed.partition == "tp2"
    assert prefixed == RequestInfo(**{**_fields(bare), "partition": "tp2"})


def _fields(info: RequestInfo) -> dict[str, object]:
    return {name: getattr(info, name) for name in RequestInfo._fields}


# --- Arktos tenant paths ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "tenant", "upstream", "expected"),
    [
        (
            "GET",
            "/api/v1/tenants/acme/namespaces/ns1/pods",
            "acme",
            "/api/v1/namespaces/ns1/pods",
            ("list", "", "v1", "ns1", "pods", "", ""),
        ),
        (
            "GET",
            "/api/v1/tenants/acme/namespaces/ns1/pods/p1/log",
            "acme",
            "/api/v1/namespaces/ns1/pods/p1/log",
            ("get", "", "v1", "ns1", "pods", "log", "p1"),
        ),
        (
            "GET",
            "/api/v1/tenants/acme/pods",
            "acme",
            "/api/v1/pods",
            ("list", "", "v1", "", "pods", "", ""),
        ),
        (
            "POST",
            "/api/v1/tenants/acme/namespaces",
            "acme",
            "/api/v1/namespaces",
            ("create", "", "v1", "", "namespaces", "", ""),
        ),
        (
            "GET",
            "/api/v1/tenants/acme/namespaces",
            "acme",
            "/api/v1/namespaces",
            ("list", "", "v1", "", "namespaces", "", ""),
        ),
        (
            "PUT",
            "/api/v1/tenants/acme/namespaces/ns1/finalize",
            "acme",
            "/api/v1/namespaces/ns1/finalize",
            ("update", "", "v1", "ns1", "namespaces", "finalize", "ns1"),
        ),
        (
            "DELETE",
            "/api/v1/tenants/acme/namespaces/ns1/pods",
            "acme",
            "/api/v1/namespaces/ns1/pods",
            ("deletecollection", "", "v1", "ns1", "pods", "", ""),
        ),
        (
            "PATCH",
            "/apis/apps/v1/tenants/acme/namespaces/ns1/deployments/d1/scale",
            "acme",
            "/apis/apps/v1/namespaces/ns1/deployments/d1/scale",
            ("patch", "apps", "v1", "ns1", "deployments", "scale", "d1"),
        ),
    ],
)
def test_arktos_tenant_path_sets_tenant_and_removes_the_tenant_segment(
    method: str, path: str, tenant: str, upstream: str, expected: tuple[str, ...]
) -> None:
    info = parse(method, path)

    assert info.is_resource_request and not info.malformed
    assert info.tenant == tenant
    assert info.upstream_path == upstream
    got = (info.verb, info.api_group, info.api_version, info.namespace, info.resource, info.subresource, info.name)
    assert got == expected


@pytest.mark.parametrize(
    ("path", "upstream", "expected"),
    [
        ("/api/v1/watch/tenants/acme/pods", "/api/v1/watch/pods", ("watch", "", "pods", "")),
        (
            "/api/v1/watch/tenants/acme/namespaces/ns1/pods",
            "/api/v1/watch/namespaces/ns1/pods",
            ("watch", "ns1", "pods", ""),
        ),
        (
            "/apis/apps/v1/watch/tenants/acme/namespaces/ns1/deployments",
            "/apis/apps/v1/watch/namespaces/ns1/deployments",
            ("watch", "ns1", "deployments", ""),
        ),
        (
            "/api/v1/proxy/tenants/acme/namespaces/ns1/pods/p1",
            "/api/v1/proxy/namespaces/ns1/pods/p1",
            ("proxy", "ns1", "pods", "p1"),
        ),
    ],
)
def test_arktos_watch_and_proxy_prefix_come_before_the_tenant_segment(
    path: str, upstream: str, expected: tuple[str, ...]
) -> None:
    # Arktos' own table (CentaurusInfra/arktos staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo_test.go,
    # TestGetMultiTenancyAPIRequestInfo): "/api/v1/watch/tenants/fake_te/namespaces/fake_ns/pods"
    # is a watch of pods in tenant fake_te, namespace fake_ns.
    info = parse("GET", path)

    assert info.is_resource_request and not info.malformed
    assert info.tenant == "acme"
    assert info.upstream_path == upstream
    assert (info.verb, info.namespace, info.resource, info.name) == expected


def test_arktos_tenant_path_under_a_partition_prefix_removes_both() -> None:
    info = parse("GET", "/partitions/tp2/api/v1/tenants/acme/namespaces/ns1/pods/p1")

    assert (info.partition, info.tenant, info.namespace, info.name) == ("tp2", "acme", "ns1", "p1")
    assert info.upstream_path == "/api/v1/namespaces/ns1/pods/p1"


def test_tenants_collection_itself_is_an_ordinary_resource() -> None:
    info = parse("GET", "/api/v1/tenants")

    assert (info.verb, info.resource, info.tenant, info.malformed) == ("list", "tenants", "", False)


def test_tenant_object_path_is_flagged_malformed_because_partitions_do_not_serve_tenants() -> None:
    info = parse("GET", "/api/v1/tenants/acme")

    assert info.malformed
    assert info.tenant == "acme"


# --- malformed paths --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/namespaces/ns1//pods",
        "/api/v1/namespaces/ns1/pods//status",
        "/api/v1//pods",
        "/api//pods",
        "/api//namespaces/ns1/pods",
        "/apis//v1/deployments",
        "/apis/apps//deployments",
        "/api/v1/watch",
        "/api/v1/watch/",
        "/partitions//api",
        "/partitions//api/v1/pods",
        "/partitions/",
        "/api/v1/tenants//namespaces/ns1/pods",
        "/api/v1/tenants/acme//pods",
    ],
)
def test_paths_with_empty_segments_are_flagged_malformed(path: str) -> None:
    info = parse("GET", path)

    assert info.malformed


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/namespaces/ns1//pods",
        "/api//pods",
        "/api/v1/watch",
        "/partitions//api",
        "/partitions/",
        "/api/v1/tenants/acme",
        "/api/v1/tenants//namespaces/ns1/pods",
    ],
)
def test_malformed_path_is_never_forwarded_as_a_well_formed_path(path: str) -> None:
    # The system partition must answer a malformed path as kube-apiserver does (404), so the
    # upstream path must not turn into a discovery path or another object's path.
    info = parse("GET", path)

    assert info.malformed
    assert parse("GET", info.upstream_path).malformed, info.upstream_path


# --- hypothesis -------------------------------------------------------------------------------

_TOKENS = st.sampled_from(
    ["", "api", "apis", "v1", "apps", "partitions", "tenants", "namespaces", "watch", "proxy", "status",
     "finalize", "pods", "nodes", "x", "..", "%2F", " ", "\x00", "é"]
)
_TOKEN_PATHS = st.lists(_TOKENS, max_size=9).map(lambda segs: "/" + "/".join(segs))
_ANY_PATHS = st.one_of(st.text(max_size=80), _TOKEN_PATHS, _TOKEN_PATHS.map(lambda p: "/partitions/tp1" + p))
_QUERIES = st.dictionaries(
    st.sampled_from(["watch", "fieldSelector", "labelSelector", "resourceVersion"]), st.text(max_size=10), max_size=3
)


@HYPOTHESIS
@given(method=st.one_of(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]), st.text(max_size=10)),
       path=_ANY_PATHS, query=_QUERIES)
def test_parse_request_info_never_raises(method: str, path: str, query: dict[str, str]) -> None:
    info = parse_request_info(method, path, query)

    assert isinstance(info, RequestInfo)
    assert info.method == method.upper()
    if info.is_resource_request and not info.malformed:
        assert info.resource


_KEYWORDS = {"api", "apis", "watch", "proxy", "tenants", "namespaces", "partitions", "status", "finalize"}
_NAMES = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,10}[a-z0-9])?", fullmatch=True).filter(lambda s: s not in _KEYWORDS)
_GROUPS = st.sampled_from(["", "apps", "batch", "coordination.k8s.io", "rbac.authorization.k8s.io", "example.com"])
_VERSIONS = st.sampled_from(["v1", "v1beta1", "v2alpha1"])
_METHODS = st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"])


@st.composite
def _valid_requests(draw: st.DrawFn) -> dict[str, object]:
    group = draw(_GROUPS)
    version = draw(_VERSIONS)
    partition = draw(st.one_of(st.just(""), _NAMES))
    tenant = draw(st.one_of(st.just(""), _NAMES))
    namespace = draw(st.one_of(st.just(""), _NAMES))
    watch_prefix = draw(st.booleans())
    resource = draw(_NAMES)
    name = draw(st.one_of(st.just(""), _NAMES))
    subresource = draw(_NAMES) if name and not watch_prefix and draw(st.booleans()) else ""
    method = "GET" if watch_prefix else draw(_METHODS)
    head = ["api", version] if not group else ["apis", group, version]
    tail = (["watch"] if watch_prefix else []) + (["namespaces", namespace] if namespace else [])
    tail += [resource] + ([name] if name else []) + ([subresource] if subresource else [])
    upstream = "/" + "/".join(head + tail)
    # Arktos puts the tenant segment after the watch prefix: /api/v1/watch/tenants/<t>/...
    verb_prefix, rest = (["watch"], tail[1:]) if watch_prefix else ([], tail)
    path = "/" + "/".join(head + verb_prefix + (["tenants", tenant] if tenant else []) + rest)
    if partition:
        path = f"/partitions/{partition}{path}"
    return dict(method=method, path=path, upstream=upstream, group=group, version=version, partition=partition,
                tenant=tenant, namespace=namespace, resource=resource, name=name, subresource=subresource,
                watch=watch_prefix)


@HYPOTHESIS
@given(req=_valid_requests())
def test_valid_path_round_trips_through_upstream_path(req: dict[str, object]) -> None:
    info = parse_request_info(str(req["method"]), str(req["path"]), {})

    assert info.is_resource_request and not info.malformed
    assert info.upstream_path == req["upstream"]
    assert (info.partition, info.tenant) == (req["partition"], req["tenant"])
    assert (info.api_group, info.api_version) == (req["group"], req["version"])
    assert (info.namespace, info.resource, info.name, info.subresource) == (
        req["namespace"], req["resource"], req["name"], req["subresource"],
    )
    if req["watch"]:
        assert info.verb == "watch"
    # Parsing the upstream path again gives the same request without prefix and tenant.
    again = parse_request_info(str(req["method"]), info.upstream_path, {})
    assert again == RequestInfo(**{**_fields(info), "partition": "", "tenant": ""})
