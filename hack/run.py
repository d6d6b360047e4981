"""`make run`: a local federation of real partitions, the proxy in front, and a small demo.

Contract used by other tools:
- `.local/kubeconfigs/proxy.yaml`: an admin user (group partition-proxy:admins) through the proxy;
- `.local/kubeconfigs/<partition>.yaml`: admin straight to each partition (tp1, tp2, rp1, rp2);
- `.local/run/ready` appears when everything is ready and disappears on shutdown.
Serves until SIGINT/SIGTERM, then stops every process it started.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from hack.federation import PROXY_ADMINS_GROUP, Federation, find_kubectl
from hack.proxy_process import ProxyProcess

REPO = Path(__file__).resolve().parent.parent
LOCAL = REPO / ".local"

DEMO_TENANTS = {"acme": "acme-web", "zeta": "zeta-db"}  # tenant -> namespace; a-m -> tp1, n-z -> tp2


def demo_manifests(rps: list[str]) -> str:
    """Namespaces of two tenants, two nodes per resource partition, and pods in both tenants
    bound to nodes of every resource partition."""
    docs = []
    for namespace in DEMO_TENANTS.values():
        docs.append(f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n")
    nodes = [f"{rp}-node-{i}" for rp in rps for i in (1, 2)]
    for node in nodes:
        docs.append(
            f"apiVersion: v1\nkind: Node\nmetadata: {{name: {node}, labels: {{demo: 'true'}}}}\n"
        )
    for namespace in DEMO_TENANTS.values():
        for rp in rps:
            node = f"{rp}-node-1"
            docs.append(
                "apiVersion: v1\nkind: Pod\n"
                f"metadata: {{name: web-{node}, namespace: {namespace}}}\n"
                f"spec: {{nodeName: {node}, containers: [{{name: app, image: registry.k8s.io/pause:3.10}}]}}\n"
            )
    return "---\n".join(docs)


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=6443, help="proxy port on 127.0.0.1")
    parser.add_argument("--no-demo", action="store_true")
    args = parser.parse_args()

    ready = LOCAL / "run" / "ready"
    ready.unlink(missing_ok=True)
    ready.parent.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    started = time.monotonic()
    fed = Federation(LOCAL / "federation")
    proxy: ProxyProcess | None = None
    try:
        fed.start()
        fed_seconds = time.monotonic() - started
        proxy = ProxyProcess(fed, LOCAL / "federation" / "proxy", port=args.port).start()
        kubeconfigs = LOCAL / "kubeconfigs"
        kubeconfigs.mkdir(parents=True, exist_ok=True)
        shutil.copy(
            fed.issue_client_kubeconfig("proxy-admin", user="admin", groups=[PROXY_ADMINS_GROUP], server=proxy.server),
            kubeconfigs / "proxy.yaml",
        )
        for p in fed.partitions:
            shutil.copy(p.admin_kubeconfig, kubeconfigs / f"{p.name}.yaml")
        kubectl = find_kubectl()
        if not args.no_demo:
            rps = [p.name for p in fed.partitions if p.role == "resource"]
            subprocess.run(
                [kubectl, "--kubeconfig", str(kubeconfigs / "proxy.yaml"), "apply", "-f", "-"],
                input=demo_manifests(rps).encode(),
                check=True,
            )
        total = time.monotonic() - started
        pids = [proc.popen.pid for proc in fed._procs] + ([proxy.popen.pid] if proxy.popen else [])
        ready.write_text(proxy.server + "\n")
        k = f"{kubectl} --kubeconfig {kubeconfigs / 'proxy.yaml'}"
        print(
            f"\npartition-proxy is serving at {proxy.server} in front of "
            f"{', '.join(f'{p.name} ({p.role})' for p in fed.partitions)}\n"
            f"federation started in {fed_seconds:.1f} s, everything ready in {total:.1f} s; "
            f"memory of all {len(pids)} processes: {rss_mib(pids):.0f} MiB RSS\n\n"
            "Try:\n"
            f"  {k} get nodes\n"
            f"  {k} get pods -A -o wide\n"
            f"  {k} get nodes,pods -A\n"
            f"  {k} get pods -A -w\n"
            f"  {kubectl} --kubeconfig {kubeconfigs / 'tp2.yaml'} get pods -A   # straight to tp2\n"
            "Ctrl-C stops everything.\n",
            flush=True,
        )
        while not stop.wait(1.0):
            if proxy.popen is None or proxy.popen.poll() is not None:
                print("partition-proxy exited; see", proxy.log_path)
                break
    finally:
        ready.unlink(missing_ok=True)
        if proxy is not None:
            proxy.stop()
        fed.stop()
        print("stopped", flush=True)
    _ = resource


if __name__ == "__main__":
    main()
