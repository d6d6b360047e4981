"""Identity, authorization and limits through the proxy, with several real identities: tenant
users, kubelets, a user without rights, forged identity headers, tokens."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import time
from pathlib import Path

import aiohttp

from tests.federation import Kube, node


def _kubeconfig(kube: Kube, name: str, user: str, groups: list[str]) -> Path:
    return kube.fed.issue_client_kubeconfig(name, user=user, groups=groups, server=kube.proxy.server)


def _kubectl(kube: Kube, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kube.kubectl_path, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=60
    )


def _grant_namespace_admin(kube: Kube, partition: str, namespace: str, user: str) -> None:
    """A Role over the namespace's usual objects bound to `user` (the built-in `admin` role is
    aggregated by kube-controller-manager, which the test federation does not run), waited for
    until the partition's RBAC cache has it."""
    kube.kubectl(
        "-n", namespace, "create", "role", "tenant-admin", "--verb=*", "--resource=pods,configmaps,secrets,services",
        kubeconfig=kube.direct(partition),
    )
    kube.kubectl(
        "-n", namespace, "create", "rolebinding", f"{user}-admin", "--role=tenant-admin", f"--user={user}",
        kubeconfig=kube.direct(partition),
    )
    for _ in range(50):
        can = kube.kubectl("auth", "can-i", "create", "configmaps", "-n", namespace, "--as", user,
                           kubeconfig=kube.direct(partition), check=False)
        if can.strip() == "yes":
            return
        time.sleep(0.1)
    raise AssertionError(f"RBAC for {user} never became visible on {partition}")


def test_tenant_user_of_tp1_cannot_read_or_write_tp2_namespaces(kube: Kube, unique: str) -> None:
    mine, theirs = f"acme{unique}-own", f"zoo{unique}-other"
    for ns in (mine, theirs):
        kube.kubectl("create", "namespace", ns)
    _grant_namespace_admin(kube, "tp1", mine, f"alice-{unique}")
    alice = _kubeconfig(kube, f"alice-{unique}", f"alice-{unique}", ["acme-users"])
    assert _kubectl(kube, alice, "-n", mine, "create", "configmap", "ok").returncode == 0
    for args in (("-n", theirs, "get", "pods"), ("-n", theirs, "create", "configmap", "nope"), ("get", "ns", theirs)):
        done = _kubectl(kube, alice, *args)
        assert done.returncode != 0 and "forbidden" in done.stderr.lower(), (args, done.stderr)
    assert kube.kubectl("-n", theirs, "get", "configmap", "nope", kubeconfig=kube.direct("tp2"), check=False) == ""


def test_kubelet_may_update_its_node_and_lease_but_not_another_node(kube: Kube, unique: str) -> None:
    mine, other = f"rp1-kl-{unique}", f"rp1-kl-other-{unique}"
    kube.create(node(mine))
    kube.create(node(other))
    kubelet = _kubeconfig(kube, f"kubelet-{unique}", f"system:node:{mine}", ["system:nodes"])
    assert _kubectl(kube, kubelet, "label", "node", mine, "own=yes").returncode == 0
    done = _kubectl(kube, kubelet, "label", "node", other, "own=no")
    assert done.returncode != 0 and "Forbidden" in done.stderr
    assert "not allowed to modify node" in done.stderr or "cannot" in done.stderr
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": mine, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": mine, "leaseDurationSeconds": 40},
    }
    created = subprocess.run(
        [kube.kubectl_path, "--kubeconfig", str(kubelet), "create", "-f", "-"],
        input=json.dumps(lease), capture_output=True, text=True, timeout=60,
    )
    assert created.returncode == 0, created.stderr
    assert kube.kubectl("-n", "kube-node-lease", "get", "lease", mine, "-o", "name", kubeconfig=kube.direct("rp1")).strip()
    lease["metadata"]["name"] = other  # type: ignore[index]
    denied = subprocess.run(
        [kube.kubectl_path, "--kubeconfig", str(kubelet), "create", "-f", "-"],
        input=json.dumps(lease), capture_output=True, text=True, timeout=60,
    )
    assert denied.returncode != 0 and "Forbidden" in denied.stderr


