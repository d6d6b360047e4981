"""A pod's log, asked of its node's kubelet by the proxy (`Route.via_kubelet`).

kube-apiserver answers `GET .../pods/<name>/log` by proxying to the kubelet of the pod's Node
(k8s.io/kubernetes/pkg/registry/core/pod/rest/log.go, LogLocation: the Node's address of the
first preferred type, its kubelet port, `/containerLogs/<namespace>/<pod>/<container>`). In a
partitioned control plane the pod is in a tenant partition and its Node in a resource partition,
so the TP's kube-apiserver cannot find the kubelet ("nodes ... not found"). The proxy does what
kube-apiserver would: it authorizes the client with a SubjectAccessReview to the pod's TP
(`get pods/log`), reads the pod there and the Node in its RP (with its own credential), and
streams the kubelet's answer with its own kubelet client certificate (`kubelet:` in the config).
Errors are kube-apiserver's: 404 for a missing pod, 400 for a pod without a node or an unknown
or unnamed container (its messages), 503 when the kubelet cannot be reached.

Not done yet: exec, attach and port-forward, which need the same kubelet connection plus an
upgraded stream (SPDY/3.1, or WebSocket with the translation kube-apiserver does: KEP-4006).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from multidict import CIMultiDict

from proxy import answers
from proxy.clients.errors import APINotFound, UpstreamError
from proxy.clients.kubelet import KubeletUnreachable
from proxy.context import ProxyContext
from proxy.messages import Answer, Exchange
from routing.access import resource_attributes

# The query parameters of a log request the kubelet takes (PodLogOptions, as LogLocation passes them).
_LOG_PARAMS = ("follow", "previous", "sinceSeconds", "sinceTime", "timestamps", "tailLines", "limitBytes")
_DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"


def kubelet_address(node: dict[str, Any], preferred: tuple[str, ...]) -> str | None:
    """host:port of a Node's kubelet: the first address of a preferred type, the kubelet port of
    its status (None when it has neither)."""
    status = node.get("status") or {}
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    addresses = status.get("addresses") or []
    for kind in preferred:
        for address in addresses:
            if address.get("type") == kind and address.get("address") and port:
                host = address["address"]
                return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return None


def log_container(pod: dict[str, Any], asked: str) -> tuple[str | None, str]:
    """The container whose log is asked: (name, "") or (None, kube-apiserver's 400 message)."""
    name = pod.get("metadata", {}).get("name", "")
    containers = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or ()]
    others = [c.get("name", "") for key in ("initContainers", "ephemeralContainers") for c in (pod.get("spec") or {}).get(key) or ()]
    if not asked:
        asked = ((pod.get("metadata") or {}).get("annotations") or {}).get(_DEFAULT_CONTAINER, "")
    if not asked:
        if len(containers) == 1:
            return containers[0], ""
        return None, f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"  # Go's %v of a slice
    if asked not in containers and asked not in others:
        return None, f"container {asked} is not valid for pod {name}"
    return asked, ""


async def pod_log(ex: Exchange, ctx: ProxyContext) -> None:
    """Answer a pod's log (module docstring)."""
    assert ex.route is not None and ex.identity is not None
    info, request = ex.info, ex.request
    kubelet = ctx.kubelet
    assert kubelet is not None
    tenant_partition = ex.route.partitions[0]
    ex.target = tenant_partition
    attributes = {**resource_attributes(info, request.query), "subresource": info.subresource}
    decision = await ctx.authz.allowed(ex.identity, attributes, [tenant_partition])
    if not decision.allowed:
        return await ex.respond(answers.forbidden(ex.identity, info, decision.reason))
    try:
        pod = await ctx.clients[tenant_partition].get_json(f"/api/v1/namespaces/{quote(info.namespace)}/pods/{quote(info.name)}")
    except APINotFound:
        return await ex.respond(answers.status_answer(404, "NotFound", f'pods "{info.name}" not found', details={"name": info.name, "kind": "pods"}))
    except UpstreamError as exc:
        return await ex.respond(answers.unavailable_answer(tenant_partition, str(exc), 1))
    container, problem = log_container(pod, request.query.get("container", ""))
    if container is None:
        return await ex.respond(answers.bad_request(problem))
    node_name = (pod.get("spec") or {}).get("nodeName", "")
    if not node_name:
        return await ex.respond(answers.bad_request(f"pod {info.name} does not have a host assigned"))
    placement = ctx.routing.placement
    resource_partition = ctx.routing.node_index.get(node_name) or placement.partition_of_node(node_name)
    try:
        node = await ctx.clients[resource_partition].get_json(f"/api/v1/nodes/{quote(node_name)}")
    except APINotFound:
        return await ex.respond(answers.status_answer(404, "NotFound", f'nodes "{node_name}" not found', details={"name": node_name, "kind": "nodes"}))
    except UpstreamError as exc:
        return await ex.respond(answers.unavailable_answer(resource_partition, str(exc), 1))
    address = kubelet_address(node, kubelet.config.preferred_address_types)
    if address is None:
        return await ex.respond(answers.unavailable_answer(resource_partition, f"node {node_name} has no kubelet address", 1))
    query = urlencode([(k, request.query[k]) for k in _LOG_PARAMS if k in request.query])
    path = f"/containerLogs/{quote(info.namespace)}/{quote(info.name)}/{quote(container)}" + (f"?{query}" if query else "")
    try:
        async with kubelet.get(address, path) as answer:
            headers = CIMultiDict({"Content-Type": answer.content_type})
            if answer.status != 200:
                return await ex.respond(Answer(answer.status, await answer.read(), headers, content_type=None))
            await ex.writer.start(200, headers)
            with ctx.stream(answer.close):  # a shutdown ends the log cleanly
                async for chunk in answer.chunks():
                    await ex.writer.write(chunk)
            await ex.writer.end()
    except KubeletUnreachable as exc:
        if not ex.writer.started:
            await ex.respond(answers.unavailable_answer(resource_partition, f"kubelet of node {node_name}: {exc}", 1))
