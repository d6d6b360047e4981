"""The local federation of REAL partitions (2 TPs x 2 RPs: etcd + kube-apiserver each) and the
proxy in front of it, started once per test session (fixtures in tests/conftest.py), and the
helpers tests use to talk to it.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from hack.federation import PROXY_ADMINS_GROUP, Federation
from hack.proxy_process import ProxyProcess

# The proxy's default caches plus one filtered by label, to tell narrower from wider selectors.
TEST_CACHES = [
    {"name": "nodes", "resource": "nodes", "role": "resource"},
    {"name": "node-leases", "group": "coordination.k8s.io", "resource": "leases", "namespace": "kube-node-lease", "role": "resource"},
    {"name": "critical-pods", "resource": "pods", "role": "tenant", "label_selector": "tier=critical"},
]
TEST_CONFIG = {
    "auth": {"token_review_partition": "tp1"},
    "limits": {"max_watches_per_identity": 1000, "watch_write_timeout_seconds": 5},
}


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

    def kubectl(self, *args: str, kubeconfig: Path | None = None, check: bool = True, timeout: float = 60) -> str:
        """Run the real kubectl; returns stdout. Raises CalledProcessError (check=True)."""
        cmd = [self.kubectl_path, "--kubeconfig", str(kubeconfig or self.admin), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout, done.stderr)
        return done.stdout

    def create(self, obj: dict[str, object], *, kubeconfig: Path | None = None) -> None:
        """`kubectl create -f -` of one object (JSON)."""
        cmd = [self.kubectl_path, "--kubeconfig", str(kubeconfig or self.admin), "create", "-f", "-"]
        done = subprocess.run(cmd, input=json.dumps(obj), capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, cmd, done.stdout, done.stderr)

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the proxy's /metrics samples of `name` whose labels include `labels`."""
        ctx = ssl.create_default_context(cafile=str(self.fed.ca_file))
        with urllib.request.urlopen(self.proxy.server + "/metrics", context=ctx, timeout=10) as resp:
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
