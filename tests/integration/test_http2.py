"""The HTTP/2 front on the real federation: one port serves HTTP/2 (ALPN h2) and HTTP/1.1, and
the client-facing cases answer the same over both, because both fronts feed one pipeline.

Clients: httpx (HTTP/2 through the h2 library, HTTP/1.1 through h11), curl `--http2`, kubectl
(Go: HTTP/2 by default) and kubernetes-asyncio (HTTP/1.1, aiohttp)."""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import h2.errors
import hpack
import httpx
import orjson
import pytest
from hyperframe.frame import DataFrame, Frame, GoAwayFrame, HeadersFrame, RstStreamFrame, SettingsFrame
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from hack.proxy_process import ProxyProcess
from tests.federation import Kube

PROTOCOLS = ("h2", "http/1.1")


def http_client(kube: Kube, protocol: str, *, ctx: ssl.SSLContext | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=kube.proxy.server, verify=ctx or kube.client_ssl(), http2=protocol == "h2", http1=protocol != "h2",
        timeout=httpx.Timeout(30.0),
    )


@pytest.fixture
async def clients(kube: Kube) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    made = {p: http_client(kube, p) for p in PROTOCOLS}
    yield made
    for c in made.values():
        await c.aclose()


def status_of(response: httpx.Response) -> dict[str, Any]:
    doc = orjson.loads(response.content)
    assert isinstance(doc, dict) and doc["kind"] == "Status", response.content[:200]
    return {k: doc[k] for k in ("code", "reason", "status", "message")}


async def both(clients: dict[str, httpx.AsyncClient], method: str, url: str, **kwargs: Any) -> dict[str, httpx.Response]:
    answers = {p: await c.request(method, url, **kwargs) for p, c in clients.items()}
    for p, r in answers.items():
        assert r.http_version == ("HTTP/2" if p == "h2" else "HTTP/1.1"), (p, r.http_version)
    return answers


async def test_one_port_negotiates_h2_or_http1_and_counts_connections_per_protocol(kube: Kube, clients: dict[str, httpx.AsyncClient]) -> None:
    before = {p: kube.metric("partition_proxy_connections_accepted", protocol=p) for p in PROTOCOLS}
    answers = await both(clients, "GET", "/api/v1/namespaces")
    assert {r.status_code for r in answers.values()} == {200}
    names = [sorted(i["metadata"]["name"] for i in r.json()["items"]) for r in answers.values()]
    assert names[0] == names[1] and "kube-system" in names[0]
    after = {p: kube.metric("partition_proxy_connections_accepted", protocol=p) for p in PROTOCOLS}
    assert after["h2"] >= before["h2"] + 1 and after["http/1.1"] >= before["http/1.1"] + 1


def test_curl_speaks_http2_to_the_proxy(kube: Kube) -> None:
    crt, key = kube.fed.ca.issue_client(kube.fed.root / "test-clients", "curl-h2", "admin", ["partition-proxy:admins"])
    out = subprocess.run(
        ["curl", "-sS", "--http2", "-v", "--cacert", str(kube.fed.ca_file), "--cert", str(crt), "--key", str(key),
         f"{kube.proxy.server}/api/v1/namespaces/kube-system"],
        capture_output=True, text=True, timeout=30, check=True,
    )
    assert "ALPN: server accepted h2" in out.stderr and "< HTTP/2 200" in out.stderr, out.stderr[-2000:]
    assert json.loads(out.stdout)["metadata"]["name"] == "kube-system"


def test_kubectl_talks_http2_and_works(kube: Kube, unique: str) -> None:
    namespace = f"acme-h2{unique}"
    before = kube.metric("partition_proxy_connections_accepted", protocol="h2")
    kube.kubectl("create", "namespace", namespace)
    kube.kubectl("create", "configmap", "c", "-n", namespace, "--from-literal=a=b")
    assert json.loads(kube.kubectl("get", "configmap", "c", "-n", namespace, "-o", "json"))["data"] == {"a": "b"}
    # each kubectl run is a new process: a new connection, negotiated h2 (Go's default over TLS)
    assert kube.metric("partition_proxy_connections_accepted", protocol="h2") >= before + 3


async def test_kubernetes_asyncio_over_http1_on_the_same_port(kube: Kube) -> None:
    configuration = k8s_client.Configuration()
    await k8s_config.load_kube_config(config_file=str(kube.admin), client_configuration=configuration)
    async with k8s_client.ApiClient(configuration) as api:
        namespaces = await k8s_client.CoreV1Api(api).list_namespace()
    assert "kube-system" in {n.metadata.name for n in namespaces.items}


