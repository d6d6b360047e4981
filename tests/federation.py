"""The local federation of REAL partitions (2 TPs x 2 RPs: etcd + kube-apiserver each) and the
proxy in front of it, started once per test session (fixtures in tests/conftest.py), and the
helpers tests use to talk to it.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from hack.federation import DEFAULT_BIN_DIR, PROXY_ADMINS_GROUP, Federation, find_kubectl
from hack.proxy_process import ProxyProcess
from routing import rv as rvcodec
from tests import rvscan

RV_TABLE = ("kube-system", "partition-proxy-resource-versions")  # the proxy's default

# The proxy's nodes cache, a node-leases cache (not a default since 2026-11-28, cached here with
# its protobuf twin, to test the twin of a metadata-only kind and a cache operators may add) and
# one filtered by label, to tell narrower from wider selectors.
TEST_CACHES = [
    {"name": "nodes", "resource": "nodes", "role": "resource"},
    {"name": "node-leases", "group": "coordination.k8s.io", "resource": "leases", "namespace": "kube-node-lease", "role": "resource"},
    {"name": "critical-pods", "resource": "pods", "role": "tenant", "label_selector": "tier=critical"},
]
TEST_CONFIG = {
    "auth": {"token_review_partition": "tp1"},
    "limits": {"max_watches_per_identity": 1000, "watch_write_timeout_seconds": 5},
}


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl run; its message carries kubectl's stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr: {self.stderr.strip()[:2000]}"


@dataclass(frozen=True)
class Kube:
    """Handles on the running federation for tests: kubeconfigs and a kubectl runner."""

    fed: Federation
    proxy: ProxyProcess
    kubectl_path: str
    admin: Path  # admin through the proxy (group partition-proxy:admins)
    watch_limit: int = 1000  # limits.max_watches_per_identity of the session proxy

    def direct(self, partition: str) -> Path:
        return self.fed.partition(partition).admin_kubeconfig

    def rv_codec(self, space: tuple[str, ...]) -> rvcodec.RVCodec:
        """A codec of proxy resourceVersions for `space` with the epoch table read straight
        from the system partition (tp1), as any replica reads it."""
        return rv_codec(self.fed, space)

    def kubectl(self, *args: str, kubeconfig: Path | None = None, check: bool = True, timeout: float = 60) -> str:
        """Run the real kubectl; returns stdout. Raises CalledProcessError (check=True)."""
        cmd = [self.kubectl_path, "--kubeconfig", str(kubeconfig or self.admin), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise KubectlError(done.returncode, cmd, done.stdout, done.stderr)
        if self.through_proxy(kubeconfig) and done.stdout.lstrip().startswith(("{", "apiVersion:", "kind:")):
            rvscan.SCANNER.scan_text(done.stdout, where="kubectl " + " ".join(args), merged_url=False)
        return done.stdout

    def through_proxy(self, kubeconfig: Path | None) -> bool:
        """Whether a kubeconfig talks to a proxy (not straight to a partition)."""
        return kubeconfig is None or kubeconfig not in {p.admin_kubeconfig for p in self.fed.partitions}

    def create(self, obj: dict[str, object], *, kubeconfig: Path | None = None) -> None:
        """`kubectl create -f -` of one object (JSON)."""
        cmd = [self.kubectl_path, "--kubeconfig", str(kubeconfig or self.admin), "create", "-f", "-"]
        done = subprocess.run(cmd, input=json.dumps(obj), capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout, done.stderr)

    def metric(self, name: str, *, server: str | None = None, **labels: str) -> float:
        """The sum of the /metrics samples of `name` whose labels include `labels`, of the
        session's proxy or the one at `server`."""
        ctx = ssl.create_default_context(cafile=str(self.fed.ca_file))
        with urllib.request.urlopen((server or self.proxy.server) + "/metrics", context=ctx, timeout=10) as resp:
            text = resp.read().decode()
        want = {f'{k}="{v}"' for k, v in labels.items()}
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                inner = line[line.find("{") + 1 : line.find("}")] if "{" in line else ""
                if want <= set(inner.split(",")):
                    total += float(line.rsplit(" ", 1)[1])
        return total

    def client_ssl(self, user: str = "admin", groups: tuple[str, ...] = (PROXY_ADMINS_GROUP,)) -> ssl.SSLContext:
        """An SSL context with a client certificate for `user`/`groups`, trusting the federation CA."""
        directory = self.fed.root / "test-clients"
        crt, key = self.fed.ca.issue_client(directory, f"{user.replace(':', '_')}-{uuid.uuid4().hex[:6]}", user, list(groups))
        ctx = ssl.create_default_context(cafile=str(self.fed.ca_file))
        ctx.load_cert_chain(crt, key)
        return ctx

    def partition_ssl(self, partition: str) -> ssl.SSLContext:
        """An SSL context that reaches a partition directly as its admin."""
        crt, key = self.fed.partition(partition).admin_cert
        ctx = ssl.create_default_context(cafile=str(self.fed.ca_file))
        ctx.load_cert_chain(crt, key)
        return ctx


