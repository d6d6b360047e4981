"""Labels of the request SLI histogram, as kube-apiserver computes them (routing.sli;
k8s.io/apiserver/pkg/endpoints/metrics: CanonicalVerb, CleanVerb, CleanScope)."""

from __future__ import annotations

import pytest

from routing.requestinfo import parse_request_info
from routing.sli import COMPONENT, SLI_BUCKETS, sli_labels


@pytest.mark.parametrize(
    ("method", "path", "query", "content_type", "expected"),
    [
        ("GET", "/api/v1/namespaces/a-x/pods/p", {}, "", ("GET", "", "v1", "pods", "", "resource")),
        ("GET", "/api/v1/namespaces/a-x/pods", {}, "", ("LIST", "", "v1", "pods", "", "namespace")),
        ("GET", "/api/v1/pods", {}, "", ("LIST", "", "v1", "pods", "", "cluster")),
        ("GET", "/api/v1/nodes", {"watch": "true"}, "", ("WATCH", "", "v1", "nodes", "", "cluster")),
        ("POST", "/api/v1/namespaces/a-x/pods", {}, "application/json", ("POST", "", "v1", "pods", "", "resource")),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", {}, "application/vnd.kubernetes.protobuf",
         ("PUT", "coordination.k8s.io", "v1", "leases", "", "resource")),
        ("PATCH", "/api/v1/namespaces/a-x/pods/p/status", {}, "application/strategic-merge-patch+json",
         ("PATCH", "", "v1", "pods", "status", "resource")),
        ("PATCH", "/api/v1/namespaces/a-x/pods/p", {}, "application/apply-patch+yaml", ("APPLY", "", "v1", "pods", "", "resource")),
        ("DELETE", "/api/v1/namespaces/a-x/pods", {}, "", ("DELETE", "", "v1", "pods", "", "namespace")),
        ("POST", "/api/v1/namespaces/a-x/pods/p/exec", {}, "", ("CONNECT", "", "v1", "pods", "exec", "resource")),
    ],
)
def test_sli_labels_are_kube_apiservers(method: str, path: str, query: dict[str, str], content_type: str, expected: tuple[str, ...]) -> None:
    labels = sli_labels(parse_request_info(method, path, query), method=method, content_type=content_type)

    assert labels is not None and labels.values() == (*expected, COMPONENT)


def test_non_resource_requests_are_not_counted() -> None:
    assert sli_labels(parse_request_info("GET", "/version", {}), method="GET", content_type="") is None


def test_buckets_are_kube_apiservers() -> None:
    assert SLI_BUCKETS[0] == 0.05 and SLI_BUCKETS[-1] == 60 and len(SLI_BUCKETS) == 21
