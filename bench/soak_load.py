"""The soak's load (bench/soak.py): the kubelet fleet and the workload churn.

- Fixtures straight on the RPs, before any client starts: the fleet's Nodes and Leases (as
  bench/fleet.py creates them) and the kwok nodes the workload runs on (Ready, untainted, as
  bench/density.py creates them).
- `start_fleets`: `rvcheck fleet` (client-go kubelets, hack/k8s/clients/rvcheck/fleet.go), one
  process per replica, each with half the kubelets, pinned to their RP.
- `Churn`: a steady workload through the replicas (each request to the first replica that
  answers, as through a Service): Deployments scaled up and down, Jobs, and a namespace
  deleted and created again, all with pods on the kwok nodes. 5xx and unanswered requests go
  to the error log; a 409 or 404 is part of the workload's life (a namespace still
  terminating), not an error.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.common import NODE_LEASES, client_ssl, close_sessions, hollow_node, new_session, node_lease, post_objects
from bench.density import GoClients, ready_kwok_node, untaint_nodes
from bench.fleet import RVCHECK, fleet_node_names
from bench.soak_record import ErrorLog
from hack.controlplane import KWOK_LABEL
from hack.federation import Federation

# tenants of the churn: a..m live in tp1, n..z in tp2 (hack/proxy_process.py tenant_ranges)
TENANTS = ("acme", "bolt", "nova", "zeta")
CYCLED_TENANTS = ("echo", "tango")  # their namespace is deleted and created again (tp1, tp2)
KWOK_NODE_INFIX = "-kwok-"
FLEET_NODE_INFIX = "-fleet-"
POD_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "soak"}},
    "spec": {
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
        "nodeSelector": {KWOK_LABEL[0]: KWOK_LABEL[1]},
        "terminationGracePeriodSeconds": 0,
    },
}
# seconds between churn actions of each kind
SCALE_SECONDS = 3.0
JOB_SECONDS = 15.0
NAMESPACE_SECONDS = 60.0
NAMESPACE_GONE_TIMEOUT = 120.0
MAX_REPLICAS = 4


def kwok_node_names(n: int) -> list[str]:
    return [f"rp{1 + i % 2}{KWOK_NODE_INFIX}{i:03d}" for i in range(n)]


async def create_fixtures(fed: Federation, fleet_nodes: Sequence[str], kwok_nodes: Sequence[str]) -> dict[str, Any]:
    """The fleet's Nodes and Leases and the kwok nodes (Ready, untainted), straight on their RPs."""
    by_rp: dict[str, list[str]] = {}
    for name in fleet_nodes:
        by_rp.setdefault(name.split("-", 1)[0], []).append(name)
    kwok_by_rp: dict[str, list[str]] = {}
    for name in kwok_nodes:
        kwok_by_rp.setdefault(name.split("-", 1)[0], []).append(name)
    rps = sorted(set(by_rp) | set(kwok_by_rp))
    sessions = {x: new_session(client_ssl(fed, fed.partition(x).admin_cert)) for x in rps}
    deadline = time.monotonic() + 120 + len(fleet_nodes) / 20
    try:
        nodes = await asyncio.gather(*(post_objects(sessions[x], fed.partition(x).server, by_rp.get(x, []), hollow_node,
                                                    deadline=deadline) for x in rps))
        leases = await asyncio.gather(*(post_objects(sessions[x], fed.partition(x).server, by_rp.get(x, []), node_lease,
                                                     deadline=deadline, path=NODE_LEASES) for x in rps))
        kwok = await asyncio.gather(*(post_objects(sessions[x], fed.partition(x).server, kwok_by_rp.get(x, []), ready_kwok_node,
                                                   deadline=deadline) for x in rps))
        await asyncio.gather(*(untaint_nodes(sessions[x], fed.partition(x).server, kwok_by_rp.get(x, []), deadline=deadline)
                               for x in rps))
    finally:
        await close_sessions(sessions)
    return {x: {"fleet_nodes": a, "leases": b, "kwok_nodes": c} for x, a, b, c in zip(rps, nodes, leases, kwok)}


@dataclass
class Fleet:
    name: str
    proc: Any
    report: Path
    status_file: Path
    kubelets: int


