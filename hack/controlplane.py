"""Bring a local federation to life: the real control-plane components, each a client of the
proxy, started next to a running `Federation` and `ProxyProcess` (used by `make run` and
tests/integration/test_living_federation.py).

- per tenant partition: kube-scheduler and kube-controller-manager (workload, namespace,
  garbage-collector, service-account controllers, ...), pinned to their TP by the partition path
  prefix: their pods, bindings and namespaces stay in the TP, their node lists are the union of
  all RPs;
- per resource partition: kube-controller-manager with the node controllers (node lifecycle:
  NotReady and taints when a node's Lease stops renewing; TTL), pinned to its RP: it sees the
  nodes and node Leases of its RP, and the pods of every TP;
- kwok (v0.8.0) with the stages in hack/kwok/, simulating every node labelled `type=kwok`
  (`KWOK_SELECTOR`) and the pods bound to them, through the proxy without a pin;
- kubemark hollow kubelets (the real kubelet with a fake runtime) named `<rp>-hollow-<i>`,
  pinned to their RP, as `system:node:<name>` in `system:nodes`; registered with the taint
  `HOLLOW_TAINT` so only pods that tolerate it or are bound by name run on them.

Identities: certificates from the federation CA; the scheduler and controller managers as
`system:kube-scheduler` and `system:kube-controller-manager`, kwok as a member of the proxy's
admins group (it acts for many nodes at once, which no node identity may). kube-controller-
manager runs with its own credential (`--use-service-account-credentials=false`: per-controller
service-account tokens would be issued by one partition and reviewed by another), so each
partition binds that user to the bootstrap `system:controller:<controller>` roles of the
controllers it runs (`controller_rbac_yaml`).

`ControlPlane` starts all of that; `DirectControlPlane` starts the same components pointed
straight at one partition the proxy does not front (a plain cluster: the same-run baseline of
the tests).

Layout under `<federation root>/controlplane/` (`direct-<partition>/` for the baseline):
`<component>.log`, `kubeconfigs/`, `certs/`, `<hollow node>/tmp` (kubemark's root directory).
Ports: each component's health port is a free 127.0.0.1 port picked at start. Leader election is
off everywhere (one replica each). Processes: hack/procs.py (PDEATHSIG, stopped in reverse order).
"""

from __future__ import annotations

import http.client
import ssl
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hack.federation import (
    DEFAULT_BIN_DIR,
    HOST,
    PROXY_ADMINS_GROUP,
    REPO,
    Federation,
    FederationError,
    _free_ports,
    find_kubectl,
)
from hack.pki import write_kubeconfig
from hack.procs import Process, ProcessGroup, http_ok, https_ok
from hack.proxy_process import ProxyProcess

KWOK_DIR = REPO / "hack" / "kwok"
KWOK_CONFIGS = (KWOK_DIR / "kwok-configuration.yaml", KWOK_DIR / "node-stages.yaml", KWOK_DIR / "pod-stages.yaml")
KWOK_LABEL = ("type", "kwok")
KWOK_SELECTOR = "=".join(KWOK_LABEL)
KWOK_POD_CIDR = "10.244.0.0/16"  # kwok's pod IPs (its default 10.0.0.0/24 holds 254 pods)
# kwok's node Leases: 40 s like a kubelet's, renewed every 40 / 4 = 10 s. Without the flag and
# without a KwokConfiguration document kwok v0.8.0 makes no Leases at all, and its nodes go
# NotReady a grace period after every node-initialize.
NODE_LEASE_SECONDS = 40
HOLLOW_TAINT = "partition-proxy.local/hollow=true:NoSchedule"
HOLLOW_LABEL = ("partition-proxy.local/hollow", "true")
BINARIES = ("kube-scheduler", "kube-controller-manager", "kubemark", "kwok")

