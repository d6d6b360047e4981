"""A pod's log, exec and attach, asked of its node's kubelet by the proxy (`Route.via_kubelet`).

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

exec and attach take the same path to the kubelet with the client's WebSocket relayed message
by message (`pod_stream`); port-forward relays the SPDY session kubectl tunnels in its WebSocket
to a SPDY upgrade at the kubelet (`pod_port_forward`). A client that upgrades to SPDY/3.1 itself
(kubectl before 1.31, client-go's SPDY executor and port-forward dialer, kubectl with
KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false) gets the same upgrade asked of the kubelet, its 101
written back as it came and the bytes relayed both ways (`_relay_spdy`), as kube-apiserver's
UpgradeAwareHandler does (k8s.io/apimachinery/pkg/util/proxy/upgradeaware.go). SPDY is never
parsed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from multidict import CIMultiDict, CIMultiDictProxy

from proxy import answers
from proxy.clients.errors import APINotFound, UpstreamError
from proxy.clients.kubelet import KubeletRefused, KubeletUnreachable, KubeletWebSocket, Upgraded
from proxy.context import ProxyContext
from proxy.messages import Answer, ClientGone, Exchange, WebSocketChannel
from routing.access import resource_attributes

# The query parameters of a log request the kubelet takes (PodLogOptions, as LogLocation passes them).
_LOG_PARAMS = ("follow", "previous", "sinceSeconds", "sinceTime", "timestamps", "tailLines", "limitBytes")
_DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"
# PodExecOptions/PodAttachOptions flags -> the kubelet's parameters (pkg/registry/core/pod/strategy.go, streamParams)
_STREAM_FLAGS = {"stdin": "input", "stdout": "output", "stderr": "error", "tty": "tty"}
_KUBELET_PATHS = {"exec": "exec", "attach": "attach"}
# bytes read from the kubelet per relayed WebSocket message of a port-forward
_RELAY_CHUNK = 64 * 1024


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


def pick_container(pod: dict[str, Any], asked: str) -> tuple[str | None, str]:
    """The container a log, exec or attach is for: (name, "") or (None, kube-apiserver's 400
    message)."""
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


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a request for a pod's container goes: the kubelet's host:port, the container, the
    node and the RP that holds it (for messages)."""

    address: str
    container: str
    node: str
    resource_partition: str


async def _target(ex: Exchange, ctx: ProxyContext, verb: str, *, container: bool = True) -> _Target | Answer:
    """Authorize `verb` on the pod's subresource in its TP, find its container and its node's
    kubelet; the Answer to give instead when something is missing (kube-apiserver's)."""
    assert ex.route is not None and ex.identity is not None
    info, request = ex.info, ex.request
    assert ctx.kubelet is not None
    tenant_partition = ex.route.partitions[0]
    ex.target = tenant_partition
    attributes = {**resource_attributes(info, request.query), "verb": verb, "subresource": info.subresource}
    decision = await ctx.authz.allowed(ex.identity, attributes, [tenant_partition])
    if not decision.allowed:
        return answers.refused(ex.identity, info, decision.reason, error=decision.error)
    try:
        pod = await ctx.clients[tenant_partition].get_json(f"/api/v1/namespaces/{quote(info.namespace)}/pods/{quote(info.name)}")
    except APINotFound:
        return answers.status_answer(404, "NotFound", f'pods "{info.name}" not found', details={"name": info.name, "kind": "pods"})
    except UpstreamError as exc:
        return answers.unavailable_answer(tenant_partition, str(exc), 1)
    chosen, problem = pick_container(pod, request.query.get("container", "")) if container else ("", "")
    if chosen is None:
        return answers.bad_request(problem)
    node_name = (pod.get("spec") or {}).get("nodeName", "")
    if not node_name:
        return answers.bad_request(f"pod {info.name} does not have a host assigned")
    resource_partition = ctx.routing.node_index.get(node_name) or ctx.routing.placement.partition_of_node(node_name)
    try:
        node = await ctx.clients[resource_partition].get_json(f"/api/v1/nodes/{quote(node_name)}")
    except APINotFound:
        return answers.status_answer(404, "NotFound", f'nodes "{node_name}" not found', details={"name": node_name, "kind": "nodes"})
    except UpstreamError as exc:
        return answers.unavailable_answer(resource_partition, str(exc), 1)
    address = kubelet_address(node, ctx.kubelet.config.preferred_address_types)
    if address is None:
        return answers.unavailable_answer(resource_partition, f"node {node_name} has no kubelet address", 1)
    return _Target(address, chosen, node_name, resource_partition)


