"""A pod's log, exec and port-forward through the proxy (`kubectl logs`, `logs -f`, `exec`, `port-forward`): the
pod lives in a tenant partition, its Node in a resource partition, so the TP's kube-apiserver
cannot reach the kubelet; the proxy asks the node's kubelet itself (proxy/handlers/kubelet.py). The
kubelet is a small HTTPS server registered as the node's kubelet endpoint (127.0.0.1, its port
in the Node's status), serving `/containerLogs` and `/exec` (WebSocket, v5.channel.k8s.io: the
channel protocol of k8s.io/apimachinery/pkg/util/httpstream/wsstream) as a kubelet does."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from hack.federation import PROXY_ADMINS_GROUP
from hack.proxy_process import ProxyProcess
from tests.federation import Kube, pod, until

LINES = [f"line {i}: hello from the container" for i in range(1, 6)]


@dataclass
class FakeKubelet:
    port: int = 0
    requests: list[tuple[str, dict[str, str], str]] = field(default_factory=list)  # (path, query, client CN)
    protocols: list[str] = field(default_factory=list)  # WebSocket subprotocol of each exec


@pytest.fixture
def proxy_with_kubelet(kube: Kube, tmp_path: Path) -> Iterator[tuple[ProxyProcess, Path]]:
    crt, key = kube.fed.ca.issue_client(tmp_path, "proxy-kubelet-client", "partition-proxy-kubelet-client")
    extra = {"kubelet": {"client_cert_file": str(crt), "client_key_file": str(key), "ca_file": str(kube.fed.ca_file)}}
    proxy = ProxyProcess(kube.fed, tmp_path / "proxy", extra=extra).start()
    admin = kube.fed.issue_client_kubeconfig("admin-log", user="admin", groups=[PROXY_ADMINS_GROUP], server=proxy.server)
    try:
        yield proxy, admin
    finally:
        proxy.stop()


@pytest.fixture
async def fake_kubelet(kube: Kube, tmp_path: Path) -> AsyncIterator[FakeKubelet]:
    state = FakeKubelet()

    async def logs(request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(x[0] for x in (peer or {}).get("subject", ()))
        state.requests.append((request.path, dict(request.query), subject.get("commonName", "")))
        lines = LINES[-int(request.query["tailLines"]):] if "tailLines" in request.query else LINES
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        for line in lines:
            await response.write((line + "\n").encode())
            if request.query.get("follow") == "true":
                await asyncio.sleep(0.1)
        return response

    async def exec_(request: web.Request) -> web.StreamResponse:
        """A container that runs `echo ARGS`, `cat` (stdin to stdout) or `exit N`."""
        state.requests.append((request.path, {"command": " ".join(request.query.getall("command", [])),
                                              **{k: v for k, v in request.query.items() if k != "command"}}, ""))
        ws = web.WebSocketResponse(protocols=("v5.channel.k8s.io", "v4.channel.k8s.io"))
        await ws.prepare(request)
        state.protocols.append(ws.ws_protocol or "")
        command = request.query.getall("command", [])
        status: dict[str, object] = {"metadata": {}, "status": "Success"}
        if request.path.startswith("/attach/"):
            await ws.send_bytes(b"\x01attached to the running process\n")
        elif command[:1] == ["echo"]:
            await ws.send_bytes(b"\x01" + " ".join(command[1:]).encode() + b"\n")
        elif command == ["cat"]:
            async for message in ws:
                data = bytes(message.data)
                if data[:1] == b"\xff":  # v5: CLOSE of a stream (stdin)
                    break
                if data[:1] == b"\x00":
                    await ws.send_bytes(b"\x01" + data[1:])
        elif command[:1] == ["exit"]:
            status = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode", "message": "command terminated with non-zero exit code",
                      "details": {"causes": [{"reason": "ExitCode", "message": command[1]}]}}
        await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        await ws.close()
        return ws

    app = web.Application()
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", logs)
    app.router.add_get("/exec/{namespace}/{pod}/{container}", exec_)
    app.router.add_get("/attach/{namespace}/{pod}/{container}", exec_)
    crt, key = kube.fed.ca.issue_serving(tmp_path, "kubelet", ["127.0.0.1"])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(kube.fed.ca_file))
    context.load_cert_chain(crt, key)
    context.verify_mode = ssl.CERT_REQUIRED  # a kubelet authenticates its callers
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    state.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield state
    finally:
        await runner.cleanup()


async def forward_and_echo(kube: Kube, kubeconfig: Path, namespace: str, payload: bytes, *, env: dict[str, str] | None = None) -> bytes:
    """`kubectl port-forward pod/p :8080`, `payload` sent through the local port; what came back."""
    forward = await asyncio.create_subprocess_exec(kube.kubectl_path, "--kubeconfig", str(kubeconfig), "port-forward", "-n", namespace, "pod/p", ":8080",
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        assert forward.stdout is not None
        line = (await asyncio.wait_for(forward.stdout.readline(), 30)).decode()
        assert line.startswith("Forwarding from 127.0.0.1:"), line
        local = int(line.split("127.0.0.1:", 1)[1].split(" ", 1)[0])
        reader, writer = await asyncio.open_connection("127.0.0.1", local)
        writer.write(payload)
        echoed = await asyncio.wait_for(reader.readexactly(len(payload)), 15)
        writer.close()
        return echoed
    finally:
        forward.terminate()
        await forward.wait()


def kubectl(kube: Kube, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([kube.kubectl_path, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=60)


async def test_kubectl_logs_through_the_proxy_reach_the_pods_kubelet(
    kube: Kube, unique: str, proxy_with_kubelet: tuple[ProxyProcess, Path], fake_kubelet: FakeKubelet
) -> None:
    _, admin = proxy_with_kubelet
    node_name, namespace = f"rp1-log-{unique}", f"nova-{unique}"  # node in rp1, tenant in tp2
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}}
    kube.create(node)
    status = {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                         "daemonEndpoints": {"kubeletEndpoint": {"Port": fake_kubelet.port}}}}
    await asyncio.to_thread(kube.kubectl, "patch", "node", node_name, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    await asyncio.to_thread(kube.kubectl, "create", "namespace", namespace)
    kube.create(pod(namespace, "p", node_name))
    two = pod(namespace, "two", node_name)
    two["spec"]["containers"].append({"name": "side", "image": "registry.k8s.io/pause:3.10"})  # type: ignore[index]
    kube.create(two)
    kube.create(pod(namespace, "unbound", node_name) | {"spec": {"containers": [{"name": "app", "image": "x"}]}})

    done = await asyncio.to_thread(kubectl, kube, admin, "logs", "p", "-n", namespace)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "".join(line + "\n" for line in LINES)
    follow = await asyncio.to_thread(kubectl, kube, admin, "logs", "-f", "p", "-n", namespace, "--tail=3")
    assert follow.returncode == 0 and follow.stdout.splitlines() == LINES[-3:], follow.stderr
    path, query, client = fake_kubelet.requests[-1]
    assert path == f"/containerLogs/{namespace}/p/app" and query == {"follow": "true", "tailLines": "3"}
    assert client == "partition-proxy-kubelet-client"  # the proxy's own kubelet client certificate

    # kube-apiserver's answers for what it refuses itself
    many = await asyncio.to_thread(kubectl, kube, admin, "get", "--raw", f"/api/v1/namespaces/{namespace}/pods/two/log")
    assert many.returncode != 0 and "a container name must be specified for pod two, choose one of: [app side]" in many.stderr
    wrong = await asyncio.to_thread(kubectl, kube, admin, "logs", "p", "-n", namespace, "-c", "nope")
    assert wrong.returncode != 0 and "container nope is not valid for pod p" in wrong.stderr
    unbound = await asyncio.to_thread(kubectl, kube, admin, "logs", "unbound", "-n", namespace)
    assert unbound.returncode != 0 and "does not have a host assigned" in unbound.stderr
    missing = await asyncio.to_thread(kubectl, kube, admin, "logs", "gone", "-n", namespace)
    assert missing.returncode != 0 and 'pods "gone" not found' in missing.stderr

    # The reference: the pod's own tenant partition cannot answer it (its Node is in rp1).
    direct = await asyncio.to_thread(kubectl, kube, kube.direct("tp2"), "logs", "p", "-n", namespace)
    assert direct.returncode != 0 and "not found" in direct.stderr, direct


async def test_kubectl_exec_through_the_proxy_reaches_the_pods_kubelet_over_websocket(
    kube: Kube, unique: str, proxy_with_kubelet: tuple[ProxyProcess, Path], fake_kubelet: FakeKubelet
) -> None:
    _, admin = proxy_with_kubelet
    node_name, namespace = f"rp2-exec-{unique}", f"alpha-{unique}"  # node in rp2, tenant in tp1
    kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}})
    status = {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                         "daemonEndpoints": {"kubeletEndpoint": {"Port": fake_kubelet.port}}}}
    await asyncio.to_thread(kube.kubectl, "patch", "node", node_name, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    await asyncio.to_thread(kube.kubectl, "create", "namespace", namespace)
    kube.create(pod(namespace, "p", node_name))

    done = await asyncio.to_thread(kubectl, kube, admin, "exec", "p", "-n", namespace, "--", "echo", "hello", "world")
    assert (done.returncode, done.stdout) == (0, "hello world\n"), done.stderr
    path, query, _ = fake_kubelet.requests[-1]
    assert path == f"/exec/{namespace}/p/app" and query == {"command": "echo hello world", "output": "1", "error": "1"}
    assert fake_kubelet.protocols[-1] == "v5.channel.k8s.io"  # kubectl's newest, relayed as chosen

    cat = await asyncio.to_thread(
        lambda: subprocess.run([kube.kubectl_path, "--kubeconfig", str(admin), "exec", "-i", "p", "-n", namespace, "--", "cat"],
                               input="line one\nline two\n", capture_output=True, text=True, timeout=60))
    assert (cat.returncode, cat.stdout) == (0, "line one\nline two\n"), cat.stderr
    failed = await asyncio.to_thread(kubectl, kube, admin, "exec", "p", "-n", namespace, "--", "exit", "3")
    assert failed.returncode == 3, (failed.returncode, failed.stderr)  # the exit code kubectl reads from the status channel

    await asyncio.to_thread(kube.kubectl, "patch", "pod", "p", "-n", namespace, "--subresource=status", "--type=merge",
                            "-p", json.dumps({"status": {"phase": "Running"}}))  # kubectl attaches to running pods only
    attached = await asyncio.to_thread(kubectl, kube, admin, "attach", "p", "-n", namespace)
    assert (attached.returncode, attached.stdout) == (0, "attached to the running process\n"), attached.stderr
    path, query, _ = fake_kubelet.requests[-1]
    assert path == f"/attach/{namespace}/p/app" and query == {"command": "", "output": "1", "error": "1"}, query
    # The reference: the pod's own tenant partition cannot answer it (its Node is in rp2).
    direct = await asyncio.to_thread(kubectl, kube, kube.direct("tp1"), "exec", "p", "-n", namespace, "--", "echo", "x")
    assert direct.returncode != 0 and "not found" in direct.stderr, direct


async def test_kubectl_port_forward_through_the_proxy_relays_its_spdy_session_to_the_kubelet(
    kube: Kube, unique: str, proxy_with_kubelet: tuple[ProxyProcess, Path], tmp_path: Path
) -> None:
    """kubectl (>= 1.31) tunnels SPDY inside a WebSocket; the proxy upgrades to SPDY/3.1 at the
    kubelet and relays the bytes (as kube-apiserver's TunnelingHandler does). The kubelet here
    speaks just enough SPDY to echo a forwarded connection (tests/spdy.py)."""
    from tests.spdy import EchoPortForward

    _, admin = proxy_with_kubelet
    upgrades: list[bytes] = []
    sessions: list[EchoPortForward] = []

    async def kubelet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        upgrades.append(head)
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
                     b"X-Stream-Protocol-Version: portforward.k8s.io\r\n\r\n")
        session = EchoPortForward(reader, writer)
        sessions.append(session)
        await session.serve()
        writer.close()

    crt, key = kube.fed.ca.issue_serving(tmp_path, "kubelet-pf", ["127.0.0.1"])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(kube.fed.ca_file))
    context.load_cert_chain(crt, key)
    context.verify_mode = ssl.CERT_REQUIRED
    server = await asyncio.start_server(kubelet, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    node_name, namespace = f"rp1-pf-{unique}", f"nova-{unique}"
    kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}})
    status = {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}], "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}}
    await asyncio.to_thread(kube.kubectl, "patch", "node", node_name, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    await asyncio.to_thread(kube.kubectl, "create", "namespace", namespace)
    kube.create(pod(namespace, "p", node_name))
    await asyncio.to_thread(kube.kubectl, "patch", "pod", "p", "-n", namespace, "--subresource=status", "--type=merge",
                            "-p", json.dumps({"status": {"phase": "Running"}}))  # kubectl forwards to running pods only

    try:
        assert await forward_and_echo(kube, admin, namespace, b"hello through the proxy") == b"hello through the proxy"
    finally:
        server.close()
    assert upgrades and upgrades[0].startswith(f"GET /portForward/{namespace}/p".encode()), upgrades
    assert b"X-Stream-Protocol-Version: portforward.k8s.io" in upgrades[0]
    streams = sessions[0].streams.values()
    assert {s.get("streamtype") for s in streams} == {"error", "data"} and {s.get("port") for s in streams} == {"8080"}


@dataclass
class SpdyKubelet:
    """A kubelet stand-in that serves exec and port-forward as SPDY/3.1 upgrades only (what a
    kubelet does for a client that upgrades to SPDY: kube-apiserver relays the upgrade to it).
    `heads` are the upgrade requests it got, with the client certificate's CN ("" for none)."""

    port: int = 0
    heads: list[tuple[bytes, str]] = field(default_factory=list)
    sessions: list[object] = field(default_factory=list)


@pytest.fixture
async def spdy_kubelet(kube: Kube, tmp_path: Path) -> AsyncIterator[SpdyKubelet]:
    from urllib.parse import parse_qs, urlsplit

    from tests.spdy import EchoPortForward, Exec

    state = SpdyKubelet()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        subject = dict(x[0] for x in (writer.get_extra_info("peercert") or {}).get("subject", ()))
        state.heads.append((head, subject.get("commonName", "")))
        lines = head.decode().split("\r\n")
        target = urlsplit(lines[0].split(" ")[1])
        offered = [v.strip() for line in lines[1:] if line.lower().startswith("x-stream-protocol-version:")
                   for v in line.split(":", 1)[1].split(",")]
        chosen = next(p for p in ("v4.channel.k8s.io", "portforward.k8s.io") if p in offered)
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
                     b"X-Stream-Protocol-Version: " + chosen.encode() + b"\r\n\r\n")
        query = parse_qs(target.query)
        session = (Exec(reader, writer, query.get("command", []), stdin=query.get("input") == ["1"])
                   if target.path.startswith("/exec/") else EchoPortForward(reader, writer))
        state.sessions.append(session)
        await session.serve()
        writer.close()

    crt, key = kube.fed.ca.issue_serving(tmp_path, "kubelet-spdy", ["127.0.0.1"])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(kube.fed.ca_file))
    context.load_cert_chain(crt, key)
    context.verify_mode = ssl.CERT_OPTIONAL  # the partitions' kube-apiservers have no kubelet client certificate
    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()


