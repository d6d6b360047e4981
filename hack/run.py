"""`make run`: a living local federation. Real partitions (2 TPs x 2 RPs of etcd + kube-apiserver),
the proxy in front, and the control plane as the proxy's clients (hack/controlplane.py): per TP a
kube-scheduler and a kube-controller-manager, per RP a kube-controller-manager with the node
controllers, kwok simulating the demo nodes of both RPs, and kubemark hollow kubelets. The demo
creates two tenants' namespaces, kwok nodes in both RPs and a Deployment per tenant, and waits
until their pods run.

Contract used by other tools:
- `.local/kubeconfigs/proxy.yaml`: an admin user (group partition-proxy:admins) through the proxy;
- `.local/kubeconfigs/<partition>.yaml`: admin straight to each partition (tp1, tp2, rp1, rp2);
- `.local/run/ready` appears when everything is ready and disappears on shutdown.
Serves until SIGINT/SIGTERM, then stops every process it started: the control plane, the
proxy, then each partition's kube-apiserver before its etcd, each escalated to SIGKILL after a
grace period; every process it started also dies with it if it is killed (hack/procs.py).
When the proxy exits on its own (a worker died: its supervisor stops the others, as in a pod),
it is started again on the same port and the restart is logged, as a Deployment restarts its
replica; the partitions and the control plane keep running.
`--state-dir` moves `.local/` (the tests run a federation of their own there).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from hack.controlplane import HOLLOW_TAINT, KWOK_SELECTOR, ControlPlane, HollowNode, kwok_node
from hack.federation import PROXY_ADMINS_GROUP, Federation, FederationError, find_kubectl
from hack.procs import rss_mib
from hack.proxy_process import ProxyProcess

REPO = Path(__file__).resolve().parent.parent
LOCAL = REPO / ".local"

DEMO_TENANTS = {"acme": "acme-web", "zeta": "zeta-db"}  # tenant -> namespace; a-m -> tp1, n-z -> tp2
DEMO_DEPLOYMENTS = {"acme-web": ("web", 4), "zeta-db": ("db", 2)}  # namespace -> (name, replicas)
KWOK_NODES_PER_RP = 2
DEMO_READY_SECONDS = 180  # how long the demo's pods get to run before `make run` says so and goes on


def hollow_nodes(rps: list[str], count: int) -> list[HollowNode]:
    """`count` hollow kubelets spread over the RPs in turn: rp1-hollow-1, rp2-hollow-1, rp1-hollow-2..."""
    return [HollowNode(f"{rps[i % len(rps)]}-hollow-{i // len(rps) + 1}", rps[i % len(rps)]) for i in range(count)]


def demo_manifests(rps: list[str], hollow: list[HollowNode]) -> str:
    """Namespaces of two tenants, kwok nodes in every resource partition, and a pod bound to each
    hollow node (tolerating its taint). The Deployments are made with `kubectl create deployment`."""
    docs = [f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n" for ns in DEMO_TENANTS.values()]
    docs += [json.dumps(kwok_node(f"{rp}-kwok-{i}")) + "\n" for rp in rps for i in range(1, KWOK_NODES_PER_RP + 1)]
    key, value_effect = HOLLOW_TAINT.split("=", 1)
    value, effect = value_effect.split(":")
    namespaces = list(DEMO_TENANTS.values())
    for i, node in enumerate(hollow):
        docs.append(
            "apiVersion: v1\nkind: Pod\n"
            f"metadata: {{name: on-{node.name}, namespace: {namespaces[i % len(namespaces)]}}}\n"
            f"spec: {{nodeName: {node.name}, tolerations: [{{key: {key}, value: '{value}', effect: {effect}}}], "
            "containers: [{name: app, image: registry.k8s.io/pause:3.10}]}\n"
        )
    return "---\n".join(docs)


def wait_untainted(kubectl: list[str], selector: str, *, timeout: float) -> None:
    """Poll until no node selected by `selector` carries a node.kubernetes.io/* taint (the
    node lifecycle controller lifts not-ready within a --node-monitor-period of Ready)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run([*kubectl, "get", "nodes", "-l", selector, "-o", "json"], capture_output=True, text=True, timeout=60)
        if out.returncode == 0 and not any(
            t["key"].startswith("node.kubernetes.io/")
            for n in json.loads(out.stdout)["items"] for t in n["spec"].get("taints") or []
        ):
            return
        time.sleep(0.5)


def wait_demo_running(kubectl: list[str], expected: int, timeout: float) -> tuple[int, float]:
    """Poll the pods of the demo namespaces through the proxy until `expected` are Running.
    Returns (running, seconds waited)."""
    start = time.monotonic()
    running = 0
    while time.monotonic() - start < timeout:
        out = subprocess.run([*kubectl, "get", "pods", "-A", "-o", "json"], capture_output=True, text=True, timeout=60)
        if out.returncode == 0:
            items = json.loads(out.stdout)["items"]
            running = sum(1 for p in items if p["metadata"]["namespace"] in DEMO_TENANTS.values()
                          and p.get("status", {}).get("phase") == "Running")
            if running >= expected:
                break
        time.sleep(1.0)
    return running, time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=6443, help="proxy port on 127.0.0.1")
    parser.add_argument("--hollow-nodes", type=int, default=2, help="kubemark hollow kubelets (spread over the RPs)")
    parser.add_argument("--workers", type=int, default=None, help="proxy worker processes (default: the proxy's, one per CPU)")
    parser.add_argument("--no-demo", action="store_true", help="no namespaces, nodes or deployments")
    parser.add_argument("--state-dir", type=Path, default=LOCAL, help="where the federation, kubeconfigs and run/ready live")
    args = parser.parse_args()
    local: Path = args.state_dir.resolve()

    ready = local / "run" / "ready"
    ready.unlink(missing_ok=True)
    ready.parent.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    started = time.monotonic()
    fed = Federation(local / "federation", avoid_ports=(args.port,))  # the proxy binds it once they run
    proxy: ProxyProcess | None = None
    plane: ControlPlane | None = None
    try:
        fed.start()
        fed_seconds = time.monotonic() - started
        proxy = ProxyProcess(fed, local / "federation" / "proxy", port=args.port, workers=args.workers).start()
        kubeconfigs = local / "kubeconfigs"
        kubeconfigs.mkdir(parents=True, exist_ok=True)
        shutil.copy(
            fed.issue_client_kubeconfig("proxy-admin", user="admin", groups=[PROXY_ADMINS_GROUP], server=proxy.server),
            kubeconfigs / "proxy.yaml",
        )
        for p in fed.partitions:
            shutil.copy(p.admin_kubeconfig, kubeconfigs / f"{p.name}.yaml")
        rps = [p.name for p in fed.partitions if p.role == "resource"]
        hollow = hollow_nodes(rps, args.hollow_nodes)
        t0 = time.monotonic()
        plane = ControlPlane(fed, proxy, hollow_nodes=hollow).start()
        plane_seconds = time.monotonic() - t0
        kubectl = find_kubectl()
        k_argv = [kubectl, "--kubeconfig", str(kubeconfigs / "proxy.yaml")]
        demo_line = ""
        if not args.no_demo:
            t0 = time.monotonic()
            subprocess.run([*k_argv, "apply", "-f", "-"], input=demo_manifests(rps, hollow).encode(), check=True)
            # Schedule once kwok has made every demo node Ready (and the node lifecycle
            # controllers have lifted the not-ready taints), so the pods spread over both RPs.
            subprocess.run([*k_argv, "wait", "--for=condition=Ready", "node", "-l", KWOK_SELECTOR, "--timeout=60s"],
                           check=True)
            wait_untainted(k_argv, KWOK_SELECTOR, timeout=30)
            for namespace, (name, replicas) in DEMO_DEPLOYMENTS.items():
                subprocess.run([*k_argv, "create", "deployment", name, "--image=registry.k8s.io/pause:3.10",
                                f"--replicas={replicas}", "-n", namespace], check=True)
            expected = sum(r for _, r in DEMO_DEPLOYMENTS.values()) + len(hollow)
            running, waited = wait_demo_running(k_argv, expected, DEMO_READY_SECONDS)
            demo_line = (f"demo: {running}/{expected} pods Running {time.monotonic() - t0:.1f} s after it was applied"
                         + ("" if running >= expected else f" (gave up waiting after {waited:.0f} s; see the logs)") + "\n")
        total = time.monotonic() - started
        pids = [proc.popen.pid for proc in fed._procs] + ([proxy.popen.pid] if proxy.popen else [])
        pids += [proc.pid for proc in plane.group.processes]
        ready.write_text(proxy.server + "\n")
        k = f"{kubectl} --kubeconfig {kubeconfigs / 'proxy.yaml'}"
        print(
            f"\npartition-proxy is serving at {proxy.server} in front of "
            f"{', '.join(f'{p.name} ({p.role})' for p in fed.partitions)}\n"
            f"control plane through the proxy: kube-scheduler and kube-controller-manager per TP, "
            f"kube-controller-manager (node lifecycle) per RP, kwok, {len(hollow)} kubemark hollow kubelets\n"
            f"federation started in {fed_seconds:.1f} s, control plane in {plane_seconds:.1f} s, "
            f"everything ready in {total:.1f} s; memory of all {len(pids)} processes: {rss_mib(pids):.0f} MiB RSS\n"
            f"{demo_line}"
            f"logs: {fed.root}/<partition>/*.log, {proxy.log_path}, {plane.root}/*.log\n\n"
            "Try:\n"
            f"  {k} get nodes -o wide\n"
            f"  {k} get pods -A -o wide\n"
            f"  {k} create deployment hello --image=x --replicas=6 -n acme-web   # scheduled over both RPs\n"
            f"  {k} scale deployment web --replicas=10 -n acme-web\n"
            f"  {k} get pods -A -w\n"
            f"  {k} label node rp2-kwok-2 type-     # kwok lets go: NotReady after 30 s, then tainted\n"
            f"  {k} delete namespace zeta-db       # the namespace controller of tp2 empties it\n"
            f"  {kubectl} --kubeconfig {kubeconfigs / 'tp2.yaml'} get pods -A   # straight to tp2\n"
            "Ctrl-C stops everything.\n",
            flush=True,
        )
        reported: set[str] = set()
        restarts = 0
        while not stop.wait(1.0):
            try:
                code = proxy.restart_if_exited()
            except FederationError as e:
                print(f"partition-proxy did not come back, trying again: {e}", flush=True)
                continue
            if code is not None:
                restarts += 1
                print(f"partition-proxy exited with {code}; restarted it on {proxy.server} "
                      f"(restart {restarts}); see {proxy.log_path}", flush=True)
            for proc in plane.group.exited():
                if proc.name not in reported:
                    reported.add(proc.name)
                    print(f"{proc.name} exited with {proc.popen.returncode}; see {proc.log}", flush=True)
    finally:
        ready.unlink(missing_ok=True)
        try:
            if plane is not None:
                plane.stop()
        finally:
            try:
                if proxy is not None:
                    proxy.stop()
            finally:
                fed.stop()
        print("stopped", flush=True)


if __name__ == "__main__":
    main()