async def pod_log(ex: Exchange, ctx: ProxyContext) -> None:
    """Answer a pod's log (module docstring)."""
    assert ctx.kubelet is not None
    info, request = ex.info, ex.request
    target = await _target(ex, ctx, "get")
    if isinstance(target, Answer):
        return await ex.respond(target)
    query = urlencode([(k, request.query[k]) for k in _LOG_PARAMS if k in request.query])
    path = f"/containerLogs/{quote(info.namespace)}/{quote(info.name)}/{quote(target.container)}" + (f"?{query}" if query else "")
    try:
        async with ctx.kubelet.get(target.address, path) as answer:
            headers = CIMultiDict({"Content-Type": answer.content_type})
            if answer.status != 200:
                return await ex.respond(Answer(answer.status, await answer.read(), headers, content_type=None))
            await ex.writer.start(200, headers)
            with ctx.stream(answer.close, ex.writer.connection):  # a shutdown ends the log cleanly
                async for chunk in answer.chunks():
                    await ex.writer.write(chunk)
            await ex.writer.end()
    except KubeletUnreachable as exc:
        if not ex.writer.started:
            await ex.respond(answers.unavailable_answer(target.resource_partition, f"kubelet of node {target.node}: {exc}", 1))


def stream_query(query_string: str) -> str:
    """The kubelet's query for an exec or attach: PodExecOptions/PodAttachOptions as
    kube-apiserver's streamParams writes them (stdin -> input=1, stdout -> output=1,
    stderr -> error=1, tty -> tty=1, every `command`)."""
    out: list[tuple[str, str]] = []
    for key, value in parse_qsl(query_string, keep_blank_values=True):
        if key in _STREAM_FLAGS and value.lower() in ("true", "1"):
            out.append((_STREAM_FLAGS[key], "1"))
        elif key == "command":
            out.append(("command", value))
    return urlencode(out)


# The Upgrade token of a SPDY upgrade and the header that offers its stream protocols
# (k8s.io/apimachinery/pkg/util/httpstream: HeaderSpdy31, HeaderProtocolVersion).
SPDY = "SPDY/3.1"
_STREAM_PROTOCOL = "X-Stream-Protocol-Version"


def spdy_protocols(headers: CIMultiDictProxy[str] | CIMultiDict[str]) -> tuple[str, ...]:
    """The stream protocols a SPDY/3.1 upgrade offers (every X-Stream-Protocol-Version, in its
    order; client-go sends one header per protocol), () when the request is no SPDY upgrade."""
    if SPDY.lower() not in headers.get("Upgrade", "").lower():
        return ()
    return tuple(p.strip() for value in headers.getall(_STREAM_PROTOCOL, ()) for p in value.split(",") if p.strip())


def offered_protocols(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The WebSocket subprotocols a client offers (Sec-WebSocket-Protocol, in its order), ()
    when the request is no WebSocket upgrade."""
    if "websocket" not in headers.get("Upgrade", "").lower():
        return ()
    return tuple(p.strip() for p in headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip())


async def pod_stream(ex: Exchange, ctx: ProxyContext) -> None:
    """exec or attach: the client's WebSocket (KEP-4006: v5.channel.k8s.io and earlier
    channel protocols, what kubectl >= 1.31 speaks) relayed message by message to a WebSocket
    to the node's kubelet, which serves the same protocols (its streaming server takes
    WebSocket as well as SPDY). A SPDY/3.1 upgrade is relayed as such (`_relay_spdy`); a
    request that asks no upgrade answers 400 "Upgrade request required", as kube-apiserver's."""
    assert ctx.kubelet is not None
    info, request = ex.info, ex.request
    protocols, spdy = offered_protocols(request.headers), spdy_protocols(request.headers)
    if not protocols and not spdy:
        return await ex.respond(answers.bad_request("Upgrade request required"))  # kube-apiserver's words
    target = await _target(ex, ctx, "create")  # kube-apiserver >= 1.35 asks create for a WebSocket exec
    if isinstance(target, Answer):
        return await ex.respond(target)
    query = stream_query(request.query_string)
    path = f"/{_KUBELET_PATHS[info.subresource]}/{quote(info.namespace)}/{quote(info.name)}/{quote(target.container)}?{query}"
    if spdy:
        return await _relay_spdy(ex, ctx, target, path, spdy)
    try:
        async with ctx.kubelet.websocket(target.address, path, protocols) as upstream:
            client = await ex.writer.accept_websocket(upstream.protocol)
            if client is None:
                return await ex.respond(answers.bad_request("Upgrade request required: upgrade over HTTP/1.1"))
            await _relay(client, upstream)
    except KubeletRefused as exc:
        if not ex.writer.started:
            await ex.respond(answers.status_answer(exc.status if exc.status >= 400 else 502, "InternalError", f"kubelet of node {target.node}: {exc}"))
    except KubeletUnreachable as exc:
        if not ex.writer.started:
            await ex.respond(answers.unavailable_answer(target.resource_partition, f"kubelet of node {target.node}: {exc}", 1))


async def _relay(client: WebSocketChannel, upstream: KubeletWebSocket) -> None:
    """Messages both ways until either side closes; then the other is closed with the same code."""

    async def down() -> None:
        while (message := await upstream.receive()) is not None:
            await client.send(message)
        await client.close(upstream.close_code)

    async def up() -> None:
        while (message := await client.receive()) is not None:
            await upstream.send(message)

    await _until_either_ends(down(), up())