async def test_spdy_upgrades_straight_from_kubectl_are_relayed_like_kube_apiserver_relays_them(
    kube: Kube, unique: str, proxy_with_kubelet: tuple[ProxyProcess, Path], spdy_kubelet: SpdyKubelet
) -> None:
    """kubectl with WebSockets turned off (as kubectl before 1.31, and client-go's SPDY executor)
    upgrades to SPDY/3.1 itself. The reference is the same kubectl straight against tp1 for a
    pod and Node both in tp1, which kube-apiserver relays to the same kubelet; through the proxy
    the pod is in tp2 and its Node in rp1."""
    from urllib.parse import parse_qsl, urlsplit

    from tests.spdy import EchoPortForward

    proxy, admin = proxy_with_kubelet
    status = {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                         "daemonEndpoints": {"kubeletEndpoint": {"Port": spdy_kubelet.port}}}}
    direct = kube.direct("tp1")
    through = (admin, f"rp1-spdy-{unique}", f"nova-{unique}")  # node in rp1, tenant in tp2
    straight = (direct, f"tp1-spdy-{unique}", f"alpha-{unique}")  # both in tp1, asked of tp1 itself
    for kubeconfig, node_name, namespace in (through, straight):
        config = None if kubeconfig == admin else kubeconfig
        kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}}, kubeconfig=config)
        await asyncio.to_thread(kube.kubectl, "patch", "node", node_name, "--subresource=status", "--type=merge", "-p", json.dumps(status),
                                kubeconfig=config)
        await asyncio.to_thread(kube.kubectl, "create", "namespace", namespace, kubeconfig=config)
        kube.create(pod(namespace, "p", node_name), kubeconfig=config)
        await asyncio.to_thread(kube.kubectl, "patch", "pod", "p", "-n", namespace, "--subresource=status", "--type=merge",
                                "-p", json.dumps({"status": {"phase": "Running"}}), kubeconfig=config)

    spdy_env = {**os.environ, "KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false", "KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}

    def run(kubeconfig: Path, namespace: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([kube.kubectl_path, "--kubeconfig", str(kubeconfig), "-n", namespace, *args], input=stdin,
                              capture_output=True, text=True, timeout=60, env=spdy_env)

    results = {}
    for kubeconfig, node_name, namespace in (through, straight):
        echo = await asyncio.to_thread(run, kubeconfig, namespace, "exec", "p", "--", "echo", "hello", "world")
        cat = await asyncio.to_thread(run, kubeconfig, namespace, "exec", "-i", "p", "--", "cat", stdin="line one\nline two\n")
        failed = await asyncio.to_thread(run, kubeconfig, namespace, "exec", "p", "--", "exit", "3")
        results[kubeconfig] = [(r.returncode, r.stdout) for r in (echo, cat, failed)]
        assert echo.returncode == 0 and cat.returncode == 0, (echo.stderr, cat.stderr)
    assert results[admin] == results[direct] == [(0, "hello world\n"), (0, "line one\nline two\n"), (3, "")]

    # what the kubelet was asked: the same upgrade either way, from the proxy's kubelet client certificate
    (proxied, proxy_cn), (straight_head, straight_cn) = spdy_kubelet.heads[0], spdy_kubelet.heads[3]
    assert (proxy_cn, straight_cn) == ("partition-proxy-kubelet-client", "")

    def request_and_offers(head: bytes) -> tuple[str, str, list[tuple[str, str]], list[str]]:
        lines = head.decode().split("\r\n")
        method, target, _ = lines[0].split(" ")
        url = urlsplit(target)
        offers = [line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("x-stream-protocol-version")]
        return method, url.path.split("/")[1], sorted(parse_qsl(url.query)), offers

    assert request_and_offers(proxied) == request_and_offers(straight_head)
    assert proxied.startswith(f"POST /exec/{through[2]}/p/app?command=echo&command=hello&command=world&error=1&output=1 ".encode()), proxied

    # port-forward over SPDY: the client's session relayed as it is
    assert await forward_and_echo(kube, admin, through[2], b"hello over spdy", env=spdy_env) == b"hello over spdy"
    head, _ = spdy_kubelet.heads[-1]
    assert head.startswith(f"POST /portForward/{through[2]}/p ".encode()) and b"X-Stream-Protocol-Version: portforward.k8s.io" in head, head
    session = spdy_kubelet.sessions[-1]
    assert isinstance(session, EchoPortForward) and {s.get("port") for s in session.streams.values()} == {"8080"}
    # the connections taken over from aiohttp end with their sessions: only the scrape's own is open
    await until(lambda: kube.metric("partition_proxy_connections", server=proxy.server, protocol="http/1.1") == 1, 10,
          "the proxy forgot the upgraded connections")
    await asyncio.to_thread(kube.kubectl, "delete", "node", straight[1], kubeconfig=direct)
