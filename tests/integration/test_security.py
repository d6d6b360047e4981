"""Identity, authorization and limits through the proxy, with several real identities: tenant
users, kubelets, a user without rights, forged identity headers, tokens; and, through a proxy of
the module's own, the settings the session proxy leaves at their defaults: anonymous requests,
trusted groups, the TLS minimum version and ciphers, in-flight requests per identity."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hack.federation import PROXY_ADMINS_GROUP
from hack.proxy_process import ProxyProcess
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


# -- what the session proxy leaves at its defaults: a proxy of this module's own --------------

TRUSTED_GROUP = "partition-proxy:cache-readers"  # auth.trusted_groups of the configured proxy
INFLIGHT_PER_IDENTITY = 2  # failure.max_inflight_per_identity of the configured proxy


@pytest.fixture(scope="module")
def configured(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """A proxy in front of the session federation with anonymous requests allowed, one trusted
    group, TLS 1.3 at least and `INFLIGHT_PER_IDENTITY` requests in flight per identity, caching
    nodes (the reads the trusted group makes)."""
    extra = {
        "listen": {"tls": {"min_version": "1.3"}},
        "auth": {"anonymous": True, "trusted_groups": [TRUSTED_GROUP], "token_review_partition": "tp1"},
        "failure": {"max_inflight_per_identity": INFLIGHT_PER_IDENTITY},
    }
    caches = [{"name": "nodes", "resource": "nodes", "role": "resource"}]
    proxy = ProxyProcess(kube.fed, tmp_path_factory.mktemp("configured") / "proxy", caches=caches, extra=extra).start()
    try:
        yield proxy
    finally:
        proxy.stop()


async def _get_as(server: str, path: str, ctx: ssl.SSLContext) -> tuple[int, dict[str, Any], dict[str, str]]:
    async with aiohttp.ClientSession() as s:
        async with s.get(server + path, ssl=ctx) as resp:
            return resp.status, await resp.json(content_type=None), dict(resp.headers)


async def test_anonymous_requests_act_as_system_anonymous_when_allowed_and_get_401_when_not(
    kube: Kube, configured: ProxyProcess, unique: str
) -> None:
    namespace = f"acme{unique}-anon"  # a tenant of the system partition (tp1)
    kube.kubectl("create", "namespace", namespace)
    no_certificate = ssl.create_default_context(cafile=str(kube.fed.ca_file))
    path = f"/api/v1/namespaces/{namespace}/configmaps"

    # Allowed: the partition judges the request as kube-apiserver judges an anonymous one, as
    # user system:anonymous (its RBAC denial names it) ...
    code, status, _ = await _get_as(configured.server, path, no_certificate)
    assert (code, status.get("reason")) == (403, "Forbidden"), status
    assert f'User "system:anonymous" cannot list resource "configmaps" in API group "" in the namespace "{namespace}"' in status["message"]

    # ... in group system:unauthenticated: a RoleBinding to that group lets it read.
    kube.kubectl("-n", namespace, "create", "role", "anonymous-reader", "--verb=list", "--resource=configmaps", kubeconfig=kube.direct("tp1"))
    kube.kubectl("-n", namespace, "create", "rolebinding", "anonymous-reader", "--role=anonymous-reader",
                 "--group=system:unauthenticated", kubeconfig=kube.direct("tp1"))
    kube.kubectl("-n", namespace, "create", "configmap", "visible", kubeconfig=kube.direct("tp1"))
    deadline = time.monotonic() + 10
    while True:
        code, listed, _ = await _get_as(configured.server, path, no_certificate)
        if code != 403 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)  # until the partition's RBAC cache has the binding
    assert code == 200, listed
    assert [i["metadata"]["name"] for i in listed["items"]] == ["visible"]

    # Not allowed (the session proxy: auth.anonymous off): 401 Unauthorized, whatever RBAC says.
    code, status, _ = await _get_as(kube.proxy.server, path, no_certificate)
    assert code == 401, status
    assert (status["kind"], status["reason"]) == ("Status", "Unauthorized"), status


# A refused handshake: asyncio's TLS layer (the proxy's) closes the connection without sending
# its alert, so the client sees an EOF during the handshake (or a reset), not the alert's reason.
REFUSED = (ssl.SSLError, ConnectionError)


def _handshake(port: int, ctx: ssl.SSLContext) -> tuple[str, str]:
    """A TLS handshake with the proxy on `port`: (protocol version, cipher). Raises ssl.SSLError
    when the proxy refuses it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            version, cipher = tls.version(), tls.cipher()
            assert version is not None and cipher is not None
            return version, cipher[0]


def _tls12_client(kube: Kube, ciphers: str | None = None) -> ssl.SSLContext:
    """A client that speaks TLS 1.2 at most (with only `ciphers`, OpenSSL syntax, when given)."""
    ctx = ssl.create_default_context(cafile=str(kube.fed.ca_file))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if ciphers is not None:
        ctx.set_ciphers(ciphers)
    return ctx


def test_a_client_below_the_configured_minimum_tls_version_is_refused(kube: Kube, configured: ProxyProcess) -> None:
    with pytest.raises(REFUSED):
        _handshake(configured.port, _tls12_client(kube))
    assert _handshake(configured.port, ssl.create_default_context(cafile=str(kube.fed.ca_file)))[0] == "TLSv1.3"
    # the same client is welcome where the minimum is TLS 1.2 (the session proxy: the default)
    assert _handshake(kube.proxy.port, _tls12_client(kube))[0] == "TLSv1.2"


