"""Fuzzing the proxy in front of real partitions with hypothesis: paths, queries, selectors,
resourceVersions, continue tokens, bodies and content types.

Every answer must be a well-formed Status (for errors the proxy makes), or a real partition's
answer (kube-apiserver marks every response with an Audit-Id header); no 5xx from the proxy
itself, no hang (every request has a socket timeout and watches carry timeoutSeconds=1), and the
proxy's memory stays within a bound. DELETE is only sent to names no test uses, so the fuzz
cannot remove the session's objects.
"""

from __future__ import annotations

import http.client
import os
import sys
import json
import ssl
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.federation import Kube
from tests.h2client import H2Client

FUZZ_CASES = 600  # examples; ~20 ms each against the local federation
RSS_BOUND_MIB = 64  # the proxy may grow this much over all cases (caches of authz answers, buffers)
STATS: dict[str, int] = {"cases": 0, "proxy_status": 0, "upstream": 0, "ok": 0}

SEGMENTS = st.sampled_from(
    [
        "api", "apis", "v1", "apps", "namespaces", "nodes", "pods", "leases", "coordination.k8s.io",
        "kube-node-lease", "kube-system", "default", "acme-x", "zoo-y", "rp1-n", "watch", "proxy",
        "partitions", "tp1", "rp2", "nope", "tenants", "status", "log", "binding", "..", ".", "%2F",
        "%00", "%ff", "a" * 300, "deployments", "selfsubjectreviews", "authentication.k8s.io",
    ]
) | st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12).map(
    lambda t: urllib.parse.quote(t, safe="")
)
NAMES = st.sampled_from(["acme-x", "zoo-y", "kube-system", "default", "kube-node-lease", "rp1-n", "rp2-n", "", "%2F"]) | SEGMENTS


@st.composite
def api_paths(draw: st.DrawFn) -> list[str]:
    """Mostly well-formed Kubernetes API paths, each part sometimes replaced by garbage."""
    parts: list[str] = []
    if draw(st.booleans()):
        parts += ["partitions", draw(st.sampled_from(["tp1", "tp2", "rp1", "rp2", "nope", ""]) | SEGMENTS)]
    parts += draw(
        st.sampled_from([["api", "v1"], ["apis", "apps", "v1"], ["apis", "coordination.k8s.io", "v1"], ["apis", "storage.k8s.io", "v1"]])
    )
    if draw(st.integers(0, 4)) == 0:
        parts.append("watch")
    if draw(st.integers(0, 4)) == 0:
        parts += ["tenants", draw(NAMES)]
    if draw(st.booleans()):
        parts += ["namespaces", draw(NAMES)]
    parts.append(draw(st.sampled_from(["pods", "nodes", "leases", "deployments", "namespaces", "csinodes", "secrets"]) | SEGMENTS))
    if draw(st.booleans()):
        parts.append(draw(NAMES))
        if draw(st.integers(0, 3)) == 0:
            parts.append(draw(st.sampled_from(["status", "log", "binding", "exec", "proxy"]) | SEGMENTS))
    return parts


