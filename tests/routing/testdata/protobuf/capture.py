"""Capture the protobuf fixtures of tests/routing/test_protobuf.py from a REAL kube-apiserver, and
check that the request bodies built here and the bodies routing.protobuf rewrites are accepted.

    cd /work/main && PYTHONPATH=. .venv/bin/python tests/routing/testdata/protobuf/capture.py

Starts a throwaway federation (one tenant partition: etcd + kube-apiserver from .local/bin) in a
temporary directory, writes the *.pb files next to this script, prints every check, stops the
federation. Request bodies (Binding, DeleteOptions, Eviction) are encoded here by hand from the
.proto definitions, independently of routing.protobuf.
"""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import tempfile
import threading
from pathlib import Path

from hack.federation import Federation, PartitionInfo, find_kubectl
from routing.protobuf import MAGIC, RVField, decode_watch_event, object_rv, rewrite_rvs

HERE = Path(__file__).resolve().parent
PB = "application/vnd.kubernetes.protobuf"
PODS = "/api/v1/namespaces/default/pods"

OBJECTS = """\
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: default, labels: {app: web}}
spec: {containers: [{name: c, image: registry.k8s.io/pause:3.10}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web-2, namespace: default, labels: {app: web}}
spec: {containers: [{name: c, image: registry.k8s.io/pause:3.10}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web-3, namespace: default, labels: {app: web}}
spec: {containers: [{name: c, image: registry.k8s.io/pause:3.10}]}
---
apiVersion: v1
kind: Node
metadata: {name: rp1-n1, labels: {node-role.kubernetes.io/worker: ""}}
spec: {podCIDR: 10.0.1.0/24}
---
apiVersion: v1
kind: Node
metadata: {name: rp1-n2}
spec: {podCIDR: 10.0.2.0/24}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: rp1-n1, namespace: kube-node-lease}
spec: {holderIdentity: rp1-n1, leaseDurationSeconds: 40, renewTime: "2026-01-02T03:04:05.678901Z"}
"""