def test_forged_identity_headers_change_nothing(kube: Kube, unique: str) -> None:
    nobody = _kubeconfig(kube, f"nobody-{unique}", f"nobody-{unique}", [])
    # Impersonate-* asks to act as someone else: the partition says nobody may not.
    done = _kubectl(kube, nobody, "get", "pods", "--as", "admin", "--as-group", "partition-proxy:admins")
    assert done.returncode != 0 and "cannot impersonate" in done.stderr
    done = _kubectl(kube, nobody, "get", "nodes", "--as", "admin")
    assert done.returncode != 0 and "Forbidden" in done.stderr


async def test_front_proxy_headers_from_a_client_are_ignored(kube: Kube, unique: str) -> None:
    headers = {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}
    ctx = kube.client_ssl(f"nobody-{unique}", ())
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    async with aiohttp.ClientSession() as s:
        async with s.post(
            f"{kube.proxy.server}/apis/authentication.k8s.io/v1/selfsubjectreviews", json=body, headers=headers, ssl=ctx
        ) as resp:
            review = await resp.json()
    assert review["status"]["userInfo"]["username"] == f"nobody-{unique}"
    assert "system:masters" not in review["status"]["userInfo"].get("groups", [])


def test_system_masters_is_never_forwarded_from_a_client(kube: Kube, unique: str) -> None:
    masters = _kubeconfig(kube, f"masters-{unique}", f"root-{unique}", ["system:masters"])
    who = json.loads(_kubectl(kube, masters, "auth", "whoami", "-o", "json").stdout)
    assert "system:masters" not in who["status"]["userInfo"]["groups"]
    assert _kubectl(kube, masters, "get", "secrets", "-n", "kube-system").returncode != 0
    done = _kubectl(kube, kube.admin, "get", "pods", "--as", "x", "--as-group", "system:masters")
    assert done.returncode != 0 and "cannot impersonate" in done.stderr


def test_admin_may_impersonate_when_the_partition_says_so(kube: Kube, unique: str) -> None:
    who = json.loads(kube.kubectl("auth", "whoami", "-o", "json", "--as", f"bob-{unique}", "--as-group", "team"))
    assert who["status"]["userInfo"]["username"] == f"bob-{unique}"
    assert "team" in who["status"]["userInfo"]["groups"]


async def test_user_without_node_list_rights_gets_403_from_the_cache_path_too(kube: Kube, unique: str) -> None:
    ctx = kube.client_ssl(f"viewer-{unique}", ())
    before = kube.metric("partition_proxy_requests_total", route="serve-from-cache", code="403")
    async with aiohttp.ClientSession() as s:
        for params in ({"resourceVersion": "0"}, {}):  # from cache, and upstream
            async with s.get(f"{kube.proxy.server}/api/v1/nodes", params=params, ssl=ctx) as resp:
                status = await resp.json()
            assert (resp.status, status["reason"]) == (403, "Forbidden")
            assert 'cannot list resource "nodes"' in status["message"]
    assert kube.metric("partition_proxy_requests_total", route="serve-from-cache", code="403") == before + 1


async def test_a_kubelet_reads_its_own_node_from_the_cache(kube: Kube, unique: str) -> None:
    mine = f"rp2-cached-{unique}"
    kube.create(node(mine))
    ctx = kube.client_ssl(f"system:node:{mine}", ("system:nodes",))
    params = {"resourceVersion": "0", "fieldSelector": f"metadata.name={mine}"}
    async with aiohttp.ClientSession() as s:
        for _ in range(50):
            async with s.get(f"{kube.proxy.server}/api/v1/nodes", params=params, ssl=ctx) as resp:
                listed = await resp.json()
            if listed.get("items"):
                break
            await asyncio.sleep(0.1)
    assert resp.status == 200, listed
    assert [i["metadata"]["name"] for i in listed["items"]] == [mine]