def test_a_tls_1_2_client_offering_only_ciphers_outside_the_configured_list_is_refused(kube: Kube, tmp_path: Path) -> None:
    proxy = ProxyProcess(kube.fed, tmp_path / "chacha", caches=[], extra={"listen": {"tls": {"ciphers": "ECDHE+CHACHA20"}}}).start()
    try:
        with pytest.raises(REFUSED):
            _handshake(proxy.port, _tls12_client(kube, "ECDHE+AESGCM"))
        assert _handshake(proxy.port, _tls12_client(kube, "ECDHE+CHACHA20")) == ("TLSv1.2", "ECDHE-ECDSA-CHACHA20-POLY1305")
        # the same client is welcome where AES-GCM is in the list (the session proxy: the default)
        assert _handshake(kube.proxy.port, _tls12_client(kube, "ECDHE+AESGCM"))[0] == "TLSv1.2"
    finally:
        proxy.stop()


async def test_inflight_requests_per_identity_are_limited_with_429_and_retry_after(
    kube: Kube, configured: ProxyProcess, unique: str
) -> None:
    busy = kube.client_ssl(f"busy-{unique}", (PROXY_ADMINS_GROUP,))
    url = f"{configured.server}/api/v1/namespaces/default/configmaps"
    release = asyncio.Event()

    async def slow_body(name: str) -> AsyncIterator[bytes]:
        """A ConfigMap whose body's end waits for `release`: its create stays in flight."""
        yield b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"' + name.encode() + b'"'
        await release.wait()
        yield b"}}"

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:

        async def create(name: str) -> int:
            async with s.post(url, data=slow_body(name), ssl=busy, headers={"Content-Type": "application/json"}) as r:
                return r.status

        rejected = kube.metric("partition_proxy_rejected_requests_total", server=configured.server, reason="identity")
        held = [asyncio.create_task(create(f"held-{unique}-{i}")) for i in range(INFLIGHT_PER_IDENTITY)]
        try:
            deadline = time.monotonic() + 10
            # until both creates hold their slots (nothing else is in flight on this proxy)
            while await asyncio.to_thread(kube.metric, "partition_proxy_inflight_requests", server=configured.server, kind="other") < 2:
                assert time.monotonic() < deadline and not any(t.done() for t in held), [t.done() and t.result() for t in held]
                await asyncio.sleep(0.05)
            async with s.get(url, ssl=busy) as r:
                status, retry_after = await r.json(), r.headers.get("Retry-After", "")
            assert (r.status, status.get("kind"), status.get("reason")) == (429, "Status", "TooManyRequests"), status
            assert retry_after.isdigit() and int(retry_after) >= 1
            assert kube.metric("partition_proxy_rejected_requests_total", server=configured.server, reason="identity") == rejected + 1
            async with s.get(url, ssl=kube.client_ssl(f"other-{unique}", (PROXY_ADMINS_GROUP,))) as r:
                assert r.status == 200, "another identity is not limited by this one's requests"
        finally:
            release.set()
            created = await asyncio.gather(*held, return_exceptions=True)
        assert created == [201] * INFLIGHT_PER_IDENTITY
        async with s.get(url, ssl=busy) as r:
            assert r.status == 200, "the slots are given back"


async def test_trusted_groups_read_from_the_cache_without_asking_and_other_groups_are_asked(
    kube: Kube, configured: ProxyProcess, unique: str
) -> None:
    """Neither user has any RBAC on the partitions. A member of `auth.trusted_groups` reads what a
    watch cache holds without a SubjectAccessReview; the group is passed on to the partitions
    unchanged, which judge it like any other (a read that goes upstream is denied)."""
    trusted = kube.client_ssl(f"reader-{unique}", (TRUSTED_GROUP,))
    untrusted = kube.client_ssl(f"outsider-{unique}", ("partition-proxy:cache-outsiders",))
    names = {n for p in ("rp1", "rp2") for n in kube.kubectl("get", "nodes", "-o", "name", kubeconfig=kube.direct(p)).split()}

    deadline = time.monotonic() + 10
    while True:  # from the nodes cache, once it caught up with nodes other tests just made
        code, listed, _ = await _get_as(configured.server, "/api/v1/nodes?resourceVersion=0", trusted)
        cached = {f"node/{i['metadata']['name']}" for i in listed.get("items", [])}
        if code != 200 or cached == names or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert code == 200, listed
    assert cached == names
    code, status, _ = await _get_as(configured.server, "/api/v1/nodes?resourceVersion=0", untrusted)
    assert (code, status.get("reason")) == (403, "Forbidden"), status
    assert f'User "outsider-{unique}" cannot list resource "nodes"' in status["message"]

    code, status, _ = await _get_as(configured.server, "/api/v1/nodes", trusted)  # a consistent list: upstream
    assert (code, status.get("reason")) == (403, "Forbidden"), status
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{configured.server}/apis/authentication.k8s.io/v1/selfsubjectreviews", ssl=trusted,
                          json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}) as resp:
            assert resp.status == 201, await resp.text()
            user = (await resp.json())["status"]["userInfo"]
    assert (user["username"], sorted(user["groups"])) == (f"reader-{unique}", sorted([TRUSTED_GROUP, "system:authenticated"]))