def require(ok: bool, message: str) -> None:
    """Fail (REQUIRE_REAL_PARTITIONS=1, as in CI) or skip (a developer machine without Go, or a
    sandbox without a capability) unless `ok`: a missing real component never passes silently."""
    if ok:
        return
    if os.environ.get("REQUIRE_REAL_PARTITIONS"):
        pytest.fail(message)
    pytest.skip(message)


def require_binaries(*names: str) -> None:
    """`require` every real component of `names` in .local/bin."""
    missing = [n for n in names if not (DEFAULT_BIN_DIR / n).exists()]
    require(not missing, f"real {', '.join(missing)} missing in {DEFAULT_BIN_DIR}: run `make test` (hack/build-components.sh)")


def eventually(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `check` every 0.1 s until it holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)


async def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """`eventually` without blocking the event loop (the test's own watchers keep reading)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.1)


@contextmanager
def running_federation(
    root: Path,
    *,
    tenant_partitions: int = 2,
    resource_partitions: int = 2,
    caches: Sequence[Mapping[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
    proxied: Sequence[str] | None = None,
    deferred: Sequence[str] = (),
) -> Iterator[Kube]:
    """A federation of real partitions under `root` and one proxy in front of `proxied` of them
    (default: all; the others are peers for same-run baselines, or `deferred`: prepared but
    started by the test, `fed.start_partitions`), an admin kubeconfig through the proxy;
    everything stopped on the way out."""
    require_binaries("kube-apiserver", "etcd")
    fed = Federation(root / "federation", tenant_partitions=tenant_partitions, resource_partitions=resource_partitions)
    proxy = None
    try:
        fed.start(deferred=deferred)
        proxy = ProxyProcess(
            fed, root / "proxy", partitions=proxied, caches=list(caches) if caches is not None else None, extra=extra
        ).start()
        admin = fed.issue_client_kubeconfig("admin-through-proxy", user="admin", groups=[PROXY_ADMINS_GROUP], server=proxy.server)
        yield Kube(fed=fed, proxy=proxy, kubectl_path=find_kubectl(), admin=admin)
    finally:
        if proxy is not None:
            proxy.stop()
        fed.stop()


def rv_codec(fed: Federation, space: tuple[str, ...], *, system: str = "tp1") -> rvcodec.RVCodec:
    """See Kube.rv_codec."""
    namespace, name = RV_TABLE
    out = subprocess.run(
        [find_kubectl(), "--kubeconfig", str(fed.partition(system).admin_kubeconfig), "get", "configmap", "-n", namespace, name, "-o", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    return rvcodec.RVCodec(space, rvcodec.table_from_json(json.loads(out)["data"]["epochs"]))


def pod(namespace: str, name: str, node: str) -> dict[str, object]:
    """A minimal pod bound to `node` (no scheduler runs in the test federation)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
    }


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}


async def proxy_request(kube: Kube, method: str, path: str, *, body: Any = None, server: str | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    """One request through the proxy (or `server`) as the admin client: (status, the body decoded
    as JSON or {"raw": text}, headers)."""
    async with aiohttp.ClientSession() as s:
        async with s.request(
            method, (server or kube.proxy.server) + path, ssl=kube.client_ssl(), data=orjson.dumps(body) if body is not None else None,
            headers={"Content-Type": "application/json"}, timeout=aiohttp.ClientTimeout(total=30),
        ) as r:
            raw = await r.read()
            try:
                doc = orjson.loads(raw)
            except orjson.JSONDecodeError:
                doc = {"raw": raw.decode(errors="replace")}
            return r.status, doc if isinstance(doc, dict) else {"raw": doc}, dict(r.headers)
