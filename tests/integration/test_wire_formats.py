"""resourceVersions in every wire format through the proxy (docs/resource-versions.md): kubectl
with indented JSON and YAML, raw bodies of every patch type, DeleteOptions, pretty-printed
answers, Tables and metadata-only answers, references, CBOR negotiation. Each case is compared
with the same request straight to the owning partition where the answers must agree."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from routing import rv as rvcodec
from tests.federation import Kube, pod

PRETTY_UA = "curl/8.5.0"  # kube-apiserver indents JSON for curl-like user agents


async def _call(
    kube: Kube, method: str, path: str, *, body: bytes | None = None, content_type: str = "application/json",
    accept: str = "application/json", direct: str = "", user_agent: str = "",
) -> tuple[int, dict[str, str], bytes]:
    server = kube.fed.partition(direct).server if direct else kube.proxy.server
    ctx = kube.partition_ssl(direct) if direct else kube.client_ssl()
    headers = {"Accept": accept}
    if body is not None:
        headers["Content-Type"] = content_type
    if user_agent:
        headers["User-Agent"] = user_agent
    async with aiohttp.ClientSession() as s:
        async with s.request(method, server + path, data=body, headers=headers, ssl=ctx, timeout=aiohttp.ClientTimeout(total=30)) as r:
            return r.status, dict(r.headers), await r.read()


def _json(raw: bytes) -> Any:
    return json.loads(raw)


def _pod_in(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    kube.create(pod(namespace, name, "rp1-nowhere"))
    return json.loads(kube.kubectl("get", "pod", name, "-n", namespace, "-o", "json"))


@pytest.fixture
def namespace(kube: Kube, unique: str) -> str:
    name = f"zoo-{unique}"  # a tp2 tenant: never the system partition
    kube.kubectl("create", "namespace", name)
    return name


# --- kubectl ------------------------------------------------------------------------------------


def test_kubectl_replace_of_an_indented_json_file_round_trips(kube: Kube, namespace: str, tmp_path: Path) -> None:
    obj = _pod_in(kube, namespace, "p")
    assert rvcodec.is_proxy_rv(obj["metadata"]["resourceVersion"])
    obj["metadata"].setdefault("labels", {})["step"] = "one"
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(obj, indent=4))

    kube.kubectl("replace", "-f", str(path))

    again = json.loads(kube.kubectl("get", "pod", "p", "-n", namespace, "-o", "json"))
    assert again["metadata"]["labels"]["step"] == "one"
    assert rvcodec.compare(again["metadata"]["resourceVersion"], obj["metadata"]["resourceVersion"]) != 0


def test_kubectl_replace_raw_with_indented_json_and_a_stale_rv_is_a_conflict(kube: Kube, namespace: str, tmp_path: Path) -> None:
    obj = _pod_in(kube, namespace, "p")
    path = tmp_path / "pod.json"
    obj["metadata"]["annotations"] = {"raw": "yes"}
    path.write_text(json.dumps(obj, indent=2))
    raw = f"/api/v1/namespaces/{namespace}/pods/p"

    kube.kubectl("replace", "--raw", raw, "-f", str(path))  # current RV: accepted
    done = subprocess.run(  # the same body again: its RV is stale now
        [kube.kubectl_path, "--kubeconfig", str(kube.admin), "replace", "--raw", raw, "-f", str(path)],
        capture_output=True, text=True, timeout=60,
    )

    assert done.returncode != 0 and "the object has been modified" in done.stderr + done.stdout, done.stderr


def test_namespace_finalize_with_indented_json(kube: Kube, namespace: str, tmp_path: Path) -> None:
    obj = json.loads(kube.kubectl("get", "namespace", namespace, "-o", "json"))
    path = tmp_path / "ns.json"
    path.write_text(json.dumps(obj, indent=2))

    out = kube.kubectl("replace", "--raw", f"/api/v1/namespaces/{namespace}/finalize", "-f", str(path))

    assert json.loads(out)["metadata"]["name"] == namespace


def test_kubectl_replace_of_a_yaml_file_round_trips(kube: Kube, namespace: str, tmp_path: Path) -> None:
    kube.create(pod(namespace, "yml", "rp1-nowhere"))
    doc = yaml.safe_load(kube.kubectl("get", "pod", "yml", "-n", namespace, "-o", "yaml"))
    doc["metadata"]["labels"] = {"from": "yaml"}
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(doc))

    kube.kubectl("replace", "-f", str(path))

    assert json.loads(kube.kubectl("get", "pod", "yml", "-n", namespace, "-o", "json"))["metadata"]["labels"] == {"from": "yaml"}


def test_kubectl_apply_server_side_with_a_resource_version_precondition(kube: Kube, namespace: str, tmp_path: Path) -> None:
    kube.kubectl("create", "configmap", "c", "-n", namespace, "--from-literal=a=1")
    current = json.loads(kube.kubectl("get", "configmap", "c", "-n", namespace, "-o", "json"))
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "2"},
                "metadata": {"name": "c", "namespace": namespace, "resourceVersion": current["metadata"]["resourceVersion"]}}
    path = tmp_path / "cm.yaml"
    path.write_text(yaml.safe_dump(manifest))

    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))

    assert json.loads(kube.kubectl("get", "configmap", "c", "-n", namespace, "-o", "json"))["data"] == {"a": "2"}
    done = subprocess.run(  # the same precondition again: stale now
        [kube.kubectl_path, "--kubeconfig", str(kube.admin), "apply", "--server-side", "--force-conflicts", "-f", str(path)],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "modified" in done.stderr, done.stderr


def test_kubectl_edit_round_trip(kube: Kube, namespace: str) -> None:
    kube.kubectl("create", "configmap", "e", "-n", namespace, "--from-literal=colour=blue")
    env = dict(os.environ, KUBE_EDITOR="sed -i s/blue/green/")

    done = subprocess.run(
        [kube.kubectl_path, "--kubeconfig", str(kube.admin), "edit", "configmap", "e", "-n", namespace],
        capture_output=True, text=True, timeout=60, env=env,
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(kube.kubectl("get", "configmap", "e", "-n", namespace, "-o", "json"))["data"] == {"colour": "green"}


def test_kubectl_delete_raw_with_preconditions(kube: Kube, namespace: str, tmp_path: Path) -> None:
    kube.kubectl("create", "configmap", "d", "-n", namespace)
    current = json.loads(kube.kubectl("get", "configmap", "d", "-n", namespace, "-o", "json"))["metadata"]["resourceVersion"]
    stale = rvcodec.object_rv("tp2", 2)
    raw = f"/api/v1/namespaces/{namespace}/configmaps/d"

    def delete(rv: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"opts-{rv[-6:]}.json"
        path.write_text(json.dumps({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": rv}}, indent=2))
        return subprocess.run([kube.kubectl_path, "--kubeconfig", str(kube.admin), "delete", "--raw", raw, "-f", str(path)],
                              capture_output=True, text=True, timeout=60)

    refused = delete(stale)
    assert refused.returncode != 0 and ("Conflict" in refused.stderr or "precondition" in refused.stderr), refused.stderr
    accepted = delete(current)
    assert accepted.returncode == 0, accepted.stderr
    assert "NotFound" in subprocess.run([kube.kubectl_path, "--kubeconfig", str(kube.admin), "get", "cm", "d", "-n", namespace],
                                         capture_output=True, text=True, timeout=60).stderr


# --- raw bodies: patches, preconditions, references -----------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "make"),
    [
        ("application/json-patch+json", lambda rv: [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                                                    {"op": "add", "path": "/metadata/labels", "value": {"p": "json"}}]),
        ("application/merge-patch+json", lambda rv: {"metadata": {"resourceVersion": rv, "labels": {"p": "merge"}}}),
        ("application/strategic-merge-patch+json", lambda rv: {"metadata": {"resourceVersion": rv, "labels": {"p": "smp"}}}),
    ],
    ids=["json-patch", "merge-patch", "strategic-merge-patch"],
)
async def test_every_patch_type_with_a_precondition_applies_when_current_and_conflicts_when_stale(
    kube: Kube, namespace: str, content_type: str, make: Any
) -> None:
    obj = _pod_in(kube, namespace, "q")
    path = f"/api/v1/namespaces/{namespace}/pods/q"
    current = obj["metadata"]["resourceVersion"]

    code, _, raw = await _call(kube, "PATCH", path, body=json.dumps(make(current), indent=2).encode(), content_type=content_type)
    assert code == 200, raw
    assert rvcodec.is_proxy_rv(_json(raw)["metadata"]["resourceVersion"])
    code, _, raw = await _call(kube, "PATCH", path, body=json.dumps(make(current)).encode(), content_type=content_type)
    expected = 422 if content_type == "application/json-patch+json" else 409  # a failed `test` op is 422 Invalid
    assert code == expected, raw


async def test_a_yaml_body_is_translated(kube: Kube, namespace: str) -> None:
    obj = _pod_in(kube, namespace, "w")
    obj["metadata"]["labels"] = {"wire": "yaml"}

    code, _, raw = await _call(kube, "PUT", f"/api/v1/namespaces/{namespace}/pods/w", body=yaml.safe_dump(obj).encode(),
                               content_type="application/yaml")

    assert code == 200, raw
    assert _json(raw)["metadata"]["labels"] == {"wire": "yaml"}


async def test_a_write_with_an_rv_the_proxy_cannot_translate_is_a_conflict_never_a_500(kube: Kube, namespace: str) -> None:
    obj = _pod_in(kube, namespace, "v")
    for bad in ("10010000000000000000059200000000000000000589", rvcodec.object_rv("tp1", 5), str(2**127 + 5)):
        obj["metadata"]["resourceVersion"] = bad
        code, _, raw = await _call(kube, "PUT", f"/api/v1/namespaces/{namespace}/pods/v", body=json.dumps(obj).encode())
        assert (code, _json(raw)["reason"]) == (409, "Conflict"), (bad, raw)
    obj["metadata"]["resourceVersion"] = "abc"
    code, _, raw = await _call(kube, "PUT", f"/api/v1/namespaces/{namespace}/pods/v", body=json.dumps(obj).encode())
    assert (code, _json(raw)["reason"]) == (400, "BadRequest"), raw


async def test_an_events_involved_object_rv_round_trips_as_the_client_wrote_it(kube: Kube, namespace: str) -> None:
    target = _pod_in(kube, namespace, "t")
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "t.1", "namespace": namespace},
             "involvedObject": {"kind": "Pod", "name": "t", "namespace": namespace, "resourceVersion": target["metadata"]["resourceVersion"]},
             "reason": "Test", "message": "m", "type": "Normal"}

    code, _, raw = await _call(kube, "POST", f"/api/v1/namespaces/{namespace}/events", body=json.dumps(event).encode())
    assert code == 201, raw
    code, _, raw = await _call(kube, "GET", f"/api/v1/namespaces/{namespace}/events/t.1")

    got = _json(raw)
    assert got["involvedObject"]["resourceVersion"] == target["metadata"]["resourceVersion"]
    assert got["metadata"]["resourceVersion"] != target["metadata"]["resourceVersion"]


# --- answers in every shape ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/pods", "/api/v1/namespaces", "/api/v1/nodes", "/api/v1/namespaces/{ns}/pods"])
@pytest.mark.parametrize("how", ["pretty", "curl"])
async def test_pretty_printed_answers_carry_proxy_rvs(kube: Kube, namespace: str, path: str, how: str) -> None:
    _pod_in(kube, namespace, "pretty")
    url = path.format(ns=namespace) + ("?pretty=true" if how == "pretty" else "")

    code, _, raw = await _call(kube, "GET", url, user_agent=PRETTY_UA if how == "curl" else "")

    assert code == 200, raw
    doc = _json(raw)
    assert rvcodec.is_proxy_rv(doc["metadata"]["resourceVersion"])
    assert all(rvcodec.is_proxy_rv(i["metadata"]["resourceVersion"]) for i in doc["items"])


@pytest.mark.parametrize(
    "accept",
    [
        "application/json;as=Table;g=meta.k8s.io;v=v1",
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
    ],
    ids=["table", "metadata-json", "metadata-protobuf"],
)
@pytest.mark.parametrize("scope", ["union", "forward"])
async def test_tables_and_metadata_lists_carry_proxy_rvs(kube: Kube, namespace: str, accept: str, scope: str) -> None:
    _pod_in(kube, namespace, "m")
    path = "/api/v1/pods" if scope == "union" else f"/api/v1/namespaces/{namespace}/pods"

    code, headers, raw = await _call(kube, "GET", path, accept=accept)

    assert code == 200, raw
    if headers["Content-Type"].startswith("application/vnd.kubernetes.protobuf"):
        from routing import protobuf as pb

        env, meta, items = pb.list_items(raw)
        assert env.kind == "PartialObjectMetadataList"
        rvs = [pb.list_meta_rv(meta), *(pb.item_meta(i).resource_version for i in items)]
    else:
        doc = _json(raw)
        rows = doc.get("rows") if doc["kind"] == "Table" else doc["items"]
        rvs = [doc["metadata"]["resourceVersion"], *((r.get("object") or r)["metadata"]["resourceVersion"] for r in rows)]
    assert len(rvs) > 1 and all(rvcodec.is_proxy_rv(rv) for rv in rvs), rvs


# --- CBOR: negotiated away exactly as a kube-apiserver without it ----------------------------------


@pytest.mark.parametrize("path", ["/api/v1/pods", "/api/v1/namespaces/{ns}/pods", "/api/v1/nodes"])
async def test_cbor_only_accept_gets_the_answer_of_a_kube_apiserver_without_cbor(kube: Kube, namespace: str, path: str) -> None:
    path = path.format(ns=namespace)
    code, _, raw = await _call(kube, "GET", path, accept="application/cbor")
    direct_code, _, direct_raw = await _call(kube, "GET", path, accept="application/cbor", direct="tp2")

    assert (code, _json(raw)["reason"]) == (direct_code, _json(direct_raw)["reason"]) == (406, "NotAcceptable")
    code, headers, _ = await _call(kube, "GET", path, accept="application/cbor, application/json")
    assert code == 200 and headers["Content-Type"].startswith("application/json")


async def test_a_cbor_body_is_refused_as_by_a_kube_apiserver_without_cbor(kube: Kube, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    code, _, raw = await _call(kube, "POST", path, body=b"\xa0", content_type="application/cbor")
    direct_code, _, direct_raw = await _call(kube, "POST", path, body=b"\xa0", content_type="application/cbor", direct="tp2")

    assert (code, _json(raw)["reason"]) == (direct_code, _json(direct_raw)["reason"]) == (415, "UnsupportedMediaType")