async def test_forwarded_objects_and_status_errors_are_the_same_over_both_protocols(kube: Kube, clients: dict[str, httpx.AsyncClient], unique: str) -> None:
    namespace = f"nova-h2{unique}"  # a tp2 tenant
    kube.kubectl("create", "namespace", namespace)
    kube.kubectl("create", "configmap", "c", "-n", namespace, "--from-literal=a=b")
    url = f"/api/v1/namespaces/{namespace}/configmaps/c"
    got = await both(clients, "GET", url)
    bodies = [r.json() for r in got.values()]
    assert bodies[0] == bodies[1] and bodies[0]["data"] == {"a": "b"}

    stale = dict(bodies[0], metadata=dict(bodies[0]["metadata"], resourceVersion=str(2**100 + 1)))  # no position of tp2's
    conflicts = await both(clients, "PUT", url, content=orjson.dumps(stale), headers={"Content-Type": "application/json"})
    assert [status_of(r)["reason"] for r in conflicts.values()] == ["Conflict", "Conflict"]
    assert len({json.dumps(status_of(r)) for r in conflicts.values()}) == 1

    cases = [
        ("GET", f"/api/v1/namespaces/{namespace}/configmaps?watch=1&resourceVersion=abc", 400, "BadRequest"),
        ("GET", f"/api/v1/namespaces/{namespace}/configmaps?watch=1&resourceVersion=10010000000000000000059200000000000000000589", 410, "Expired"),
        ("GET", f"/api/v1/namespaces/{namespace}/configmaps/nope", 404, "NotFound"),  # kube-apiserver's own answer
    ]
    for method, path, code, reason in cases:
        answers = await both(clients, method, path)
        statuses = [status_of(r) for r in answers.values()]
        assert [s["code"] for s in statuses] == [code, code] and [s["reason"] for s in statuses] == [reason, reason], (path, statuses)


async def test_a_body_of_many_segments_arrives_whole_over_both_protocols(kube: Kube, clients: dict[str, httpx.AsyncClient], unique: str) -> None:
    # A create routed by its body's name and an update of a merged resource are read whole by the
    # proxy (to route, to translate their resourceVersion): 900 KB arrive in many reads.
    for protocol, client in clients.items():
        namespace = f"acme-big{unique}{protocol.replace('/', '').replace('.', '')}"
        created = await client.post("/api/v1/namespaces", content=orjson.dumps(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}), headers={"Content-Type": "application/json"})
        assert created.status_code == 201, (protocol, created.text[:300])
        big = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"k": "x" * 900_000}}
        url = f"/api/v1/namespaces/{namespace}/configmaps"
        made = await client.post(url, content=orjson.dumps(big), headers={"Content-Type": "application/json"})
        assert made.status_code == 201, (protocol, made.text[:300])
        update = dict(made.json(), data={"k": "y" * 900_000})
        updated = await client.put(f"{url}/big", content=orjson.dumps(update), headers={"Content-Type": "application/json"})
        assert updated.status_code == 200 and updated.json()["data"]["k"] == "y" * 900_000, (protocol, updated.text[:300])


async def test_proxy_answers_of_its_own_are_the_same_over_both_protocols(kube: Kube, clients: dict[str, httpx.AsyncClient]) -> None:
    not_found = await both(clients, "GET", "/partitions/nope/api/v1/pods")
    assert [(r.status_code, r.content, r.headers["content-type"]) for r in not_found.values()] == [
        (404, b"404 page not found\n", "text/plain; charset=utf-8")] * 2
    too_large = await both(clients, "POST", "/api/v1/namespaces/acme-x/configmaps", content=b"x" * (3 * 1024 * 1024 + 1),
                           headers={"Content-Type": "application/json"})
    assert [status_of(r)["code"] for r in too_large.values()] == [413, 413]
    for path in ("/livez", "/readyz", "/metrics"):
        assert {r.status_code for r in (await both(clients, "GET", path)).values()} == {200}
    heads = await both(clients, "HEAD", "/livez")
    assert [(r.status_code, r.content) for r in heads.values()] == [(200, b"")] * 2

    ctx = ssl.create_default_context(cafile=str(kube.fed.ca_file))  # no client certificate
    for protocol in PROTOCOLS:
        async with http_client(kube, protocol, ctx=ctx) as anonymous:
            r = await anonymous.get("/api/v1/namespaces")
            assert (r.status_code, status_of(r)["reason"]) == (401, "Unauthorized")