EVENTS = """\
apiVersion: v1
kind: Event
metadata: {{name: web-1.scheduled, namespace: default}}
involvedObject: {{kind: Pod, namespace: default, name: web-1, apiVersion: v1, resourceVersion: "{pod_rv}"}}
related: {{kind: Node, name: rp1-n1, apiVersion: v1, resourceVersion: "{node_rv}"}}
reason: Scheduled
message: Successfully assigned default/web-1 to rp1-n1
source: {{component: default-scheduler}}
firstTimestamp: "2026-01-02T03:04:05Z"
lastTimestamp: "2026-01-02T03:04:05Z"
count: 1
type: Normal
---
apiVersion: events.k8s.io/v1
kind: Event
metadata: {{name: web-2.pulled, namespace: default}}
eventTime: "2026-01-02T03:04:05.123456Z"
reportingController: kubelet
reportingInstance: rp1-n1
action: Pulling
reason: Pulled
note: Container image already present
type: Normal
regarding: {{kind: Pod, namespace: default, name: web-2, apiVersion: v1, resourceVersion: "{pod2_rv}", fieldPath: "spec.containers{{c}}"}}
related: {{kind: Node, name: rp1-n2, apiVersion: v1, resourceVersion: "{node2_rv}"}}
"""


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def ld(field: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return varint(field << 3 | 2) + varint(len(data)) + data


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    """runtime.Unknown (pkg/runtime/generated.proto): 1 typeMeta{1 apiVersion, 2 kind}, 2 raw."""
    type_meta = ld(1, api_version) + ld(2, kind) if kind else b""
    return MAGIC + ld(1, type_meta) + ld(2, raw) + ld(3, b"") + ld(4, b"")


def delete_options(precondition_rv: str) -> bytes:
    """meta/v1 DeleteOptions: 2 preconditions (Preconditions: 2 resourceVersion)."""
    return ld(2, ld(2, precondition_rv))


class Client:
    def __init__(self, p: PartitionInfo, ca: Path) -> None:
        self.host, self.port = "127.0.0.1", p.port
        self.ctx = ssl.create_default_context(cafile=str(ca))
        self.ctx.load_cert_chain(*(str(f) for f in p.admin_cert))

    def connect(self, timeout: float = 30) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def request(self, method: str, path: str, body: bytes | None = None, *,
                accept: str = PB, content_type: str = PB) -> tuple[int, bytes]:
        conn = self.connect()
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, data

    def get(self, path: str, accept: str = PB) -> bytes:
        status, data = self.request("GET", path, accept=accept)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {data[:300]!r}")
        return data


def check(what: str, ok: bool, detail: object = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {what} {detail}")
    if not ok:
        raise SystemExit(1)


def save(name: str, data: bytes) -> None:
    (HERE / name).write_bytes(data)
    print(f"     wrote {name} ({len(data)} bytes)")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="pbfed-") as tmp:
        fed = Federation(Path(tmp) / "fed", tenant_partitions=1, resource_partitions=0)
        fed.start()
        try:
            capture(fed)
        finally:
            fed.stop()


def kubectl(p: PartitionInfo, *args: str, input: str | None = None) -> str:
    return subprocess.run([find_kubectl(), "--kubeconfig", str(p.admin_kubeconfig), *args],
                          input=input, capture_output=True, text=True, check=True).stdout


def capture(fed: Federation) -> None:
    p = fed.partitions[0]
    c = Client(p, fed.ca_file)
    version = json.loads(c.get("/version", accept="application/json"))["gitVersion"]
    print(f"kube-apiserver {version}")
    kubectl(p, "create", "-f", "-", input=OBJECTS)

    def rv(path: str) -> str:
        return str(json.loads(c.get(path, accept="application/json"))["metadata"]["resourceVersion"])

    kubectl(p, "create", "-f", "-", input=EVENTS.format(
        pod_rv=rv(f"{PODS}/web-1"), node_rv=rv("/api/v1/nodes/rp1-n1"),
        pod2_rv=rv(f"{PODS}/web-2"), node2_rv=rv("/api/v1/nodes/rp1-n2")))

    save("pod.pb", c.get(f"{PODS}/web-1"))
    save("podlist.pb", c.get(PODS))
    save("podlist-limit2.pb", c.get(f"{PODS}?limit=2"))
    save("node.pb", c.get("/api/v1/nodes/rp1-n1"))
    save("nodelist.pb", c.get("/api/v1/nodes"))
    save("lease.pb", c.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/rp1-n1"))
    save("event.pb", c.get("/api/v1/namespaces/default/events/web-1.scheduled"))
    save("eventlist.pb", c.get("/api/v1/namespaces/default/events"))
    save("events-v1-event.pb", c.get("/apis/events.k8s.io/v1/namespaces/default/events/web-2.pulled"))
    save("partialobjectmetadatalist.pb",
         c.get(PODS, accept=f"{PB};as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"))
    save("partialobjectmetadatalist-v1beta1.pb",
         c.get(PODS, accept=f"{PB};as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1"))
    status, body = c.request("GET", f"{PODS}/missing")
    check("GET of a missing pod answers 404", status == 404, status)
    save("status-notfound.pb", body)
    status, body = c.request("GET", PODS, accept=f"{PB};as=Table;g=meta.k8s.io;v=v1")
    check("Table is not served in protobuf (406)", status == 406, (status, body[:120]))

    # A watch with initial events: ADDED x3, the initial-events-end BOOKMARK, then the writes below.
    stream = bytearray()
    bookmark_seen = threading.Event()

    def watch() -> None:
        conn = c.connect(timeout=60)
        conn.request("GET", f"{PODS}?watch=1&allowWatchBookmarks=true&sendInitialEvents=true"
                     "&resourceVersionMatch=NotOlderThan&timeoutSeconds=6", headers={"Accept": PB})
        resp = conn.getresponse()
        check("watch content type", resp.getheader("Content-Type") == f"{PB};stream=watch",
              resp.getheader("Content-Type"))
        while chunk := resp.read1(65536):
            stream.extend(chunk)
            if b"BOOKMARK" in stream:
                bookmark_seen.set()
        conn.close()

    watcher = threading.Thread(target=watch, name="capture-watch")
    watcher.start()
    check("initial-events-end bookmark arrives", bookmark_seen.wait(10))

    # A PUT of an old Pod body whose RV was rewritten to the current one is accepted.
    old = c.get(f"{PODS}/web-2")
    kubectl(p, "label", "pod", "web-2", "step=one")
    current = rv(f"{PODS}/web-2")
    status, body = c.request("PUT", f"{PODS}/web-2", old)
    check("PUT of the stale Pod body answers 409", status == 409, status)
    rewritten = rewrite_rvs(old, lambda where, value: current if where is RVField.OWN else None)
    check("rewritten body differs only in its RV", len(rewritten) == len(old) and rewritten != old)
    status, body = c.request("PUT", f"{PODS}/web-2", rewritten)
    check("PUT of the Pod body rewritten to the current RV answers 200", status == 200, status)
    proxy_rv = "1" * 39
    to_proxy = rewrite_rvs(old, lambda where, value: proxy_rv)
    status, body = c.request("PUT", f"{PODS}/web-2", to_proxy)
    check("PUT with a 39-digit RV is refused", status in (400, 409, 500), (status, body[-160:]))
    print(f"     (status {status}: {body[-140:]!r})")

    # Binding (core/v1 Binding: 1 metadata, 2 target: ObjectReference 1 kind, 3 name,
    # 5 apiVersion, 6 resourceVersion), with a target RV.
    node_rv = rv("/api/v1/nodes/rp1-n1")
    binding = envelope("v1", "Binding", ld(1, ld(1, "web-1") + ld(3, "default"))
                       + ld(2, ld(1, "Node") + ld(3, "rp1-n1") + ld(5, "v1") + ld(6, node_rv)))
    status, body = c.request("POST", f"{PODS}/web-1/binding", binding)
    check("POST pods/web-1/binding with a protobuf Binding answers 201", status == 201, (status, body[-160:]))
    save("binding.pb", binding)

    # DeleteOptions with preconditions.resourceVersion: stale -> 409, current -> 200.
    stale = envelope("v1", "DeleteOptions", delete_options("1"))
    status, body = c.request("DELETE", f"{PODS}/web-2", stale)
    check("DELETE with a stale precondition answers 409", status == 409, (status, body[-200:]))
    save("deleteoptions-stale.pb", stale)
    current_delete = envelope("v1", "DeleteOptions", delete_options(rv(f"{PODS}/web-2")))
    status, body = c.request("DELETE", f"{PODS}/web-2", current_delete)
    check("DELETE with the current precondition answers 200", status == 200, status)
    save("deleteoptions.pb", current_delete)
    kindless = envelope("", "", delete_options("1"))
    status, body = c.request("DELETE", f"{PODS}/web-3", kindless)
    check("DELETE with a kind-less DeleteOptions is decoded (stale precondition: 409)",
          status == 409, (status, body[-160:]))
    save("deleteoptions-kindless.pb", kindless)

    # Eviction (policy/v1 Eviction: 1 metadata, 2 deleteOptions) with a precondition.
    def eviction(rv_: str) -> bytes:
        return envelope("policy/v1", "Eviction",
                        ld(1, ld(1, "web-3") + ld(3, "default")) + ld(2, delete_options(rv_)))

    status, body = c.request("POST", f"{PODS}/web-3/eviction", eviction("1"))
    check("POST eviction with a stale precondition answers 409", status == 409, status)
    evict = eviction(rv(f"{PODS}/web-3"))
    status, body = c.request("POST", f"{PODS}/web-3/eviction", evict)
    check("POST eviction with the current precondition answers 201", status == 201, (status, body[-160:]))
    save("eviction.pb", evict)
    save("status-eviction.pb", body)

    watcher.join(30)
    check("watch ended", not watcher.is_alive())
    save("watch-pods.bin", bytes(stream))
    types = []
    bare = enveloped = True
    pos = 0
    while pos < len(stream):
        n = int.from_bytes(stream[pos:pos + 4], "big")
        frame = bytes(stream[pos + 4:pos + 4 + n])
        ev = decode_watch_event(frame)
        bare = bare and not frame.startswith(MAGIC)
        enveloped = enveloped and ev.object.startswith(MAGIC)
        types.append((ev.type, object_rv(ev.object)))
        pos += 4 + n
    print(f"     watch events: {types}")
    check("every watch frame is a bare WatchEvent, its object k8s\\0 + Unknown", bare and enveloped)


if __name__ == "__main__":
    main()
