"""The SubjectAccessReview attributes of a request the proxy must authorize itself. Pure.

A read answered from a watch cache never reaches a partition, so the proxy asks the partitions
whether the client may make it (`proxy.authz`), with the attributes kube-apiserver's own
authorizers would see (`k8s.io/apiserver/pkg/endpoints/request.RequestInfoFactory`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from routing.cache_policy import selected_name
from routing.requestinfo import RequestInfo


def resource_attributes(info: RequestInfo, query: Mapping[str, str]) -> dict[str, Any]:
    """`resourceAttributes` of a SubjectAccessReview for a read, selectors included (the Node
    authorizer decides node lists by their field selector). A list or watch selecting
    metadata.name=<n> is asked as a request for <n>, as kube-apiserver's RequestInfoFactory
    does (the Node authorizer relies on it)."""
    attrs: dict[str, Any] = {
        "verb": info.verb,
        "group": info.api_group,
        "version": info.api_version,
        "resource": info.resource,
    }
    if info.namespace:
        attrs["namespace"] = info.namespace
    name = info.name or selected_name(query.get("fieldSelector", ""))
    if name:
        attrs["name"] = name
    if query.get("fieldSelector"):
        attrs["fieldSelector"] = {"rawSelector": query["fieldSelector"]}
    if query.get("labelSelector"):
        attrs["labelSelector"] = {"rawSelector": query["labelSelector"]}
    return attrs