async def test_cached_lists_union_watches_and_streams_over_both_protocols(kube: Kube, clients: dict[str, httpx.AsyncClient]) -> None:
    cached = await both(clients, "GET", "/api/v1/nodes?resourceVersion=0")
    assert [sorted(i["metadata"]["name"] for i in r.json()["items"]) for r in cached.values()][0] == \
        [sorted(i["metadata"]["name"] for i in r.json()["items"]) for r in cached.values()][1]
    for protocol, client in clients.items():
        events = []
        async with client.stream("GET", "/api/v1/namespaces?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                                 "&allowWatchBookmarks=true&timeoutSeconds=2") as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.strip():
                    events.append(json.loads(line))
        assert any(e["type"] == "ADDED" and e["object"]["metadata"]["name"] == "kube-system" for e in events), protocol
        ends = [e for e in events if e["type"] == "BOOKMARK" and (e["object"]["metadata"].get("annotations") or {}).get("k8s.io/initial-events-end")]
        assert len(ends) == 1, protocol  # one merged initial-events-end bookmark over both TPs


class RawH2:
    """A client HTTP/2 connection made of frames (hyperframe, hpack) over TLS, read frame by
    frame: unlike the h2 library it can still send a request after the server's GOAWAY, which is
    what a client does that sent it before the GOAWAY reached it."""

    def __init__(self, port: int, ctx: ssl.SSLContext) -> None:
        ctx.set_alpn_protocols(["h2"])
        self.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=15), server_hostname="127.0.0.1")
        assert self.sock.selected_alpn_protocol() == "h2"
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.buffer = b""
        self.answered: dict[int, dict[str, str]] = {}  # stream id -> the header fields of its answer
        self.sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + SettingsFrame(0).serialize())

    def headers(self, stream_id: int, method: str, path: str, *, end_stream: bool) -> None:
        block = self.encoder.encode([(":method", method), (":scheme", "https"), (":authority", "127.0.0.1"), (":path", path),
                                     ("content-type", "application/json")])
        self.sock.sendall(HeadersFrame(stream_id, block, flags=["END_HEADERS", *(["END_STREAM"] if end_stream else [])]).serialize())

    def data(self, stream_id: int, body: bytes, *, end_stream: bool) -> None:
        self.sock.sendall(DataFrame(stream_id, body, flags=["END_STREAM"] if end_stream else []).serialize())

    def frame(self) -> Frame | None:
        """The next frame from the server (its SETTINGS acknowledged on the way), None at EOF;
        a HEADERS frame's fields go to `answered`."""
        while len(self.buffer) < 9 or len(self.buffer) < 9 + int.from_bytes(self.buffer[:3], "big"):
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        frame, length = Frame.parse_frame_header(memoryview(self.buffer[:9]))
        frame.parse_body(memoryview(self.buffer[9 : 9 + length]))
        self.buffer = self.buffer[9 + length :]
        if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
            self.sock.sendall(SettingsFrame(0, flags=["ACK"]).serialize())
        if isinstance(frame, HeadersFrame):
            self.answered[frame.stream_id] = dict(self.decoder.decode(frame.data))
        return frame


def test_sigterm_sends_goaway_lets_open_streams_finish_and_refuses_new_ones(kube: Kube, tmp_path: Path, unique: str) -> None:
    """A replica stopped by SIGTERM (a rolling update): GOAWAY(NO_ERROR) on every HTTP/2
    connection, an open watch ends cleanly (END_STREAM), a create still sending its body
    finishes with 201, and a stream the client opens after the GOAWAY is refused
    (REFUSED_STREAM: client-go retries it on a new connection, elsewhere)."""
    proxy = ProxyProcess(kube.fed, tmp_path / "proxy", caches=[]).start()
    try:
        c = RawH2(proxy.port, kube.client_ssl())
        name = f"during-goaway-{unique}"
        c.headers(1, "POST", "/api/v1/namespaces/default/configmaps", end_stream=False)  # the body comes later
        c.data(1, b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"' + name.encode() + b'"', end_stream=False)
        c.headers(3, "GET", f"/api/v1/namespaces/default/configmaps?watch=1&fieldSelector=metadata.name%3Dnone-{unique}", end_stream=True)
        frames: list[Frame] = []
        while not any(isinstance(f, HeadersFrame) and f.stream_id == 3 for f in frames):
            frame = c.frame()
            assert frame is not None, frames
            frames.append(frame)
        assert c.answered[3][":status"] == "200"  # the watch is open

        assert proxy.popen is not None
        proxy.popen.send_signal(signal.SIGTERM)
        while not any(isinstance(f, GoAwayFrame) for f in frames):
            frame = c.frame()
            assert frame is not None, frames
            frames.append(frame)
        c.headers(5, "GET", "/api/v1/namespaces/default/configmaps", end_stream=True)  # sent before the GOAWAY reached it
        c.data(1, b"}}", end_stream=True)
        while (frame := c.frame()) is not None:
            frames.append(frame)
        c.sock.close()
        assert proxy.popen.wait(15) == 0
    finally:
        proxy.stop()

    [goaway] = [f for f in frames if isinstance(f, GoAwayFrame)]
    assert (goaway.error_code, goaway.last_stream_id) == (h2.errors.ErrorCodes.NO_ERROR, 3)
    watch = [f for f in frames if f.stream_id == 3]
    assert "END_STREAM" in watch[-1].flags and not any(isinstance(f, RstStreamFrame) for f in watch)
    assert [(type(f).__name__, getattr(f, "error_code", None)) for f in frames if f.stream_id == 5] == [
        ("RstStreamFrame", h2.errors.ErrorCodes.REFUSED_STREAM)]
    create = [f for f in frames if f.stream_id == 1]
    assert isinstance(create[0], HeadersFrame) and c.answered[1][":status"] == "201"
    assert "END_STREAM" in create[-1].flags
    assert json.loads(b"".join(f.data for f in create if isinstance(f, DataFrame)))["metadata"]["name"] == name
    assert kube.kubectl("-n", "default", "get", "configmap", name, "-o", "name", kubeconfig=kube.direct("tp1")).strip() == f"configmap/{name}"