async def _until_either_ends(*directions: Coroutine[Any, Any, None]) -> None:
    """Run both directions of a relay until one ends, then stop the other (a side that went
    away while being written to ends its direction too)."""
    tasks = [asyncio.create_task(d) for d in directions]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, ClientGone, KubeletUnreachable, OSError):
                await task


# The WebSocket subprotocol prefix of SPDY tunnelled over WebSocket (KEP-4006; client-go
# tools/portforward/tunneling_dialer.go, constants.WebsocketsSPDYTunnelingPrefix).
SPDY_TUNNELING_PREFIX = "SPDY/3.1+"


async def pod_port_forward(ex: Exchange, ctx: ProxyContext) -> None:
    """port-forward: kubectl (>= 1.31) tunnels its SPDY session inside a WebSocket (subprotocol
    `SPDY/3.1+portforward.k8s.io`); kube-apiserver's TunnelingHandler unwraps it and relays the
    SPDY bytes to the kubelet's SPDY upgrade. The proxy does the same: it upgrades to SPDY/3.1 at
    the kubelet (`/portForward/<namespace>/<pod>`) and relays WebSocket message payloads as the
    byte stream, both ways. SPDY itself is never parsed."""
    assert ctx.kubelet is not None
    info, request = ex.info, ex.request
    tunnelled = [p for p in offered_protocols(request.headers) if p.startswith(SPDY_TUNNELING_PREFIX)]
    spdy = spdy_protocols(request.headers)
    if not tunnelled and not spdy:
        return await ex.respond(answers.bad_request("Upgrade request required"))
    target = await _target(ex, ctx, "create", container=False)
    if isinstance(target, Answer):
        return await ex.respond(target)
    ports = [("port", v) for k, v in parse_qsl(request.query_string) if k == "ports"]
    path = f"/portForward/{quote(info.namespace)}/{quote(info.name)}" + (f"?{urlencode(ports)}" if ports else "")
    if spdy:
        return await _relay_spdy(ex, ctx, target, path, spdy)
    protocol = tunnelled[0]
    upgraded = await _upgrade_at_kubelet(ex, ctx, target, path, (protocol.removeprefix(SPDY_TUNNELING_PREFIX),), "GET")
    if upgraded is None:
        return
    try:
        client = await ex.writer.accept_websocket(protocol)
        if client is None:
            return await ex.respond(answers.bad_request("Upgrade request required: upgrade over HTTP/1.1"))
        await _relay_bytes(client, upgraded.reader, upgraded.writer)
    finally:
        upgraded.writer.close()


async def _upgrade_at_kubelet(ex: Exchange, ctx: ProxyContext, target: _Target, path: str, protocols: tuple[str, ...], method: str) -> Upgraded | None:
    """The kubelet's connection upgraded to SPDY/3.1; None once the client was given the reason
    it could not be."""
    assert ctx.kubelet is not None
    try:
        return await ctx.kubelet.upgrade(target.address, path, SPDY, protocols, method=method)
    except KubeletRefused as exc:
        await ex.respond(answers.status_answer(exc.status if exc.status >= 400 else 502, "InternalError", f"kubelet of node {target.node}: {exc}"))
    except KubeletUnreachable as exc:
        await ex.respond(answers.unavailable_answer(target.resource_partition, f"kubelet of node {target.node}: {exc}", 1))
    return None


async def _relay_spdy(ex: Exchange, ctx: ProxyContext, target: _Target, path: str, protocols: tuple[str, ...]) -> None:
    """A client's own SPDY/3.1 upgrade (module docstring): the kubelet's 101 goes to the client
    as it came (it names the stream protocol the kubelet chose), then bytes both ways until
    either side ends."""
    upgraded = await _upgrade_at_kubelet(ex, ctx, target, path, protocols, ex.request.method)
    if upgraded is None:
        return
    try:
        client = await ex.writer.accept_upgrade(upgraded.head)
        if client is None:
            return await ex.respond(answers.bad_request("Upgrade request required: upgrade over HTTP/1.1"))
        try:
            await _until_either_ends(_copy(client[0], upgraded.writer), _copy(upgraded.reader, client[1]))
        finally:
            client[1].close()
    finally:
        upgraded.writer.close()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One direction of a byte relay, until its reader ends."""
    while chunk := await reader.read(_RELAY_CHUNK):
        writer.write(chunk)
        await writer.drain()


async def _relay_bytes(client: WebSocketChannel, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """WebSocket messages to a byte stream and back until either side ends."""

    async def down() -> None:
        while chunk := await reader.read(_RELAY_CHUNK):
            await client.send(chunk)
        await client.close()

    async def up() -> None:
        while (message := await client.receive()) is not None:
            writer.write(message)
            await writer.drain()

    await _until_either_ends(down(), up())