# kube-controller-manager --controllers of a tenant partition: what tenants' workloads need.
TP_CONTROLLERS = (
    "deployment-controller", "replicaset-controller", "statefulset-controller", "daemonset-controller",
    "job-controller", "cronjob-controller", "ttl-after-finished-controller", "disruption-controller",
    "namespace-controller", "garbage-collector-controller", "pod-garbage-collector-controller",
    "taint-eviction-controller", "serviceaccount-controller", "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
)
# ... of a resource partition: the node controllers. Not node-ipam (no pod CIDRs here), and not
# pod GC or taint eviction: an RP-pinned controller sees only its own RP's nodes, so it would
# take pods on the other RPs' nodes for orphans; TP controllers see the union of all RPs.
RP_CONTROLLERS = ("node-lifecycle-controller", "ttl-controller")
# The bootstrap role (system:controller:<role>) each controller runs with upstream, where
# kube-controller-manager gives every controller its own service account.
CONTROLLER_ROLES = {
    "deployment-controller": "deployment-controller",
    "replicaset-controller": "replicaset-controller",
    "statefulset-controller": "statefulset-controller",
    "daemonset-controller": "daemon-set-controller",
    "job-controller": "job-controller",
    "cronjob-controller": "cronjob-controller",
    "ttl-after-finished-controller": "ttl-after-finished-controller",
    "disruption-controller": "disruption-controller",
    "namespace-controller": "namespace-controller",
    "garbage-collector-controller": "generic-garbage-collector",
    "pod-garbage-collector-controller": "pod-garbage-collector",
    "taint-eviction-controller": "node-controller",
    "serviceaccount-controller": "service-account-controller",
    "root-ca-certificate-publisher-controller": "root-ca-cert-publisher",
    "node-lifecycle-controller": "node-controller",
    "ttl-controller": "ttl-controller",
}
KCM_USER = "system:kube-controller-manager"
SCHEDULER_USER = "system:kube-scheduler"


def controller_rbac_yaml(controllers: Sequence[str]) -> str:
    """ClusterRoleBindings of KCM_USER to the bootstrap role of each controller (YAML)."""
    roles = sorted({CONTROLLER_ROLES[c] for c in controllers if c in CONTROLLER_ROLES})
    return "---\n".join(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n"
        f"metadata: {{name: 'partition-proxy:kube-controller-manager:{role}'}}\n"
        f"roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: 'system:controller:{role}'}}\n"
        f"subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: '{KCM_USER}'}}]\n"
        for role in roles
    )