RV_VALUES = st.sampled_from(
    [
        "", "0", "1", "abc", "-1", "01", "1" * 39, "1" * 45, "10010000000000000000059200000000000000000589",
        str(2**100 + 5), str(2**104 + 77), str(2**127 + 3), str(2**128), "1296793172694733510150277038427",
    ]
)
QUERY_KEYS = st.sampled_from(
    [
        "labelSelector", "fieldSelector", "resourceVersion", "resourceVersionMatch", "continue", "limit",
        "watch", "allowWatchBookmarks", "sendInitialEvents", "dryRun", "fieldManager", "propagationPolicy",
    ]
)
QUERY_VALUES = st.sampled_from(
    [
        "", "0", "1", "true", "abc", "-1", "1" * 100, "10010000000000000000000000000000000000000000",
        str(2**104 + 77), str(2**100 + 5), "NotOlderThan", "Exact", "a in (", "a!=b,c", "!x", "x>1", "spec.nodeName=rp1-n", "metadata.name==a",
        "spec.bogus=1", "a=b=c", "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiJ4In0", "%%%", "All",
    ]
) | st.text(max_size=40)
BODIES = st.one_of(
    st.none(),
    st.binary(max_size=200),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4),
        max_leaves=12,
    ).map(lambda v: json.dumps(v).encode()),
    st.just(b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"fuzz-pod","resourceVersion":"1"}}'),
    # resourceVersions a client may write back: proxy-shaped, old 143-bit ones, garbage, in
    # updates (any formatting), DeleteOptions and JSON Patch tests.
    st.tuples(RV_VALUES, st.sampled_from([None, 2])).map(
        lambda v: json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fuzz-cm", "resourceVersion": v[0]}}, indent=v[1]).encode()
    ),
    RV_VALUES.map(lambda rv: json.dumps({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": rv}}).encode()),
    RV_VALUES.map(lambda rv: json.dumps([{"op": "test", "path": "/metadata/resourceVersion", "value": rv}]).encode()),
    st.just(b"k8s\x00\x0a\x02\x12\x00garbage"),
)
CONTENT_TYPES = st.sampled_from(
    [
        "application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "application/merge-patch+json",
        "application/strategic-merge-patch+json", "application/json-patch+json", "text/plain", "", "application/apply-patch+yaml",
    ]
)
ACCEPTS = st.sampled_from(
    [
        "", "application/json", "application/vnd.kubernetes.protobuf", "*/*", "text/html",
        "application/json;as=Table;v=v1;g=meta.k8s.io", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    ]
)


def body_text(body: bytes | None) -> bytes:
    return body or b""


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Http1:
    """http.client: HTTP/1.1, the target sent as given."""

    def __init__(self, host: str, port: int, ctx: ssl.SSLContext) -> None:
        self.conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=15)

    def send(self, method: str, target: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        self.conn.request(method, target, body=body, headers=headers)
        resp = self.conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()

    def close(self) -> None:
        self.conn.close()


class Http2:
    """tests.h2client: HTTP/2, `:path` sent as given."""

    def __init__(self, host: str, port: int, ctx: ssl.SSLContext) -> None:
        self.client = H2Client(host, port, ctx)

    def send(self, method: str, target: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        answer = self.client.request(method, target, headers={k.lower(): v for k, v in headers.items()}, body=body)
        if answer.reset is not None:
            raise ConnectionError(f"stream reset {answer.reset}")
        return answer.status, answer.headers, answer.body

    def close(self) -> None:
        self.client.close()


@pytest.mark.parametrize("protocol", [Http1, Http2], ids=["http1", "h2"])
def test_fuzzed_requests_get_a_status_or_a_real_answer_and_never_a_proxy_5xx(kube: Kube, protocol: type[Http1] | type[Http2]) -> None:
    for namespace in ("acme-x", "zoo-y"):  # so fuzzed requests get past "namespace not found"
        if not kube.kubectl("get", "namespace", namespace, "-o", "name", check=False):
            kube.kubectl("create", "namespace", namespace)
    ctx = kube.client_ssl()
    host, port = "127.0.0.1", kube.proxy.port
    assert kube.proxy.popen is not None
    pid = kube.proxy.popen.pid
    conn: list[Http1 | Http2] = []

    def connection() -> Http1 | Http2:
        if not conn:
            conn.append(protocol(host, port, ctx))
        return conn[0]

    rss_before = _rss_kib(pid)
    cases_before = STATS["cases"]

    @settings(max_examples=FUZZ_CASES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(
        method=st.sampled_from(["GET", "GET", "GET", "POST", "PUT", "PATCH", "DELETE"]),
        segments=api_paths() | st.lists(SEGMENTS, min_size=0, max_size=7),
        query=st.dictionaries(QUERY_KEYS, QUERY_VALUES, max_size=5),
        body=BODIES,
        content_type=CONTENT_TYPES,
        accept=ACCEPTS,
    )
    def one(method: str, segments: list[str], query: dict[str, str], body: bytes | None, content_type: str, accept: str) -> None:
        if method == "DELETE":
            segments = [*segments, "fuzz-never-used"]  # never a collection, never a real object
        path = "/" + "/".join(segments)
        query["timeoutSeconds"] = "1"  # a watch (by ?watch= or a /watch/ path) ends by itself
        target = path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": accept} if accept else {}
        if body is not None:
            headers["Content-Type"] = content_type
        c = connection()
        try:
            code, got, payload = c.send(method, target, body, headers)
        except (http.client.HTTPException, ConnectionError, OSError):
            conn.clear()  # the proxy closed a connection (or reset a stream) it did not want: reconnect
            c.close()
            return
        STATS["cases"] += 1
        if os.environ.get("FUZZ_DEBUG"):
            print(code, "audit-id" in got, method, target[:80], file=sys.stderr)
        from_partition = "audit-id" in got
        if code >= 500:
            assert from_partition, (method, target, code, payload[:300])
            # A partition's 5xx for a resourceVersion it could not parse means the proxy let a
            # proxy RV (or garbage) through to it on a merged resource.
            merged = "/namespaces/" in path or any(f"/{r}" in path for r in ("nodes", "csinodes", "leases"))
            assert not (merged and b"ParseUint" in payload and b"resourceVersion" in payload + body_text(body)), (
                method, target, body, payload[:300]
            )
        if from_partition:
            STATS["upstream"] += 1
            return
        if code < 400:
            STATS["ok"] += 1
            return
        STATS["proxy_status"] += 1
        if got.get("content-type", "").startswith("text/plain"):
            assert payload == b"404 page not found\n", (target, payload[:200])
            return
        status = json.loads(payload)
        assert status["kind"] == "Status" and status["code"] == code, (target, status)
        assert status["status"] == "Failure" and isinstance(status["message"], str) and status["reason"]

    one()
    for c in conn:
        c.close()
    growth_mib = (_rss_kib(pid) - rss_before) / 1024
    STATS["rss_growth_kib"] = max(STATS.get("rss_growth_kib", 0), int(growth_mib * 1024))
    assert STATS["cases"] - cases_before >= FUZZ_CASES * 0.9
    assert growth_mib < RSS_BOUND_MIB
    assert kube.proxy.popen.poll() is None, "the proxy is still running"
