"""Labels of kube-apiserver's request SLI histogram, computed the way kube-apiserver does, so
tooling written for it (clusterloader2's API responsiveness measurement, SLO dashboards) scores
the proxy unchanged. Pure.

Source: k8s.io/apiserver/pkg/endpoints/metrics/metrics.go (v1.36): `MonitorRequest`,
`CanonicalVerb`, `CleanVerb`, `CleanScope` and the `apiserver_request_sli_duration_seconds`
histogram (labels verb, group, version, resource, subresource, scope, component).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from routing.requestinfo import RequestInfo

# seconds; the histogram's buckets exactly as kube-apiserver declares them.
SLI_BUCKETS = (0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60)
SLI_LABELS = ("verb", "group", "version", "resource", "subresource", "scope", "component")
# kube-apiserver's `component` label value for requests it serves (metrics.APIServerComponent):
# the proxy answers in its place, so dashboards that select on it keep working.
COMPONENT = "apiserver"
_CONNECT_SUBRESOURCES = frozenset({"proxy", "attach", "exec", "portforward"})
_APPLY_PATCH = "application/apply-patch+yaml"


@dataclass(frozen=True, slots=True)
class SLILabels:
    verb: str
    group: str
    version: str
    resource: str
    subresource: str
    scope: str

    def values(self) -> tuple[str, str, str, str, str, str, str]:
        return (self.verb, self.group, self.version, self.resource, self.subresource, self.scope, COMPONENT)


def scope(info: RequestInfo) -> str:
    """metrics.CleanScope: resource (a name, or a create), namespace, cluster, or ""."""
    if info.name or info.verb == "create":
        return "resource"
    if info.namespace:
        return "namespace"
    return "cluster" if info.is_resource_request else ""


def sli_labels(info: RequestInfo, *, method: str, content_type: str) -> SLILabels | None:
    """The SLI labels of a resource request, None for non-resource requests (discovery,
    /version), which kube-apiserver does not count in this histogram."""
    return _sli_labels(info, method, content_type)


@functools.lru_cache(maxsize=4096)  # one entry per RequestInfo in use, as routing.requestinfo keeps them
def _sli_labels(info: RequestInfo, method: str, content_type: str) -> SLILabels | None:
    if not info.is_resource_request or info.malformed:
        return None
    where = scope(info)
    verb = method.upper()
    if verb == "GET" and where != "resource":
        verb = "LIST"  # CanonicalVerb
    if info.verb == "watch":
        verb = "WATCH"
    if verb == "PATCH" and content_type.split(";", 1)[0].strip() == _APPLY_PATCH:
        verb = "APPLY"
    if info.subresource in _CONNECT_SUBRESOURCES:
        verb = "CONNECT"
    if verb not in {"GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE", "APPLY", "CONNECT"}:
        verb = "other"
    return SLILabels(verb, info.api_group, info.api_version, info.resource, info.subresource, where)