def kwok_node(name: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node for kwok to simulate: labelled KWOK_SELECTOR, with kwok's usual annotation and a
    capacity of 32 CPUs and 110 pods (kwok's node-initialize stage keeps a given capacity).

    Its labels are the ones a kubelet registers its Node with (`initialNode` in
    pkg/kubelet/kubelet_node_status.go), beta OS and arch labels included: without them the
    node lifecycle controller patches every Node once to add them (`reconcileNodeLabels`, a GET
    and a PATCH per node at kube-controller-manager's 20 QPS), and at 10,000 nodes its NoSchedule
    taint passes wait ~17 minutes behind that backlog."""
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {KWOK_LABEL[0]: KWOK_LABEL[1], "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
                       **(labels or {})},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "status": {"allocatable": capacity, "capacity": capacity},
    }


@dataclass(frozen=True)
class HollowNode:
    """A kubemark hollow kubelet: its node name, RP, and whether it talks to the proxy (pinned to
    its RP: `partition-proxy kubeconfig --role kubelet`) or straight to its partition."""

    name: str
    partition: str
    through_proxy: bool = True


class _Launcher:
    """Starts the components as processes of one `ProcessGroup` under `root`; subclasses decide
    what each component's kubeconfig points at."""

    # kwok's --config files (its configuration and stages); a subclass may simulate otherwise
    kwok_configs: tuple[Path, ...] = KWOK_CONFIGS

    def __init__(self, fed: Federation, root: Path, *, node_monitor_grace_period: str, bin_dir: Path) -> None:
        self.fed = fed
        self.root = root
        self.node_monitor_grace_period = node_monitor_grace_period
        self.bin_dir = bin_dir
        self.group = ProcessGroup()

    def stop(self) -> None:
        """Stop every component, the last started first (SIGTERM, then SIGKILL). Idempotent."""
        self.group.stop()

    def _check_binaries(self) -> None:
        missing = [b for b in BINARIES if not (self.bin_dir / b).exists()]
        if missing:
            raise FederationError(f"{', '.join(missing)} missing in {self.bin_dir}: run `bash hack/build-components.sh run`")

    def _cert(self, name: str, user: str, groups: Sequence[str] = ()) -> tuple[Path, Path]:
        return self.fed.ca.issue_client(self.root / "certs", name, user, list(groups))

    def _kubeconfig(self, name: str, *, server: str, user: str, groups: Sequence[str] = ()) -> Path:
        """A new client certificate (CN=user, O=groups) and a kubeconfig for `server`."""
        crt, key = self._cert(name, user, groups)
        return write_kubeconfig(self.root / "kubeconfigs" / f"{name}.yaml", server=server, ca_file=self.fed.ca_file,
                                cert_file=crt, key_file=key, name=name)

    def direct_get(self, partition: str, path: str) -> int:
        """The HTTP status of GET `path` straight from `partition`, as its admin."""
        p = self.fed.partition(partition)
        ctx = ssl.create_default_context(cafile=str(self.fed.ca_file))
        ctx.load_cert_chain(*map(str, p.admin_cert))
        conn = http.client.HTTPSConnection(HOST, p.port, context=ctx, timeout=5)
        try:
            conn.request("GET", path)
            return conn.getresponse().status
        finally:
            conn.close()

    def _apply_rbac(self, partitions: Sequence[str]) -> None:
        yaml_text = controller_rbac_yaml((*TP_CONTROLLERS, *RP_CONTROLLERS))
        kubectl = find_kubectl()
        for name in partitions:
            p = self.fed.partition(name)
            r = subprocess.run([kubectl, "--kubeconfig", str(p.admin_kubeconfig), "apply", "-f", "-"], input=yaml_text,
                               capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                raise FederationError(f"kubectl apply (controller RBAC) on {p.name}: {r.stderr.strip()}")

    # -- components: each returns the process and its health port --------------------------

    def _scheduler(self, name: str, kubeconfig: Path) -> tuple[Process, int]:
        port = _free_ports(1)[0]
        proc = self.group.start(name, [
            str(self.bin_dir / "kube-scheduler"), f"--kubeconfig={kubeconfig}",
            "--leader-elect=false", f"--secure-port={port}", "--bind-address=127.0.0.1",
            f"--cert-dir={self.root / name}", "--v=1",
        ], log=self.root / f"{name}.log")
        return proc, port

    def _controller_manager(self, name: str, kubeconfig: Path, controllers: Sequence[str]) -> tuple[Process, int]:
        port = _free_ports(1)[0]
        argv = [
            str(self.bin_dir / "kube-controller-manager"), f"--kubeconfig={kubeconfig}",
            "--leader-elect=false", f"--secure-port={port}", "--bind-address=127.0.0.1",
            f"--cert-dir={self.root / name}", f"--controllers={','.join(controllers)}",
            "--use-service-account-credentials=false", f"--root-ca-file={self.fed.ca_file}",
            "--allocate-node-cidrs=false", "--v=1",
        ]
        if "serviceaccount-token-controller" in controllers:
            argv.append(f"--service-account-private-key-file={self.fed.root / 'pki' / 'service-account.key'}")
        if "node-lifecycle-controller" in controllers:
            argv += [f"--node-monitor-grace-period={self.node_monitor_grace_period}", "--node-monitor-period=2s"]
        return self.group.start(name, argv, log=self.root / f"{name}.log"), port

    def _kwok(self, kubeconfig: Path) -> tuple[Process, int]:
        port = _free_ports(1)[0]
        proc = self.group.start("kwok", [
            str(self.bin_dir / "kwok"), f"--kubeconfig={kubeconfig}",
            *(f"--config={config}" for config in self.kwok_configs),
            f"--manage-nodes-with-label-selector={KWOK_SELECTOR}", f"--cidr={KWOK_POD_CIDR}",
            f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
            f"--server-address=127.0.0.1:{port}",
        ], log=self.root / "kwok.log")
        return proc, port

    def _hollow_node(self, node: HollowNode, kubeconfig: Path) -> tuple[Process, int]:
        port = _free_ports(1)[0]
        tmp = self.root / node.name / "tmp"  # kubemark makes its kubelet's root directory in $TMPDIR
        tmp.mkdir(parents=True, exist_ok=True)
        proc = self.group.start(f"kubemark-{node.name}", [
            str(self.bin_dir / "kubemark"), "--morph=kubelet", f"--name={node.name}", f"--kubeconfig={kubeconfig}",
            f"--kubelet-port={port}", "--kubelet-read-only-port=0", "--use-host-image-service=false",
            f"--register-with-taints={HOLLOW_TAINT}", f"--node-labels={'='.join(HOLLOW_LABEL)}", "--v=1",
        ], log=self.root / f"kubemark-{node.name}.log", env={"TMPDIR": str(tmp)})
        return proc, port

    def _hollow_kubeconfig(self, node: HollowNode) -> Path:
        raise NotImplementedError

    def start_hollow_nodes(self, nodes: Sequence[HollowNode], *, timeout: float = 60.0) -> list[Process]:
        """Start hollow kubelets and wait (seconds) until each serves /healthz and its Node
        exists in its partition (read straight from it). Raises FederationError."""
        started = {f"kubemark-{n.name}": (n, *self._hollow_node(n, self._hollow_kubeconfig(n))) for n in nodes}

        def registered(proc: Process) -> bool:
            node, _, port = started[proc.name]
            return http_ok(port) and self.direct_get(node.partition, f"/api/v1/nodes/{node.name}") == 200

        procs = [proc for _, proc, _ in started.values()]
        self.group.wait_ready(procs, registered, timeout=timeout)
        return procs

    def _wait_healthy(self, started: Sequence[tuple[Process, int]], *, https: bool, deadline: float) -> None:
        ports = {proc.name: port for proc, port in started}
        check = https_ok if https else http_ok
        self.group.wait_ready([proc for proc, _ in started], lambda proc: check(ports[proc.name]),
                              timeout=max(1.0, deadline - time.monotonic()))


class ControlPlane(_Launcher):
    """The living part of a federation, every component a client of the proxy (module
    docstring). `start()` starts everything and waits until each component's health endpoint
    answers and each hollow kubelet has registered its Node; `stop()` stops everything in
    reverse order (idempotent). `bin_dir` holds the binaries of `hack/build-components.sh run`.

    `node_monitor_grace_period`: a node whose Lease was not renewed for this long is marked
    NotReady (Ready=Unknown) and tainted. Upstream's default is 50 s; 30 s is three missed
    renewals of a kubelet's or kwok's 10 s renew interval."""

    def __init__(self, fed: Federation, proxy: ProxyProcess, *, hollow_nodes: Sequence[HollowNode] = (),
                 kwok: bool = True, node_monitor_grace_period: str = "30s", bin_dir: Path = DEFAULT_BIN_DIR) -> None:
        super().__init__(fed, fed.root / "controlplane", node_monitor_grace_period=node_monitor_grace_period,
                         bin_dir=bin_dir)
        self.proxy = proxy
        self.hollow_nodes = tuple(hollow_nodes)
        self.kwok = kwok

    @property
    def partitions(self) -> list[str]:
        """The partitions behind the proxy (its config)."""
        config = yaml.safe_load(self.proxy.config_path.read_text())
        return [p["name"] for p in config["partitions"]]

    def start(self, timeout: float = 120.0) -> ControlPlane:
        """Start every component and wait (seconds) for all. On failure everything is stopped
        and FederationError raised with the failing component's log."""
        self._check_binaries()
        try:
            deadline = time.monotonic() + timeout
            members = self.partitions
            self._apply_rbac(members)
            started: list[tuple[Process, int]] = []
            for name in members:
                if self.fed.partition(name).role == "tenant":
                    started.append(self._controller_manager(
                        f"kube-controller-manager-{name}", self._pinned(f"kube-controller-manager-{name}", name, KCM_USER),
                        TP_CONTROLLERS))
                    started.append(self._scheduler(
                        f"kube-scheduler-{name}", self._cli_kubeconfig(f"kube-scheduler-{name}", partition=name,
                                                                       role="scheduler", user=SCHEDULER_USER)))
                else:
                    started.append(self._controller_manager(
                        f"kube-controller-manager-{name}", self._pinned(f"kube-controller-manager-{name}", name, KCM_USER),
                        RP_CONTROLLERS))
            self._wait_healthy(started, https=True, deadline=deadline)
            if self.kwok:
                # kwok acts for many nodes at once, which no node identity may: an admin of the proxy.
                kwok = self._kubeconfig("kwok", server=self.proxy.server, user="kwok", groups=[PROXY_ADMINS_GROUP])
                self._wait_healthy([self._kwok(kwok)], https=False, deadline=deadline)
            self.start_hollow_nodes(self.hollow_nodes, timeout=max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _pinned(self, name: str, partition: str, user: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig through the proxy pinned to `partition` (the partition path prefix)."""
        return self._kubeconfig(name, server=f"{self.proxy.server}/partitions/{partition}", user=user, groups=groups)

    def _cli_kubeconfig(self, name: str, *, partition: str, role: str, user: str, groups: Sequence[str] = (),
                        node_name: str | None = None) -> Path:
        """A kubeconfig written by the proxy's own `partition-proxy kubeconfig` command."""
        crt, key = self._cert(name, user, groups)
        out = self.root / "kubeconfigs" / f"{name}.yaml"
        out.parent.mkdir(parents=True, exist_ok=True)
        argv = [str(Path(sys.executable).parent / "partition-proxy"), "kubeconfig", "--server", self.proxy.server,
                "--ca-file", str(self.fed.ca_file), "--client-cert", str(crt), "--client-key", str(key),
                "--partition", partition, "--role", role, "--config", str(self.proxy.config_path), "-o", str(out)]
        if node_name:
            argv += ["--name", node_name]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise FederationError(f"partition-proxy kubeconfig for {name}: {r.stderr.strip()}")
        return out

    def _hollow_kubeconfig(self, node: HollowNode) -> Path:
        user, groups = f"system:node:{node.name}", ["system:nodes"]
        if node.through_proxy:
            return self._cli_kubeconfig(f"kubemark-{node.name}", partition=node.partition, role="kubelet", user=user,
                                        groups=groups, node_name=node.name)
        return self._kubeconfig(f"kubemark-{node.name}", server=self.fed.partition(node.partition).server, user=user,
                                groups=groups)


class DirectControlPlane(_Launcher):
    """The baseline: the same components pointed straight at ONE partition, which then is a
    plain single kube-apiserver cluster (a partition the proxy does not front, e.g. a third RP).
    One kube-scheduler, one kube-controller-manager with both the TP and the RP controllers,
    kwok, and hollow kubelets with kubeconfigs straight to the partition."""

    def __init__(self, fed: Federation, partition: str, *, kwok: bool = True, node_monitor_grace_period: str = "30s",
                 bin_dir: Path = DEFAULT_BIN_DIR) -> None:
        super().__init__(fed, fed.root / f"direct-{partition}", node_monitor_grace_period=node_monitor_grace_period,
                         bin_dir=bin_dir)
        self.partition = partition
        self.kwok = kwok

    def start(self, timeout: float = 120.0) -> DirectControlPlane:
        """Start the components and wait (seconds) for their health endpoints. Raises
        FederationError (everything started is stopped)."""
        self._check_binaries()
        server = self.fed.partition(self.partition).server
        try:
            deadline = time.monotonic() + timeout
            self._apply_rbac([self.partition])
            kcm = self._kubeconfig("kube-controller-manager", server=server, user=KCM_USER)
            scheduler = self._kubeconfig("kube-scheduler", server=server, user=SCHEDULER_USER)
            self._wait_healthy([
                self._controller_manager("kube-controller-manager", kcm, (*TP_CONTROLLERS, *RP_CONTROLLERS)),
                self._scheduler("kube-scheduler", scheduler),
            ], https=True, deadline=deadline)
            if self.kwok:
                kwok = self._kubeconfig("kwok", server=server, user="kwok", groups=["system:masters"])
                self._wait_healthy([self._kwok(kwok)], https=False, deadline=deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> DirectControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _hollow_kubeconfig(self, node: HollowNode) -> Path:
        return self._kubeconfig(f"kubemark-{node.name}", server=self.fed.partition(node.partition).server,
                                user=f"system:node:{node.name}", groups=["system:nodes"])