def start_fleets(fed: Federation, servers: Mapping[str, str], names: Sequence[str], directory: Path, clients: GoClients, *,
                 ramp: float, lease_interval: float, status_interval: float) -> list[Fleet]:
    """One `rvcheck fleet` per replica, the kubelets split in contiguous halves (each half
    holds nodes of both RPs), every kubelet pinned to its RP through its replica."""
    if not RVCHECK.exists():
        raise FileNotFoundError(f"{RVCHECK} missing: run `bash hack/build-components.sh`")
    out = []
    parts = len(servers)
    for i, (replica, server) in enumerate(servers.items()):
        mine = list(names[i * len(names) // parts:(i + 1) * len(names) // parts])
        if not mine:
            continue
        nodes_file = directory / f"fleet-{replica}-nodes.txt"
        nodes_file.write_text("\n".join(mine) + "\n")
        status, mark = directory / f"fleet-{replica}-status.json", directory / f"fleet-{replica}-mark"
        kubeconfig = fed.issue_client_kubeconfig(f"fleet-{replica.lower()}", user="fleet", server=server)
        args = ["fleet", "--kubeconfig", str(kubeconfig), "--ca-cert", str(fed.ca.cert_file), "--ca-key", str(fed.ca.key_file),
                "--nodes-file", str(nodes_file), "--ramp", f"{ramp:g}", "--status-interval", f"{status_interval:g}s",
                "--lease-interval", f"{lease_interval:g}s", "--status-file", str(status), "--mark-file", str(mark),
                "--report-interval", "60s", "--content-type", "protobuf", "--pin"]
        proc, report = clients.start(f"fleet-{replica}", args)
        out.append(Fleet(name=replica, proc=proc, report=report, status_file=status, kubelets=len(mine)))
    return out


def fleet_names(n: int) -> list[str]:
    return fleet_node_names(n)


@dataclass
class Churn:
    """The workload churn (module docstring) through `servers` (replica -> URL)."""

    servers: Mapping[str, str]
    http: aiohttp.ClientSession
    errors: ErrorLog
    rng: random.Random = field(default_factory=lambda: random.Random(29))
    counts: dict[str, int] = field(default_factory=dict)
    _jobs: int = 0
    _cycle: int = 0

    async def request(self, method: str, path: str, body: Any = None, *, what: str, params: Mapping[str, str] | None = None) -> int:
        """One request through the first replica that answers (0: none answered)."""
        data = orjson.dumps(body) if body is not None else None
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        order = list(self.servers.items())
        self.rng.shuffle(order)
        for name, server in order:
            try:
                async with self.http.request(method, server + path, data=data, params=params,
                                             headers={"Content-Type": content_type},
                                             timeout=aiohttp.ClientTimeout(total=30, sock_connect=5)) as resp:
                    text = await resp.read()
                    if resp.status >= 500:
                        self.errors.add(resp.status, f"churn {what}@{name}", text[:200].decode(errors="replace"))
                    self.counts[f"{what} {resp.status}"] = self.counts.get(f"{what} {resp.status}", 0) + 1
                    return resp.status
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                self.errors.add(0, f"churn {what}@{name}", repr(exc))
        self.counts[f"{what} unanswered"] = self.counts.get(f"{what} unanswered", 0) + 1
        return 0

    async def setup(self) -> None:
        """The tenants' namespaces with a Deployment each (retried until they exist)."""
        for tenant in (*TENANTS, *CYCLED_TENANTS):
            await self._namespace_with_deployment(f"{tenant}-soak" if tenant in TENANTS else f"{tenant}-cycle")

    async def _namespace_with_deployment(self, namespace: str, replicas: int = 2) -> None:
        for _ in range(60):
            status = await self.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                                        "metadata": {"name": namespace}}, what="create namespace")
            if status in (201, 409):
                break
            await asyncio.sleep(1)
        for _ in range(60):
            status = await self.request("POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment("web", replicas),
                                        what="create deployment")
            if status in (201, 409):
                return
            await asyncio.sleep(1)

    async def scale(self) -> None:
        while True:
            await asyncio.sleep(SCALE_SECONDS)
            namespace = f"{self.rng.choice(TENANTS)}-soak"
            await self.request("PATCH", f"/apis/apps/v1/namespaces/{namespace}/deployments/web",
                               {"spec": {"replicas": self.rng.randint(0, MAX_REPLICAS)}}, what="scale deployment")

    async def jobs(self) -> None:
        while True:
            await asyncio.sleep(JOB_SECONDS)
            namespace = f"{TENANTS[self._jobs % len(TENANTS)]}-soak"
            await self.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job(f"job-{self._jobs}"), what="create job")
            self._jobs += 1

    async def namespaces(self) -> None:
        """Delete a cycled tenant's namespace, wait until it is gone, create it again."""
        while True:
            await asyncio.sleep(NAMESPACE_SECONDS)
            namespace = f"{CYCLED_TENANTS[self._cycle % len(CYCLED_TENANTS)]}-cycle"
            self._cycle += 1
            await self.request("DELETE", f"/api/v1/namespaces/{namespace}", what="delete namespace")
            deadline = time.monotonic() + NAMESPACE_GONE_TIMEOUT
            while time.monotonic() < deadline:
                if await self.request("GET", f"/api/v1/namespaces/{namespace}", what="get namespace") == 404:
                    break
                await asyncio.sleep(2)
            else:
                self.counts["namespace not gone in time"] = self.counts.get("namespace not gone in time", 0) + 1
            await self._namespace_with_deployment(namespace)

    def coroutines(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """The churn's loops, by task name (the caller owns the tasks)."""
        return [("churn-scale", self.scale()), ("churn-jobs", self.jobs()), ("churn-namespaces", self.namespaces())]

    async def stop_workload(self) -> None:
        """Scale every Deployment to 0 (the end of the run: pods leave, nothing is left pending)."""
        for tenant in TENANTS:
            await self.request("PATCH", f"/apis/apps/v1/namespaces/{tenant}-soak/deployments/web", {"spec": {"replicas": 0}},
                               what="scale deployment")


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "soak"}}, "template": POD_TEMPLATE},
    }


def job(name: str) -> dict[str, Any]:
    template = {"metadata": {"labels": {"job": name}}, "spec": {**POD_TEMPLATE["spec"], "restartPolicy": "Never"}}
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"completions": 1, "parallelism": 1, "backoffLimit": 2, "ttlSecondsAfterFinished": 20, "template": template},
    }