async def test_bearer_token_is_reviewed_by_the_partition_and_never_logged(kube: Kube, unique: str) -> None:
    sa = f"robot-{unique}"
    kube.kubectl("-n", "default", "create", "serviceaccount", sa, kubeconfig=kube.direct("tp1"))
    token = kube.kubectl("-n", "default", "create", "token", sa, kubeconfig=kube.direct("tp1")).strip()
    ctx = ssl.create_default_context(cafile=str(kube.fed.ca_file))
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    async with aiohttp.ClientSession() as s:
        async with s.post(
            f"{kube.proxy.server}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            ssl=ctx,
        ) as resp:
            review = await resp.json()
        async with s.get(f"{kube.proxy.server}/api/v1/nodes", headers={"Authorization": "Bearer not-a-token"}, ssl=ctx) as bad:
            assert bad.status == 401
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:default:{sa}"
    logs = kube.proxy.log_path.read_text()
    assert token not in logs and token[:40] not in logs
    assert "BEGIN" not in logs and "PRIVATE KEY" not in logs


def _token_review(kube: Kube, token: str, kubeconfig: Path | None = None) -> dict:
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
    argv = [kube.kubectl_path, "--kubeconfig", str(kubeconfig or kube.admin), "create", "-f", "-", "-o", "json"]
    done = subprocess.run(argv, input=json.dumps(review), capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)["status"]


async def test_a_service_account_token_of_the_second_tenant_partition_is_reviewed_where_it_was_issued(
    kube: Kube, unique: str
) -> None:
    # The namespace lives in tp2; the token is signed by tp2 (issuer https://tp2.partitions.local)
    # and names a service account only tp2 stores: the system partition (tp1) cannot review it.
    namespace, sa = f"zoo{unique}-tokens", f"robot-{unique}"
    kube.kubectl("create", "namespace", namespace)
    assert kube.kubectl("get", "namespace", namespace, "-o", "name", kubeconfig=kube.direct("tp2"), check=False).strip()
    kube.kubectl("-n", namespace, "create", "serviceaccount", sa)
    token = kube.kubectl("-n", namespace, "create", "token", sa).strip()
    reference = _token_review(kube, token, kube.direct("tp2"))
    assert reference["authenticated"] is True
    through = _token_review(kube, token)
    assert through["authenticated"] is True, through
    assert through["user"]["username"] == reference["user"]["username"] == f"system:serviceaccount:{namespace}:{sa}"
    # ... and the proxy's own authentication (auth.token_review_partition is tp1) asks tp2 too.
    ctx = ssl.create_default_context(cafile=str(kube.fed.ca_file))
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{kube.proxy.server}/apis/authentication.k8s.io/v1/selfsubjectreviews", json=body,
                          headers={"Authorization": f"Bearer {token}"}, ssl=ctx) as resp:
            assert resp.status == 201, await resp.text()
            review = await resp.json()
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:{sa}"


async def test_watches_per_identity_are_limited_with_429_and_retry_after(kube: Kube, unique: str) -> None:
    # This user opens as many node watches (served from the cache) as the session proxy allows.
    ctx = kube.client_ssl(f"watcher-{unique}", ("partition-proxy:admins",))
    url = f"{kube.proxy.server}/api/v1/nodes"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=ctx)) as s:
        opened = [await s.get(url, params={"watch": "1"}) for _ in range(kube.watch_limit)]
        try:
            assert all(r.status == 200 for r in opened)
            async with s.get(url, params={"watch": "1"}) as refused:
                status = await refused.json()
                assert refused.status == 429 and refused.headers["Retry-After"].isdigit()
                assert status["reason"] == "TooManyRequests"
        finally:
            for r in opened:
                r.close()
